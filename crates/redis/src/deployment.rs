//! What `distlock check` says of a Redis deployment: whether the server
//! may evict a held lock, and what a restart does to locks; in a cluster,
//! of every master, and in quorum mode of every server, each named where
//! it falls short.

use std::time::Duration;

use distlock_core::Result;
use distlock_core::backend::{Feature, FeatureState, ServerInfo};
use redis::aio::ConnectionLike;

use crate::error::{from_redis, timed_out};

/// The version and clock of the server `connection` reaches, asked within
/// `timeout`.
pub(crate) async fn server_info(
    connection: &mut (impl ConnectionLike + Send),
    on: &str,
    timeout: Duration,
) -> Result<ServerInfo> {
    let what = format!("asking the server for its version and time{on}");
    let ask = async {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(connection)
            .await?;
        let time: (u64, u64) = redis::cmd("TIME").query_async(connection).await?;
        let features = features(connection).await;
        Ok::<_, redis::RedisError>((info, time, features))
    };
    let (info, (seconds, micros), features) = tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| timed_out("server info", timeout))?
        .map_err(|e| from_redis(&what, e))?;
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(|version| format!("Redis {}", version.trim()));
    let clock =
        std::time::UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_micros(micros);
    Ok(features.into_iter().fold(
        ServerInfo::new(version, Some(clock)),
        ServerInfo::with_feature,
    ))
}

/// The features, read with `CONFIG GET`. A server that refuses `CONFIG`
/// (a managed service, or an ACL without it) is said to, with what to
/// make sure of by other means.
pub(crate) async fn features(connection: &mut (impl ConnectionLike + Send)) -> Vec<Feature> {
    let settings = async {
        let memory: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory*")
            .query_async(connection)
            .await?;
        let persistence: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("append*")
            .query_async(connection)
            .await?;
        Ok::<_, redis::RedisError>((memory, persistence))
    };
    match settings.await {
        Ok((memory, persistence)) => vec![
            eviction(
                setting(&memory, "maxmemory"),
                setting(&memory, "maxmemory-policy"),
            ),
            persistence_of(
                setting(&persistence, "appendonly"),
                setting(&persistence, "appendfsync"),
            ),
        ],
        Err(error) => {
            let refused = format!("the server refused CONFIG GET ({error})");
            vec![
                Feature::degraded(
                    "eviction",
                    format!(
                        "{refused}: make sure its maxmemory-policy is noeviction, or a full \
                         server may evict a held lock"
                    ),
                ),
                Feature::degraded(
                    "persistence",
                    format!("{refused}: what a restart does to held locks is unknown"),
                ),
            ]
        }
    }
}

/// One feature per name from the features of every master of a cluster,
/// or every server of a quorum (`each` names them: `master`, `server`),
/// each given with its address, as bad as the worst one's: in a cluster a
/// lock lives on one master, so one master that may evict or forget it
/// puts those locks at risk; in quorum mode every server holds a copy of
/// the locks it granted, and one that may lose them leaves those locks a
/// server short of the margin the quorum counts on. The detail names the
/// servers behind each finding, worst first, the findings apart by ` | `
/// (a detail may hold a `;`).
pub(crate) fn across(each: &str, masters: &[(String, Vec<Feature>)]) -> Vec<Feature> {
    let Some((_, first)) = masters.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|feature| {
            // Each distinct finding, with the masters that have it.
            let mut findings: Vec<(FeatureState, &str, Vec<&str>)> = Vec::new();
            for (address, features) in masters {
                let Some(found) = features.iter().find(|found| found.name == feature.name) else {
                    continue;
                };
                match findings
                    .iter_mut()
                    .find(|(state, detail, _)| *state == found.state && *detail == found.detail)
                {
                    Some((_, _, at)) => at.push(address),
                    None => findings.push((found.state, &found.detail, vec![address])),
                }
            }
            findings.sort_by_key(|(state, _, _)| std::cmp::Reverse(severity(*state)));
            let worst = findings
                .first()
                .map_or(feature.state, |(state, _, _)| *state);
            let detail = match findings.as_slice() {
                [(_, detail, _)] => {
                    format!("every {each} ({}): {detail}", masters_list(masters))
                }
                _ => findings
                    .iter()
                    .map(|(_, detail, at)| format!("{}: {detail}", at.join(", ")))
                    .collect::<Vec<_>>()
                    .join(" | "),
            };
            match severity(worst) {
                0 => Feature::present(feature.name, detail),
                1 => Feature::degraded(feature.name, detail),
                _ => Feature::missing(feature.name, detail),
            }
        })
        .collect()
}

/// How bad a state is, from 0 (present).
fn severity(state: FeatureState) -> u8 {
    match state {
        FeatureState::Present => 0,
        FeatureState::Degraded => 1,
        _ => 2,
    }
}

fn masters_list(masters: &[(String, Vec<Feature>)]) -> String {
    masters
        .iter()
        .map(|(address, _)| address.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A value from `CONFIG GET`'s flat list of names and values.
fn setting<'a>(pairs: &'a [String], name: &str) -> Option<&'a str> {
    pairs
        .chunks_exact(2)
        .find(|pair| pair[0] == name)
        .map(|pair| pair[1].as_str())
}

/// Only `noeviction`, or no memory limit, keeps held locks: any other
/// policy may evict one under memory pressure, and grant it to another
/// before its holder's next extension notices.
fn eviction(maxmemory: Option<&str>, policy: Option<&str>) -> Feature {
    const NAME: &str = "eviction";
    let policy = policy.unwrap_or("unknown");
    if policy == "noeviction" {
        Feature::present(
            NAME,
            "maxmemory-policy noeviction: a full server refuses new locks instead of \
             dropping held ones",
        )
    } else if maxmemory == Some("0") {
        Feature::present(
            NAME,
            format!(
                "no memory limit (maxmemory 0), so {policy} never evicts; should one be set, \
                 set maxmemory-policy noeviction with it"
            ),
        )
    } else {
        Feature::missing(
            NAME,
            format!(
                "maxmemory-policy {policy} with maxmemory {}: a full server can evict a held \
                 lock and grant it to another; set maxmemory-policy noeviction",
                maxmemory.unwrap_or("unknown")
            ),
        )
    }
}

/// What a restart or a crash does to held locks. Tokens increase either
/// way: a name's counter is floored by the server's clock when missing.
fn persistence_of(appendonly: Option<&str>, appendfsync: Option<&str>) -> Feature {
    const NAME: &str = "persistence";
    match (appendonly, appendfsync) {
        (Some("yes"), Some("always")) => Feature::present(
            NAME,
            "AOF with appendfsync always: a restart keeps every acknowledged lock",
        ),
        (Some("yes"), fsync) => Feature::degraded(
            NAME,
            format!(
                "AOF with appendfsync {}: a crash can forget the locks granted in the last \
                 second, which others may then take before their holders' next extension \
                 notices; appendfsync always closes that window",
                fsync.unwrap_or("unknown")
            ),
        ),
        _ => Feature::degraded(
            NAME,
            "no AOF: a restart forgets held locks, which others may take before their \
             holders' next extension reports the loss (fencing tokens still increase); \
             appendonly yes with appendfsync always keeps them",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noeviction_or_no_limit_keeps_locks() {
        assert_eq!(
            eviction(Some("1000"), Some("noeviction")).state,
            FeatureState::Present
        );
        assert_eq!(
            eviction(Some("0"), Some("allkeys-lru")).state,
            FeatureState::Present
        );
        for policy in ["allkeys-lru", "volatile-ttl", "allkeys-random"] {
            let feature = eviction(Some("1000000"), Some(policy));
            assert_eq!(feature.state, FeatureState::Missing, "{policy}");
            assert!(feature.detail.contains(policy), "{}", feature.detail);
        }
        assert_eq!(eviction(None, None).state, FeatureState::Missing);
    }

    #[test]
    fn only_an_aof_synced_on_every_write_keeps_every_lock() {
        assert_eq!(
            persistence_of(Some("yes"), Some("always")).state,
            FeatureState::Present
        );
        assert_eq!(
            persistence_of(Some("yes"), Some("everysec")).state,
            FeatureState::Degraded
        );
        assert_eq!(
            persistence_of(Some("no"), Some("always")).state,
            FeatureState::Degraded
        );
    }

    #[test]
    fn a_cluster_is_as_safe_as_its_worst_master_which_is_named() {
        let safe = || {
            vec![
                eviction(Some("0"), Some("noeviction")),
                persistence_of(Some("yes"), Some("always")),
            ]
        };
        let lru = vec![
            eviction(Some("1000000"), Some("allkeys-lru")),
            persistence_of(Some("yes"), Some("always")),
        ];
        let masters = vec![
            ("127.0.0.1:7000".to_owned(), safe()),
            ("127.0.0.1:7001".to_owned(), lru),
            ("127.0.0.1:7002".to_owned(), safe()),
        ];
        let merged = across("master", &masters);
        assert_eq!(merged.len(), 2);
        let eviction = &merged[0];
        assert_eq!(eviction.name, "eviction");
        assert_eq!(eviction.state, FeatureState::Missing);
        assert!(
            eviction
                .detail
                .starts_with("127.0.0.1:7001: maxmemory-policy allkeys-lru"),
            "the faulty master first, by its address: {}",
            eviction.detail
        );
        let (_, safe) = eviction.detail.split_once(" | ").expect("two findings");
        assert!(
            safe.starts_with("127.0.0.1:7000, 127.0.0.1:7002: maxmemory-policy noeviction"),
            "{}",
            eviction.detail
        );
        let persistence = &merged[1];
        assert_eq!(persistence.state, FeatureState::Present);
        assert!(
            persistence
                .detail
                .starts_with("every master (127.0.0.1:7000, 127.0.0.1:7001, 127.0.0.1:7002): "),
            "{}",
            persistence.detail
        );
        assert!(across("master", &[]).is_empty());
    }

    #[test]
    fn settings_are_read_from_the_flat_list() {
        let pairs: Vec<String> = ["maxmemory", "0", "maxmemory-policy", "noeviction"]
            .map(str::to_owned)
            .to_vec();
        assert_eq!(setting(&pairs, "maxmemory-policy"), Some("noeviction"));
        assert_eq!(setting(&pairs, "appendonly"), None);
    }
}

//! What `distlock check` says of a Redis deployment: whether the server
//! may evict a held lock, and what a restart does to locks.

use distlock_core::Feature;
use redis::aio::ConnectionLike;

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
    use distlock_core::FeatureState;

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
    fn settings_are_read_from_the_flat_list() {
        let pairs: Vec<String> = ["maxmemory", "0", "maxmemory-policy", "noeviction"]
            .map(str::to_owned)
            .to_vec();
        assert_eq!(setting(&pairs, "maxmemory-policy"), Some("noeviction"));
        assert_eq!(setting(&pairs, "appendonly"), None);
    }
}

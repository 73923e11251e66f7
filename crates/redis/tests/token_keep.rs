//! `?token_keep=`: how long a name's token counter and record of terms
//! outlive its last grant, read back as the keys' `PTTL` on the servers of
//! every mode (issue 38, finding 9).

mod support;

use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend, WaitState};
use distlock_core::{Claim, Error, Holder};
use distlock_redis::{DEFAULT_TOKEN_KEEP, RedisBackend, RedisConfig, redis};

use support::{backend, cluster_url, raw, unique, url};

const LEASE: Duration = Duration::from_secs(30);

/// `base` with `option` added to its query.
fn with_option(base: &str, option: &str) -> String {
    let joint = if base.contains('?') { '&' } else { '?' };
    format!("{base}{joint}{option}")
}

/// One grant of a fresh name, as a campaign's (which records its term):
/// the name's token counter and record of terms.
async fn campaign_keys(backend: &RedisBackend) -> [String; 2] {
    let name = unique("keep");
    let mut request = AcquireRequest::new(
        name.clone(),
        Claim::Exclusive,
        LEASE,
        Holder::this_process(Some("redis-tests")).into(),
    );
    request.records_term = backend.term_log().is_some();
    let attempt = backend
        .try_acquire(&request, &mut WaitState::new())
        .await
        .expect("try_acquire");
    assert!(matches!(attempt, Attempt::Acquired { .. }), "{attempt:?}");
    let keys = backend.keys_of(&name);
    let terms = keys[0].replace("}:x", "}:terms");
    [keys[4].clone(), terms]
}

/// The `PTTL` of `key` in ms, on one server or, routed by the key, on a
/// cluster.
async fn pttl(url: &str, key: &str) -> i64 {
    let mut command = redis::cmd("PTTL");
    command.arg(key);
    if !url.contains("mode=cluster") {
        return command
            .query_async(&mut raw(url).await)
            .await
            .expect("PTTL");
    }
    let seeds: Vec<String> = url
        .trim_start_matches("redis://")
        .split('?')
        .next()
        .expect("hosts")
        .split(',')
        .map(|host| format!("redis://{host}"))
        .collect();
    let client = redis::cluster::ClusterClient::new(seeds).expect("a cluster client");
    let mut connection = client.get_async_connection().await.expect("connect");
    command.query_async(&mut connection).await.expect("PTTL")
}

/// Each server of `url`, as a URL of its own (one for single and cluster
/// mode, where the key is routed).
fn servers_of(url: &str) -> Vec<String> {
    if !url.contains("mode=quorum") {
        return vec![url.to_owned()];
    }
    let hosts = url.trim_start_matches("redis://").split('?').next();
    hosts
        .expect("hosts")
        .split(',')
        .map(|host| format!("redis://{host}"))
        .collect()
}

fn quorum_url() -> String {
    std::env::var("DISTLOCK_TEST_REDIS_QUORUM_URL").unwrap_or_else(|_| {
        panic!("DISTLOCK_TEST_REDIS_QUORUM_URL is not set: run the tests with scripts/test")
    })
}

#[tokio::test]
async fn the_counter_and_the_terms_are_kept_as_long_as_token_keep_says_in_every_mode() {
    let keep = Duration::from_secs(120);
    for base in [url(), quorum_url(), cluster_url()] {
        let url = with_option(&base, "token_keep=2m");
        let backend = backend(&url).await;
        assert_eq!(backend.config().token_keep, keep);
        let [counter, terms] = campaign_keys(&backend).await;
        // Quorum mode keeps no record of terms; the others keep it with
        // the counter.
        let mut kept = vec![counter];
        if backend.term_log().is_some() {
            kept.push(terms);
        }
        for server in servers_of(&url) {
            for key in &kept {
                let left = pttl(&server, key).await;
                assert!(
                    left > 60_000 && left <= 120_000,
                    "{base}: {key} expires in {left} ms, within the 2 minutes kept"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_hand_over_keeps_the_counter_as_long_as_token_keep_says() {
    for base in [url(), cluster_url()] {
        let url = with_option(&base, "token_keep=2m");
        let backend = backend(&url).await;
        let name = unique("keep-hand-over");
        let first = support::grant(&backend, &name, Claim::Exclusive, LEASE)
            .await
            .expect("free");
        let counter = backend.keys_of(&name).remove(4);
        // Kept 2 minutes by the grant; the hand-over writes it again.
        let next = support::hand_over(&backend, &first).await;
        let left = pttl(&url, &counter).await;
        assert!(
            left > 60_000 && left <= 120_000,
            "{base}: the hand-over keeps the counter 2 minutes, not {left} ms"
        );
        assert!(backend.release(&next).await.expect("release"));
    }
}

#[tokio::test]
async fn without_token_keep_the_counter_is_kept_thirty_days() {
    let backend = backend(&url()).await;
    assert_eq!(backend.config().token_keep, DEFAULT_TOKEN_KEEP);
    let [counter, _] = campaign_keys(&backend).await;
    let left = pttl(&url(), &counter).await;
    let thirty_days = i64::try_from(DEFAULT_TOKEN_KEEP.as_millis()).expect("ms");
    assert!(
        left > thirty_days - 60_000 && left <= thirty_days,
        "kept {left} ms"
    );
}

#[tokio::test]
async fn a_token_keep_under_a_minute_or_not_a_duration_is_refused_with_how_to_fix_it() {
    for (keep, says) in [
        ("59s", "1m or more"),
        ("0m", "1m or more"),
        ("7", "such as 7d or 12h"),
        ("7days", "such as 7d or 12h"),
    ] {
        let url = with_option(&url(), &format!("token_keep={keep}"));
        match RedisBackend::open(&url).await {
            Err(Error::InvalidConfig { field, reason }) => {
                assert_eq!(field, "token_keep", "{keep}");
                assert!(reason.contains(says), "{keep}: {reason}");
            }
            other => panic!("{keep}: {other:?}"),
        }
    }
    // A configuration made in code is checked as a parsed one is.
    let mut config = RedisConfig::parse(&url()).expect("a URL");
    config.token_keep = Duration::from_secs(1);
    match RedisBackend::connect(config).await {
        Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "token_keep"),
        other => panic!("{other:?}"),
    }
}

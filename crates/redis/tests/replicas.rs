//! `?wait_replicas=N`, on a primary and a replica of the test's own: a
//! grant counts once the replica has it; with the replica gone, a new
//! grant fails and holds nothing, and the holder gives its lease up in
//! time since no extension is confirmed.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{LockClient, LossReason};
use distlock_redis::redis;

use support::{OwnServer, backend, client, eventually, options, raw, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_and_extensions_wait_for_the_replicas() {
    let primary = OwnServer::start(&[]).await;
    let port = primary.port().to_string();
    let mut replica = OwnServer::start(&["--replicaof", "127.0.0.1", &port]).await;
    let mut connection = raw(&primary.url()).await;
    eventually("the replica is online", || {
        let mut connection = connection.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut connection)
                .await
                .unwrap_or_default();
            info.contains("state=online")
        }
    })
    .await;

    let waiting = format!("{}?wait_replicas=1", primary.url());
    let holder = LockClient::new(Arc::new(backend(&waiting).await), options());
    let name = unique("replicated");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .expect("granted once the replica has it");
    guard.extend().await.expect("an extension the replica has");

    replica.kill();
    let other = unique("unreplicated");
    let error = holder
        .try_acquire(&other)
        .await
        .expect_err("no replica acknowledges the grant");
    let message = error.to_string();
    assert!(message.contains("did not reach 1 replica"), "{message}");
    // The grant the replica never had was released.
    let plain = client(&primary.url()).await;
    let free = plain
        .try_acquire(&other)
        .await
        .expect("try")
        .expect("released");
    assert!(free.release().await.expect("release"));

    let reason = tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("the holder gives its lease up");
    assert_eq!(reason, LossReason::Expired);
    let _ = guard.release().await;
    let _: () = redis::cmd("PING")
        .query_async(&mut connection)
        .await
        .unwrap();
}

#[tokio::test]
async fn wait_replicas_is_refused_in_quorum_mode_and_must_be_a_number() {
    for (url, says) in [
        (
            "redis://a:1,b:2,c:3?mode=quorum&wait_replicas=1",
            "is for mode=single",
        ),
        ("redis://a:1?wait_replicas=0", "whole number from 1"),
        ("redis://a:1?wait_replicas=two", "whole number from 1"),
    ] {
        let error = distlock_redis::RedisConfig::parse(url).expect_err(url);
        assert!(error.to_string().contains(says), "{url}: {error}");
    }
}

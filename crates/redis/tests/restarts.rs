//! What a restart does, on servers of the tests' own: without persistence
//! the locks are gone, and holders learn it at their next extension; with
//! an append-only log written on every command, they survive.

mod support;

use std::time::Duration;

use distlock_core::testing::assert_lost_to_a_restart;

use support::{OwnServer, client, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_is_reported_and_tokens_still_increase() {
    let mut server = OwnServer::start(&[]).await;
    let holder = client(&server.url()).await;
    let name = unique("restart");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("acquire");

    server.restart().await;
    // The restarted server answers that the grant is gone; its counter
    // went with it, and the next token comes from the server's clock.
    assert_lost_to_a_restart(guard, &client(&server.url()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_an_append_only_log_keeps_the_lock() {
    let mut server = OwnServer::start(&["--appendonly", "yes", "--appendfsync", "always"]).await;
    let holder = client(&server.url()).await;
    let name = unique("aof");
    let reader_name = unique("aof-readers");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("acquire");
    let reader = holder
        .acquire_with(
            &reader_name,
            distlock_core::AcquireOptions::new()
                .shared()
                .timeout(Duration::from_secs(10)),
        )
        .await
        .expect("a reader");
    let token = guard.fencing_token();

    server.restart().await;
    let other = client(&server.url()).await;
    assert!(
        other.try_acquire(&name).await.expect("try").is_none(),
        "the lock came back from the log"
    );
    assert!(
        other
            .try_acquire(&reader_name)
            .await
            .expect("try")
            .is_none(),
        "so did the reader, which keeps writers out"
    );
    // The holder extends it again through a new connection.
    guard.extend().await.expect("the holder still holds it");
    reader.extend().await.expect("the reader still holds it");
    assert!(!guard.is_lost() && !reader.is_lost());
    assert!(guard.release().await.expect("release"), "released as held");
    assert!(reader.release().await.expect("release"));
    let next = other
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("free once released");
    assert!(next.fencing_token() > token, "the counter came back too");
    next.release().await.expect("release");
}

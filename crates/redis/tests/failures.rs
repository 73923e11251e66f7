//! What the backend says when the server cannot do what it asks: a server
//! that is not Redis, a read-only replica, a server out of memory, scripts
//! flushed behind its back, and a subscriber connection that is cut.

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, Error, LockClient};
use distlock_redis::{RedisBackend, redis};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::{OwnServer, backend, client, eventually, raw, unique, url};

#[tokio::test]
async fn a_server_that_is_not_redis_is_named_as_such() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buffer = [0u8; 1024];
            let _ = socket.read(&mut buffer).await;
            let _ = socket
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    let opened = tokio::time::timeout(
        Duration::from_secs(60),
        RedisBackend::open(&format!("redis://127.0.0.1:{port}")),
    )
    .await
    .expect("opening ends");
    server.abort();
    let error = opened.expect_err("not a Redis server");
    assert!(error.is_transient(), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("redis") && message.contains("Redis"),
        "the message names Redis: {message}"
    );
}

#[tokio::test]
async fn refused_credentials_are_denied_without_showing_them() {
    let server = OwnServer::start(&["--requirepass", "right-password"]).await;
    let url = server.url().replace("redis://", "redis://:wrong-password@");
    let error = RedisBackend::open(&url).await.expect_err("refused");
    assert!(matches!(error, Error::Denied { .. }), "{error}");
    assert!(!error.to_string().contains("wrong-password"), "{error}");
    let right = server.url().replace("redis://", "redis://:right-password@");
    let locks = client(&right).await;
    locks
        .acquire_with(&unique("auth"), Duration::from_secs(5))
        .await
        .expect("the right password opens it")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_replica_gives_a_clear_error() {
    let primary = OwnServer::start(&[]).await;
    let port = primary.url().rsplit(':').next().unwrap().to_owned();
    let replica = OwnServer::start(&["--replicaof", "127.0.0.1", &port]).await;
    let backend = backend(&replica.url()).await;
    let locks = LockClient::new(std::sync::Arc::new(backend), support::options());
    let error = locks
        .try_acquire(&unique("replica"))
        .await
        .expect_err("a replica takes no writes");
    let message = error.to_string();
    assert!(message.contains("READONLY"), "{message}");
    assert!(message.contains("primary"), "{message}");
}

#[tokio::test]
async fn a_server_out_of_memory_gives_a_clear_error() {
    let server = OwnServer::start(&["--maxmemory-policy", "noeviction"]).await;
    let locks = client(&server.url()).await;
    let name = unique("oom");
    let held = locks
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .expect("acquire");
    let mut connection = raw(&server.url()).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query_async(&mut connection)
        .await
        .unwrap();
    let error = locks
        .try_acquire(&unique("oom"))
        .await
        .expect_err("no memory for a new grant");
    let message = error.to_string();
    assert!(message.contains("OOM"), "{message}");
    // An exclusive extension and a release add nothing, and are let
    // through.
    held.extend().await.expect("extend");
    assert!(held.release().await.expect("release"));
}

#[tokio::test]
async fn flushed_scripts_are_loaded_again() {
    let url = url();
    let locks = client(&url).await;
    let mut connection = raw(&url).await;
    let name = unique("flushed");
    for claim in [
        AcquireOptions::new(),
        AcquireOptions::new().shared(),
        AcquireOptions::new().permit(2),
    ] {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut connection)
            .await
            .unwrap();
        let guard = locks
            .acquire_with(&name, claim.timeout(Duration::from_secs(5)))
            .await
            .expect("acquired after SCRIPT FLUSH");
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut connection)
            .await
            .unwrap();
        guard.extend().await.expect("extended after SCRIPT FLUSH");
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(guard.release().await.expect("released after SCRIPT FLUSH"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_subscriber_turns_wake_ups_off_until_it_is_back() {
    let url = url();
    let waiter_backend = std::sync::Arc::new(backend(&url).await);
    eventually("wake-ups on", || async { waiter_backend.wake_ups() }).await;
    let mut connection = raw(&url).await;
    // Cut the subscriber: it is the connection in pub/sub mode with our
    // channels.
    let name = unique("cut");
    let waiter = LockClient::new(waiter_backend.clone(), support::options());
    let holder = client(&url).await;
    let held = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire_with(&name, Duration::from_secs(60)).await })
    };
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut connection)
        .await
        .unwrap();
    // Releases go unheard for a moment; the waiter polls meanwhile, and
    // gets the lock either way.
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the waiter is served")
        .expect("task")
        .expect("acquired");
    got.release().await.unwrap();
    eventually("wake-ups back on", || async { waiter_backend.wake_ups() }).await;
}

//! A client shared between Tokio runtimes, as a static client used by
//! several `#[tokio::test]`s or `block_on` calls is.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{LockClient, LockName, LockOptions, LossReason, MemoryBackend};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn leases_are_kept_after_the_runtime_that_started_the_keeper_shut_down() {
    let backend = Arc::new(MemoryBackend::new());
    let options = LockOptions::builder()
        .lease(Duration::from_millis(300))
        .build()
        .unwrap();
    let client = LockClient::new(backend.clone(), options.clone());
    let other = LockClient::new(backend, options);
    let before = LockName::new("before").unwrap();
    let after = LockName::new("after").unwrap();

    let first = runtime();
    let held = first
        .block_on(client.acquire_with(&before, Duration::ZERO))
        .unwrap();
    // The keeper task ran on this runtime, and ends with it.
    drop(first);

    runtime().block_on(async {
        // Nothing extends the first lease any more, and its holder is told.
        assert_eq!(held.lost().await, LossReason::KeeperStopped);
        drop(held);

        // A grant on this runtime starts a new keeper, which extends it
        // across three leases' worth of time.
        let kept = client.acquire_with(&after, Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!kept.is_lost());
        assert!(other.try_acquire(&after).await.unwrap().is_none());
        assert!(kept.release().await.unwrap());
    });
}

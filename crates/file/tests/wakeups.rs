//! Waiters in another client learn of a release through the directory
//! watch, not by polling.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{LockClient, LockName, LockOptions};
use distlock_file::FileBackend;

fn client(dir: &std::path::Path) -> LockClient {
    // A backoff of a minute: a waiter that gets the lock within the test's
    // bound can only have been woken by the release signal.
    let options = LockOptions::builder()
        .lease(Duration::from_secs(600))
        .backoff(Duration::from_secs(60), Duration::from_secs(60))
        .build()
        .unwrap();
    LockClient::new(Arc::new(FileBackend::open(dir).unwrap()), options)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_in_another_client() {
    let dir = tempfile::tempdir().unwrap();
    let holder = client(dir.path());
    let waiter = client(dir.path());
    let name = LockName::new("wake \r\n me").unwrap();
    let guard = holder.acquire_with(&name, Duration::ZERO).await.unwrap();
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire_with(&name, Duration::from_secs(30)).await })
    };
    // Let the waiter make its first attempt and start its minute-long sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.release().await.unwrap();
    let taken = waiting
        .await
        .unwrap()
        .expect("woken by the release, well before its next poll");
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_wakes_a_waiter() {
    let dir = tempfile::tempdir().unwrap();
    let holder = client(dir.path());
    let waiter = client(dir.path());
    let name = LockName::new("forced").unwrap();
    let guard = holder.acquire_with(&name, Duration::ZERO).await.unwrap();
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire_with(&name, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(holder.force_release(&name).await.unwrap());
    let taken = waiting.await.unwrap().expect("woken by the forced release");
    assert!(taken.fencing_token() > guard.fencing_token());
    drop(guard);
    taken.release().await.unwrap();
}

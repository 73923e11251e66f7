//! Releases wake waiters; forced releases reach the holder.

use std::time::Duration;

use distlock_core::backend::Backend;
use distlock_core::backend::BackendExt;
use distlock_core::{LockClient, LockGuard, LockName, LockOptions, LossReason, Result};
use tokio::task::JoinHandle;

use crate::common::*;

/// Options with a 30 s lease: far longer than any wait here, so that only
/// a wake-up (or polling) gets a waiter the lock in time.
fn long_lease() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// `name`, taken by `holder`.
async fn hold(holder: &LockClient, name: &LockName) -> LockGuard {
    holder
        .acquire_with(name, Duration::from_secs(5))
        .await
        .unwrap()
}

/// `waiter`'s wait for `name`, of `patience`, in a task of its own.
fn wait(waiter: &LockClient, name: &LockName, patience: Duration) -> JoinHandle<Result<LockGuard>> {
    let (waiter, name) = (waiter.clone(), name.clone());
    tokio::spawn(async move { waiter.acquire_with(&name, patience).await })
}

/// Releases `guard`: `waiting` is woken and gets the lock, which it
/// releases.
async fn hands_over(guard: LockGuard, waiting: JoinHandle<Result<LockGuard>>) {
    assert!(guard.release().await.unwrap());
    let taken = woken(waiting).await;
    assert!(taken.release().await.unwrap());
}

#[tokio::test]
async fn a_release_wakes_a_waiter_in_another_client() {
    let url = shared_url();
    let collection = unique("wake");
    let holder_backend = backend_at(&url, &collection).await;
    let waiter_backend = backend_at(&url, &collection).await;
    assert!(waiter_backend.wakeups().is_some());
    let long = long_lease();
    let holder = client(holder_backend, long.clone());
    let waiter = client(waiter_backend, long);
    let name = lock_name("wake");
    let guard = hold(&holder, &name).await;
    let waiting = wait(&waiter, &name, Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(200)).await;
    hands_over(guard, waiting).await;
}

#[tokio::test]
async fn many_waiters_on_many_names_are_all_woken() {
    let url = shared_url();
    let collection = unique("wake-many");
    let holder = client(backend_at(&url, &collection).await, LockOptions::default());
    let waiter = client(backend_at(&url, &collection).await, LockOptions::default());
    let names: Vec<_> = (0..8).map(|i| lock_name(&format!("many{i}"))).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(hold(&holder, name).await);
    }
    let mut waiting = Vec::new();
    for name in &names {
        waiting.push(wait(&waiter, name, PATIENCE));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
    for waiting in waiting {
        let taken = woken(waiting).await;
        assert!(taken.release().await.unwrap());
    }
}

#[tokio::test]
async fn a_forced_release_makes_the_holder_report_the_loss() {
    let url = shared_url();
    let collection = unique("force");
    let holder = client(
        backend_at(&url, &collection).await,
        short_lease(Duration::from_secs(3)),
    );
    let admin = backend_at(&url, &collection).await;
    let name = lock_name("force");
    let guard = hold(&holder, &name).await;
    assert!(admin.force_release(&name).await.unwrap());
    assert!(!admin.force_release(&name).await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(30), guard.lost())
        .await
        .expect("the holder learns of the forced release");
    assert_eq!(reason, LossReason::Refused);
    assert!(!guard.release().await.unwrap());
    assert!(admin.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn without_change_streams_waiters_poll() {
    let server = OwnServer::start_with(&["--standalone"]);
    let url = server.url();
    let collection = unique("standalone");
    let backend = backend_at(&url, &collection).await;
    assert!(backend.wakeups().is_none());
    let long = long_lease();
    let holder = client(backend, long.clone());
    let waiter = client(backend_at(&url, &collection).await, long);
    let name = lock_name("poll");
    let guard = hold(&holder, &name).await;
    let waiting = wait(&waiter, &name, PATIENCE);
    tokio::time::sleep(Duration::from_millis(200)).await;
    hands_over(guard, waiting).await;
}

#[tokio::test]
async fn extensions_wake_no_waiter() {
    let url = shared_url();
    let collection = unique("quiet");
    // The holder extends ten times a second; its lease is far from ending.
    let busy = LockOptions::builder()
        .lease(Duration::from_secs(20))
        .extend_every(Duration::from_millis(100))
        .build()
        .unwrap();
    let holder = client(backend_at(&url, &collection).await, busy);
    let attempts = TestBackend::wrapping(backend_at(&url, &collection).await);
    let waiter = LockClient::new(attempts.shared(), LockOptions::default());
    let name = lock_name("quiet");
    let guard = hold(&holder, &name).await;
    let waiting = wait(&waiter, &name, PATIENCE);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The first attempt, and at most one more when the change stream starts
    // covering the name; none for the extensions in between.
    let during = attempts.calls_of(Operation::Acquire);
    assert!((1..=2).contains(&during), "{during} attempts while held");
    hands_over(guard, waiting).await;
}

#[tokio::test]
async fn waiting_for_a_new_name_while_the_stream_polls_keeps_every_wake_up() {
    let url = shared_url();
    let collection = unique("rebuild");
    let long = long_lease();
    let holder = client(backend_at(&url, &collection).await, long.clone());
    let waiters = client(backend_at(&url, &collection).await, long);
    let first = lock_name("first");
    let second = lock_name("second");
    let first_guard = hold(&holder, &first).await;
    let second_guard = hold(&holder, &second).await;
    let first_waiter = wait(&waiters, &first, PATIENCE);
    // Let the stream for the first name settle into polling, then make it
    // take in a second name.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second_waiter = wait(&waiters, &second, PATIENCE);
    tokio::time::sleep(Duration::from_millis(300)).await;
    hands_over(second_guard, second_waiter).await;
    hands_over(first_guard, first_waiter).await;
}

//! Releases wake waiters; forced releases reach the holder.

use std::time::Duration;

use distlock_core::backend::Backend;
use distlock_core::backend::BackendExt;
use distlock_core::{LockClient, LockGuard, LockName, LockOptions, LossReason};
use tokio::task::JoinHandle;

use crate::common::*;
use distlock_core::testing::ADMIN_LIMIT;

/// A waiter's task: the lock it got, or why not.
type Waiting = JoinHandle<distlock_core::Result<LockGuard>>;

/// `holder` takes `name`, and then `waiter` waits for it, up to `wait`,
/// in a task of its own.
async fn held_and_awaited(
    holder: &LockClient,
    waiter: LockClient,
    name: &LockName,
    wait: Duration,
) -> (LockGuard, Waiting) {
    let guard = holder
        .acquire_with(name, Duration::from_secs(5))
        .await
        .unwrap();
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move { waiter.acquire_with(&name, wait).await })
    };
    (guard, waiting)
}

/// Releases `guard`: the waiter is woken, gets the lock and releases it.
async fn release_to_the_waiter(guard: LockGuard, waiting: Waiting) {
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
    let long = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .build()
        .unwrap();
    let holder = client(holder_backend, long.clone());
    let waiter = client(waiter_backend, long);
    let name = lock_name("wake");
    let (guard, waiting) = held_and_awaited(&holder, waiter, &name, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    release_to_the_waiter(guard, waiting).await;
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
        guards.push(
            holder
                .acquire_with(name, Duration::from_secs(5))
                .await
                .unwrap(),
        );
    }
    let mut waiting = Vec::new();
    for name in &names {
        let waiter = waiter.clone();
        let name = name.clone();
        waiting.push(tokio::spawn(async move {
            waiter.acquire_with(&name, PATIENCE).await
        }));
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
    let guard = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(admin.force_release(&name, ADMIN_LIMIT).await.unwrap());
    assert!(!admin.force_release(&name, ADMIN_LIMIT).await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(30), guard.lost())
        .await
        .expect("the holder learns of the forced release");
    assert_eq!(reason, LossReason::Refused);
    assert!(!guard.release().await.unwrap());
    assert!(admin.list(ADMIN_LIMIT).await.unwrap().is_empty());
}

#[tokio::test]
async fn without_change_streams_waiters_poll() {
    let server = OwnServer::start_with(&["--standalone"]);
    let url = server.url();
    let collection = unique("standalone");
    let backend = backend_at(&url, &collection).await;
    assert!(backend.wakeups().is_none());
    let long = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .build()
        .unwrap();
    let holder = client(backend, long.clone());
    let waiter = client(backend_at(&url, &collection).await, long);
    let name = lock_name("poll");
    let (guard, waiting) = held_and_awaited(&holder, waiter, &name, PATIENCE).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    release_to_the_waiter(guard, waiting).await;
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
    let (guard, waiting) = held_and_awaited(&holder, waiter, &name, PATIENCE).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The first attempt, and at most one more when the change stream starts
    // covering the name; none for the extensions in between.
    let during = attempts.calls_of(Operation::Acquire);
    assert!((1..=2).contains(&during), "{during} attempts while held");
    release_to_the_waiter(guard, waiting).await;
}

#[tokio::test]
async fn waiting_for_a_new_name_while_the_stream_polls_keeps_every_wake_up() {
    let url = shared_url();
    let collection = unique("rebuild");
    let long = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .build()
        .unwrap();
    let holder = client(backend_at(&url, &collection).await, long.clone());
    let waiters = client(backend_at(&url, &collection).await, long);
    let first = lock_name("first");
    let second = lock_name("second");
    let first_guard = holder
        .acquire_with(&first, Duration::from_secs(5))
        .await
        .unwrap();
    let second_guard = holder
        .acquire_with(&second, Duration::from_secs(5))
        .await
        .unwrap();
    let wait_for = |name: distlock_core::LockName| {
        let waiters = waiters.clone();
        tokio::spawn(async move { waiters.acquire_with(&name, PATIENCE).await })
    };
    let first_waiter = wait_for(first.clone());
    // Let the stream for the first name settle into polling, then make it
    // take in a second name.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second_waiter = wait_for(second.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(second_guard.release().await.unwrap());
    let taken = woken(second_waiter).await;
    assert!(taken.release().await.unwrap());
    assert!(first_guard.release().await.unwrap());
    let taken = woken(first_waiter).await;
    assert!(taken.release().await.unwrap());
}

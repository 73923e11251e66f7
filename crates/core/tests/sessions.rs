//! Backends whose grants hang on one session: the keeper renews the
//! session once per cadence while anything is held or waited for, and
//! never extends grants one by one.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::testing::{Failure, Operation, TestBackend};
use distlock_core::{LockClient, LockName, LockOptions, LossReason, MemoryBackend};

/// The memory backend behind a session, as etcd keeps keys on one lease:
/// a renewal extends every grant made through this instance.
fn session_over(store: Arc<MemoryBackend>) -> TestBackend {
    TestBackend::wrapping(store).with_session()
}

fn options() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(3))
        .build()
        .unwrap()
}

fn names(count: usize) -> Vec<LockName> {
    (0..count)
        .map(|i| LockName::new(format!("session-{i}")).unwrap())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn many_locks_cost_one_renewal_per_cadence_and_no_extension() {
    let backend = session_over(Arc::default());
    let client = LockClient::new(backend.shared(), options());
    let mut guards = Vec::new();
    for name in names(100) {
        guards.push(client.acquire_with(&name, Duration::ZERO).await.unwrap());
    }
    // Five cadences of a second each.
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let renewals = backend.calls_of(Operation::RenewSession);
    assert!(
        (4..=6).contains(&renewals),
        "{renewals} renewals in five cadences for 100 locks"
    );
    assert_eq!(backend.calls_of(Operation::Extend), 0);
    for guard in &guards {
        assert!(!guard.is_lost(), "the session kept {}", guard.name());
    }
    // Nothing held: the renewals stop.
    for guard in guards {
        guard.release().await.unwrap();
    }
    let after_release = backend.calls_of(Operation::RenewSession);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(backend.calls_of(Operation::RenewSession) <= after_release + 1);
}

#[tokio::test(start_paused = true)]
async fn a_session_that_is_gone_takes_every_lease_with_it() {
    let backend = session_over(Arc::default());
    let client = LockClient::new(backend.shared(), options());
    let mut guards = Vec::new();
    for name in names(3) {
        guards.push(client.acquire_with(&name, Duration::ZERO).await.unwrap());
    }
    backend.end_session();
    for guard in &guards {
        let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
            .await
            .expect("lost within a cadence");
        assert_eq!(reason, LossReason::Refused);
    }
}

#[tokio::test(start_paused = true)]
async fn unanswered_renewals_end_the_leases_when_they_run_out() {
    let backend = session_over(Arc::default());
    let client = LockClient::new(backend.shared(), options());
    let guard = client
        .acquire_with(&names(1)[0], Duration::ZERO)
        .await
        .unwrap();
    backend.fail_next(usize::MAX, Failure::Transient);
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost once the lease ran out");
    assert_eq!(reason, LossReason::Expired);
    assert!(
        backend.calls_of(Operation::RenewSession) >= 2,
        "the keeper kept trying"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_alone_keeps_the_session_renewed() {
    let store = Arc::new(MemoryBackend::new());
    let holder = LockClient::new(store.clone(), options());
    let name = &names(1)[0];
    let held = holder.acquire_with(name, Duration::ZERO).await.unwrap();
    let backend = session_over(store);
    let waiter = LockClient::new(backend.shared(), options());
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire_with(&name, Duration::from_secs(60)).await })
    };
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert!(
        backend.calls_of(Operation::RenewSession) >= 2,
        "a waiter holding nothing keeps its session: {} renewals",
        backend.calls_of(Operation::RenewSession)
    );
    held.release().await.unwrap();
    let guard = waiting.await.unwrap().unwrap();
    guard.release().await.unwrap();
}

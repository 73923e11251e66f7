//! Backends whose grants hang on one session: the keeper renews the
//! session once per cadence while anything is held or waited for, and
//! never extends grants one by one.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{Renewal, async_trait};
use distlock_core::testing::{Answer, Failure, Hook, Operation, TestBackend};
use distlock_core::{
    Error, LockClient, LockGuard, LockName, LockOptions, LossReason, MemoryBackend,
};

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

/// A client of `backend` holding one lock.
async fn one_lock(backend: &TestBackend) -> (LockClient, LockGuard) {
    let client = LockClient::new(backend.shared(), options());
    let guard = client
        .acquire_with(&names(1)[0], Duration::ZERO)
        .await
        .unwrap();
    (client, guard)
}

/// Waits until `guard`'s lease ran out, `backend` having been asked to
/// renew the session more than once meanwhile.
async fn runs_out_while_renewing(guard: &LockGuard, backend: &TestBackend) {
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost once the lease ran out");
    assert_eq!(reason, LossReason::Expired);
    assert!(
        backend.calls_of(Operation::RenewSession) >= 2,
        "the keeper kept renewing"
    );
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
    let (_client, guard) = one_lock(&backend).await;
    backend.fail_next(usize::MAX, Failure::Transient);
    runs_out_while_renewing(&guard, &backend).await;
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

/// A session that ends takes the grants made on it, and no grant of the
/// session the next grant started: renewals of the new session keep only
/// the new session's grants.
#[tokio::test(start_paused = true)]
async fn a_session_that_ends_takes_its_own_grants_and_no_others() {
    let backend = session_over(Arc::default());
    let client = LockClient::new(backend.shared(), options());
    let [first, second] = [0, 1].map(|i| names(2)[i].clone());
    let old = client.acquire_with(&first, Duration::ZERO).await.unwrap();
    backend.end_session();
    // Granted on a new session before any renewal heard of the old one's end.
    let new = client.acquire_with(&second, Duration::ZERO).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(2), old.lost())
        .await
        .expect("lost at the next renewal, a cadence away");
    assert_eq!(reason, LossReason::Refused);
    // Many leases later, the new session's grant is still kept.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!new.is_lost(), "the new session's grant was kept");
    new.extend().await.expect("its session is renewed");
    assert!(!old.release().await.unwrap(), "the old grant was not ours");
    assert!(new.release().await.unwrap());
}

/// Answers every renewal as a backend with no session to renew would.
#[derive(Debug)]
struct NoSession;

#[async_trait]
impl Hook for NoSession {
    async fn after(&self, answer: Answer<'_>) {
        if let Answer::RenewSession(outcome) = answer {
            *outcome = Ok(Renewal::nothing());
        }
    }
}

/// A renewal that renewed no session confirms no grant: the grants run
/// out at the end of their lease, and an extension asked for says so.
#[tokio::test(start_paused = true)]
async fn a_renewal_with_no_session_confirms_nothing() {
    let backend = session_over(Arc::default()).with_hook(Arc::new(NoSession));
    let (_client, guard) = one_lock(&backend).await;
    let error = guard.extend().await.expect_err("nothing was confirmed");
    assert!(
        error.to_string().contains("did not confirm"),
        "an unconfirmed extension says so: {error}"
    );
    runs_out_while_renewing(&guard, &backend).await;
}

/// Closing a client tries again after transient failures, within the
/// operation timeout, and then gives up with the last error.
#[tokio::test(start_paused = true)]
async fn close_tries_again_within_the_operation_timeout() {
    let backend = TestBackend::new();
    let client = LockClient::new(backend.shared(), options());
    backend.fail_next(2, Failure::Transient);
    client.close().await.expect("closed at the third try");
    assert_eq!(backend.calls_of(Operation::Close), 3);

    backend.fail_next(usize::MAX, Failure::Transient);
    let error = client.close().await.expect_err("never closed");
    assert!(matches!(error, Error::Backend { .. }), "{error}");
    assert!(backend.calls_of(Operation::Close) > 4, "it tried again");

    // What retrying cannot mend is answered at once.
    let before = backend.calls_of(Operation::Close);
    backend.fail_next(1, Failure::Denied);
    let error = client.close().await.expect_err("refused");
    assert!(matches!(error, Error::Denied { .. }), "{error}");
    assert_eq!(backend.calls_of(Operation::Close), before + 1);
}

//! Cases drawn from peers' recent bugs, so that distlock never has them.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::LockClient;
use distlock_core::testing::{Operation, TestBackend};

use crate::cases::grant;
use crate::fixture::Fixture;
use crate::support::{bounded, client, test_options, unique_name};

const PATIENCE: Duration = Duration::from_secs(10);

/// etcd #22082: a release sent again (its first answer lost) after the
/// lock went to someone else must not delete the new holder's lock.
pub async fn a_retried_release_never_deletes_a_newer_holders_lock(fixture: &dyn Fixture) {
    let name = unique_name("retried-release");
    let backend = fixture.backend().await;
    let first = grant(&*backend, &name, fixture.lease()).await;
    assert!(backend.release(&first).await.expect("the first release"));
    let second = client(fixture).await;
    let newer = second.acquire_with(&name, PATIENCE).await.expect("acquire");
    assert!(newer.fencing_token() > first.fencing_token);
    // The same release again, as a client that lost its answer sends it.
    assert!(
        !backend.release(&first).await.expect("the retried release"),
        "the retry finds nothing of its own"
    );
    let other = client(fixture).await;
    assert!(
        other.try_acquire(&name).await.expect("try").is_none(),
        "the newer holder keeps its lock"
    );
    newer.extend().await.expect("the newer holder extends");
    assert!(newer.release().await.expect("release"), "still held");
}

/// Redisson #7272: once a lock is released, its lease is never extended
/// again, even while another client holds the name.
pub async fn no_extension_after_release(fixture: &dyn Fixture) {
    let name = unique_name("no-renewal");
    let counted = TestBackend::wrapping(fixture.backend().await);
    let lease = fixture.lease();
    let first = LockClient::new(Arc::new(counted.clone()), test_options(lease));
    let guard = first.acquire_with(&name, PATIENCE).await.expect("acquire");
    assert!(guard.release().await.expect("release"));
    let extensions =
        counted.calls_of(Operation::Extend) + counted.calls_of(Operation::RenewSession);
    let second = client(fixture).await;
    let newer = second.acquire_with(&name, PATIENCE).await.expect("acquire");
    // Three of the first client's extension periods.
    bounded("three extension periods", tokio::time::sleep(lease * 3 / 4)).await;
    assert_eq!(
        counted.calls_of(Operation::Extend) + counted.calls_of(Operation::RenewSession),
        extensions,
        "a released lease was extended"
    );
    assert!(!newer.is_lost());
    assert!(newer.release().await.expect("release"));
}

/// etcd #22387: a waiter whose own session ended while it waited (its key
/// gone with it) must not be granted as if its key still stood in line.
/// Closing the waiter's backend ends its session where it has one (etcd
/// revokes it); a grant that follows must then be a real one, on a
/// session that lives: nobody else gets the name, and it extends.
pub async fn a_waiter_whose_session_ended_is_not_granted_on_it(fixture: &dyn Fixture) {
    let name = unique_name("ended-session-waiter");
    let lease = fixture.lease();
    let holder = client(fixture).await;
    let held = holder.acquire_with(&name, PATIENCE).await.expect("acquire");
    let backend = fixture.backend().await;
    let waiter = LockClient::new(backend.clone(), test_options(lease));
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move { waiter.acquire_with(&name, PATIENCE).await })
    };
    // Time for the waiter to stand in line, on a session where it has one.
    bounded("the waiter's first tries", tokio::time::sleep(lease / 4)).await;
    bounded("ending the waiter's session", backend.close())
        .await
        .expect("close the waiter's backend");
    let first = held.fencing_token();
    assert!(held.release().await.expect("release"), "still held");

    let granted = bounded("the waiter's grant", waiting)
        .await
        .expect("the waiter's task")
        .expect("the waiter is served");
    assert!(granted.fencing_token() > first);
    let other = client(fixture).await;
    assert!(
        other.try_acquire(&name).await.expect("try").is_none(),
        "the waiter's grant holds the name"
    );
    granted.extend().await.expect("the grant extends");
    assert!(!granted.is_lost());
    assert!(granted.release().await.expect("release"), "still held");
}

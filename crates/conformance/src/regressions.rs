//! Cases drawn from peers' recent bugs, so that distlock never has them.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::LockClient;
use distlock_core::testing::{Operation, TestBackend};

use crate::Fixture;
use crate::cases::grant;
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

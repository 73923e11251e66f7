//! Names, options and clients for the cases.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::TermLog;
use distlock_core::testing::quick_options;
use distlock_core::{AcquireOptions, Claim, Error, LockClient, LockName, LockOptions};

use crate::fixture::Fixture;

/// A fresh lock name: `prefix` plus 64 random bits, so that tests sharing a
/// server never meet.
pub fn unique_name(prefix: &str) -> LockName {
    LockName::new(format!("{prefix}-{:016x}", rand::random::<u64>())).expect("valid test name")
}

/// Options with the given lease, quick extension and short backoff.
pub fn test_options(lease: Duration) -> LockOptions {
    quick_options(lease)
        .label("conformance")
        .build()
        .expect("valid test options")
}

/// A client on a new connection of `fixture`, with its lease.
pub(crate) async fn client(fixture: &dyn Fixture) -> LockClient {
    client_with(fixture, fixture.lease()).await
}

/// A client on a new connection of `fixture` that keeps an idle
/// election's record of terms (see
/// [`Fixture::backend_keeping_idle_records`]).
pub(crate) async fn client_keeping_idle_records(fixture: &dyn Fixture) -> LockClient {
    LockClient::new(
        fixture.backend_keeping_idle_records().await,
        test_options(fixture.lease()),
    )
}

/// A client on a new connection of `fixture`, with `lease`.
pub(crate) async fn client_with(fixture: &dyn Fixture, lease: Duration) -> LockClient {
    LockClient::new(fixture.backend().await, test_options(lease))
}

/// A lease so long that a leaked grant would outlast any wait in a case,
/// so a case that then acquires proves nothing leaked.
pub(crate) const LEAK_CATCHING_LEASE: Duration = Duration::from_secs(60);

/// The time a case gives an administrative call it makes on a backend
/// directly.
pub(crate) use distlock_core::testing::ADMIN_LIMIT;

/// Runs `f` with a generous bound, so a broken backend fails instead of
/// hanging the suite.
pub(crate) async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within 60 s"))
}

pub(crate) fn shared<T>(value: T) -> Arc<T> {
    Arc::new(value)
}

/// Asserts that `name`'s record of terms keeps two leaders' terms only,
/// `kept` and then `next`, which names `kept` as the one before: the
/// grants `spoiled` (a campaign's that nobody received) left none.
pub(crate) async fn assert_only_leaders_recorded(
    log: &dyn TermLog,
    name: &LockName,
    (kept, next): (u64, u64),
    spoiled: &str,
) {
    let terms = log
        .terms_after(name, 0, ADMIN_LIMIT)
        .await
        .expect("read the terms");
    let recorded: Vec<_> = terms
        .iter()
        .map(|term| (term.holder.label.as_deref().unwrap_or(""), term.term))
        .collect();
    assert_eq!(
        recorded,
        [("kept", kept), ("next", next)],
        "only the leaders' terms, not {spoiled}"
    );
    assert_eq!(terms[1].previous, Some(kept), "next follows kept");
}

/// What keeps every holder of `claim`'s kind out: a writer for readers, the
/// semaphore's single permit for a semaphore of one.
pub(crate) fn exclusive_side(claim: Claim) -> Claim {
    match claim {
        Claim::Shared => Claim::Exclusive,
        other => other,
    }
}

/// `waiter` waits for `claim` on `name`, cancelled after `after` (a grant
/// that came first is released); once that call returns, `checker` must
/// take what keeps every `claim` out at once.
///
/// # Errors
/// What went wrong, for the caller to panic with: the wait failed other
/// than by its cancellation, or the lock was still held after it.
pub(crate) async fn cancelled_wait_leaves_nothing(
    checker: &LockClient,
    waiter: &LockClient,
    name: &LockName,
    claim: Claim,
    after: Duration,
) -> Result<(), String> {
    let options = AcquireOptions::new()
        .claim(claim)
        .timeout(Duration::from_secs(300))
        .cancel_on(tokio::time::sleep(after));
    match waiter.acquire_with(name, options).await {
        Ok(guard) => {
            guard.release().await.expect("release");
        }
        Err(Error::Cancelled { .. }) => {}
        Err(error) => return Err(error.to_string()),
    }
    let check = checker
        .try_acquire_with(name, exclusive_side(claim))
        .await
        .expect("try")
        .ok_or("the lock was still held after the call returned")?;
    check.release().await.expect("release");
    Ok(())
}

//! Names, options and clients for the cases.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::TermLog;
use distlock_core::testing::quick_options;
use distlock_core::{LockClient, LockName, LockOptions};

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

/// A client on a new connection of `fixture`, with `lease`.
pub(crate) async fn client_with(fixture: &dyn Fixture, lease: Duration) -> LockClient {
    LockClient::new(fixture.backend().await, test_options(lease))
}

/// A lease so long that a leaked grant would outlast any wait in a case,
/// so a case that then acquires proves nothing leaked.
pub(crate) const LEAK_CATCHING_LEASE: Duration = Duration::from_secs(60);

/// The time a case gives an administrative call (a listing, a forced
/// release, a read of terms) it makes on a backend directly, as a client
/// gives its operation timeout.
pub(crate) const ADMIN_LIMIT: Duration = Duration::from_secs(10);

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

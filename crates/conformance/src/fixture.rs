//! What a backend's test file implements to run the suite.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::Backend;

/// How a backend under test is reached.
#[async_trait::async_trait]
pub trait Fixture: Send + Sync {
    /// A new connection to the shared store, as another process would open
    /// it. Backends without connections may return the same instance.
    async fn backend(&self) -> Arc<dyn Backend>;

    /// A new connection, as [`backend`](Self::backend), to a store that
    /// keeps an idle election's record of terms. MongoDB's TTL index may
    /// delete a free lock document, its record with it, in the moment
    /// between one leader's resignation and the next campaign (a limit
    /// docs/mongodb.md states): its fixtures open one without the index,
    /// for the case that counts the terms kept.
    async fn backend_keeping_idle_records(&self) -> Arc<dyn Backend> {
        self.backend().await
    }

    /// A URL the `distlock` command can open to reach the same store; `None`
    /// for backends that live in one process.
    fn url(&self) -> Option<String> {
        None
    }

    /// The lease the cases use; backends with coarse expiry (memcached's
    /// whole seconds) raise it.
    fn lease(&self) -> Duration {
        Duration::from_secs(2)
    }

    /// How much longer than its lease an abandoned lock may outlive its
    /// holder's last extension: memcached rounds expiry up to whole seconds
    /// and adds one.
    fn expiry_slack(&self) -> Duration {
        Duration::ZERO
    }

    /// Whether a writer that waits behind another writer keeps later
    /// readers out. MongoDB's does not (see its guide), so that waiting on
    /// a plain lock costs no write.
    fn writers_wait_behind_writers_in_line(&self) -> bool {
        true
    }

    /// How many waiters have a place in `name`'s queue, read from the
    /// store, for a backend in fair mode (see
    /// [`Capabilities::fair`](distlock_core::backend::Capabilities::fair)); `None`
    /// where the store keeps no queue. The fair cases wait on it to know
    /// the order in which waiters asked.
    async fn queued(&self, _name: &distlock_core::LockName) -> Option<usize> {
        None
    }

    /// Whether the store finds a grant by its identity alone, as core's
    /// release of a grant whose answer was lost needs. Not where a grant
    /// lives in the state its answer carries (the file backend's `flock`,
    /// a PostgreSQL advisory session): losing the answer ends the grant,
    /// and its term can no longer be told apart.
    fn finds_grants_by_identity(&self) -> bool {
        true
    }
}

//! Who waits for a lock, for a backend whose store keeps its waiters (a
//! fair queue, a wait's own key or mark); see [`Abilities::waiters`].
//!
//! [`Abilities::waiters`]: crate::backend::Abilities::waiters

use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::info::Waiter;
use crate::name::LockName;

/// A backend's list of the waits its store keeps.
#[async_trait]
pub trait WaiterList: Send + Sync {
    /// Every wait the store keeps now, each with its lock's name, the
    /// waits of one name in the order they will be served (first first),
    /// or, where the store serves no order
    /// ([`serves_in_order`](Self::serves_in_order) is `false`), in the
    /// order they began.
    /// Read within `limit`, as every administrative call (see the
    /// [`Backend`](crate::backend::Backend#time-budget)'s time budget).
    ///
    /// # Errors
    /// A backend error.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn waiters(&self, limit: Duration) -> Result<Vec<(LockName, Waiter)>>;

    /// Whether every wait keeps its place in the store (etcd's keys), so
    /// that the list is complete ([`Waiters::Known`]); `false` where only
    /// waits for the whole lock do (a fair line), and a reader or a permit
    /// may wait unseen ([`Waiters::WholeLock`]).
    ///
    /// [`Waiters::Known`]: crate::Waiters::Known
    /// [`Waiters::WholeLock`]: crate::Waiters::WholeLock
    fn sees_every_wait(&self) -> bool;

    /// Whether the store serves a name's waits in the order
    /// [`waiters`](Self::waiters) lists them (a fair line, etcd's
    /// revisions), which is what a backend that keeps a line does; `false`
    /// where it keeps who waits but not a line (Redis's marks), so that
    /// whichever waiter asks first after a release is served, and the
    /// list is in the order the waits began.
    fn serves_in_order(&self) -> bool {
        true
    }
}

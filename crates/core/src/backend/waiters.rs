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
    /// waits of one name in the order they will be served (first first).
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
}

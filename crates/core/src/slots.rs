//! In-process coalescing: one slot per name, so that at most one task of a
//! client attempts or holds a given lock at a time.
//!
//! The slot is a fair (FIFO) async mutex. Tasks of the same process queue on
//! it instead of each polling the backend, so 16 waiters in one process cost
//! the server what one waiter costs; and when a guard is released, the next
//! task in line tries at once, without waiting out a backoff.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Mutex as AsyncMutex;

use crate::name::LockName;

#[derive(Debug, Clone, Default)]
pub(crate) struct Slots {
    slots: Arc<Mutex<HashMap<LockName, Arc<AsyncMutex<()>>>>>,
}

impl Slots {
    pub(crate) fn get(&self, name: &LockName) -> Arc<AsyncMutex<()>> {
        self.lock().entry(name.clone()).or_default().clone()
    }

    /// Forgets `name`'s slot when no task uses it any more.
    pub(crate) fn prune(&self, name: &LockName) {
        let mut slots = self.lock();
        if slots
            .get(name)
            .is_some_and(|slot| Arc::strong_count(slot) == 1)
        {
            slots.remove(name);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LockName, Arc<AsyncMutex<()>>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

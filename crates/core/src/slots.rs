//! In-process coalescing: one slot per name, so that at most one task of a
//! client attempts or holds a given lock at a time.
//!
//! The slot is a fair (FIFO) async mutex. Tasks of the same process queue on
//! it instead of each polling the backend, so 16 waiters in one process cost
//! the server what one waiter costs; and when a guard is released, the next
//! task in line tries at once, without waiting out a backoff.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::name::LockName;

type Table = HashMap<LockName, Arc<AsyncMutex<()>>>;

#[derive(Debug, Clone, Default)]
pub(crate) struct Slots {
    table: Arc<Mutex<Table>>,
}

/// The right to attempt or hold one name in this client. Dropping it passes
/// the slot to the next task in line, and forgets the slot when nobody
/// else wants it.
#[derive(Debug)]
pub(crate) struct SlotPermit {
    slots: Slots,
    name: LockName,
    permit: Option<OwnedMutexGuard<()>>,
}

impl Slots {
    /// Waits for `name`'s slot.
    ///
    /// # Cancel safety
    /// Cancel safe: a cancelled wait leaves the queue.
    pub(crate) async fn acquire(&self, name: &LockName) -> SlotPermit {
        let slot = self.slot(name);
        let mut pending = PruneOnDrop {
            slots: self,
            name,
            armed: true,
        };
        let permit = slot.lock_owned().await;
        pending.armed = false;
        self.permit(name, permit)
    }

    /// Takes `name`'s slot if nobody in this client has it.
    pub(crate) fn try_acquire(&self, name: &LockName) -> Option<SlotPermit> {
        let slot = self.slot(name);
        match slot.try_lock_owned() {
            Ok(permit) => Some(self.permit(name, permit)),
            Err(_) => {
                self.prune(name);
                None
            }
        }
    }

    fn permit(&self, name: &LockName, permit: OwnedMutexGuard<()>) -> SlotPermit {
        SlotPermit {
            slots: self.clone(),
            name: name.clone(),
            permit: Some(permit),
        }
    }

    fn slot(&self, name: &LockName) -> Arc<AsyncMutex<()>> {
        self.lock().entry(name.clone()).or_default().clone()
    }

    /// Forgets `name`'s slot when no task uses it any more.
    fn prune(&self, name: &LockName) {
        let mut table = self.lock();
        if table
            .get(name)
            .is_some_and(|slot| Arc::strong_count(slot) == 1)
        {
            table.remove(name);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.slots.prune(&self.name);
    }
}

/// Prunes the slot if a wait for it is cancelled.
struct PruneOnDrop<'a> {
    slots: &'a Slots,
    name: &'a LockName,
    armed: bool,
}

impl Drop for PruneOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.slots.prune(self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_are_forgotten_when_unused() {
        let slots = Slots::default();
        let name = LockName::new("n").unwrap();
        let permit = slots.acquire(&name).await;
        assert!(slots.try_acquire(&name).is_none());
        assert_eq!(slots.len(), 1);
        drop(permit);
        assert_eq!(slots.len(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_wait_forgets_the_slot() {
        let slots = Slots::default();
        let name = LockName::new("n").unwrap();
        let permit = slots.acquire(&name).await;
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(10), slots.acquire(&name)).await;
        assert!(waited.is_err());
        drop(permit);
        assert_eq!(slots.len(), 0);
    }
}

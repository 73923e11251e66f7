//! The permits this backend instance holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use distlock_core::{Holder, LeaseId, LockName};
use tokio::time::Instant;

use crate::instance::KnownCas;
use crate::proto::Key;

/// The permits this backend instance holds: to extend and release each in
/// one command, and for [`Backend::list`](distlock_core::Backend::list).
#[derive(Debug, Default)]
pub(crate) struct HeldPermits(Mutex<HashMap<LeaseId, HeldPermit>>);

/// A permit this backend instance holds and still believes in.
#[derive(Debug, Clone)]
pub(super) struct HeldPermit {
    pub(super) name: LockName,
    pub(super) limit: u32,
    /// The slot's key.
    pub(super) key: Key,
    /// What the slot holds: the grant's identity and details.
    pub(super) value: Arc<[u8]>,
    pub(super) holder: Arc<Holder>,
    pub(super) fencing_token: u64,
    pub(super) lease: Duration,
    pub(super) confirmed_at: Instant,
    /// The CAS of our last store of the slot, where known.
    pub(super) cas: Option<KnownCas>,
}

impl HeldPermits {
    fn lock(&self) -> MutexGuard<'_, HashMap<LeaseId, HeldPermit>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn insert(&self, id: LeaseId, permit: HeldPermit) {
        self.lock().insert(id, permit);
    }

    /// Every permit held, as it is now.
    pub(super) fn snapshot(&self) -> Vec<(LeaseId, HeldPermit)> {
        let held = self.lock();
        held.iter()
            .map(|(id, permit)| (*id, permit.clone()))
            .collect()
    }

    pub(super) fn get(&self, id: LeaseId) -> Option<HeldPermit> {
        self.lock().get(&id).cloned()
    }

    pub(super) fn remove(&self, id: LeaseId) -> Option<HeldPermit> {
        self.lock().remove(&id)
    }

    /// Records an extension of permit `id`, sent at `sent`.
    pub(super) fn confirm(&self, id: LeaseId, sent: Instant, cas: Option<KnownCas>) {
        if let Some(permit) = self.lock().get_mut(&id) {
            permit.confirmed_at = sent;
            permit.cas = cas;
        }
    }

    /// Whether this instance holds a permit of `name`.
    pub(super) fn any_of(&self, name: &LockName) -> bool {
        self.lock().values().any(|permit| &permit.name == name)
    }

    /// Forgets every permit of `name`: they were forced away.
    pub(crate) fn forget(&self, name: &LockName) {
        self.lock().retain(|_, permit| &permit.name != name);
    }
}

//! What the backend keeps for a permit it holds, in the grant's own
//! [`GrantState`](distlock_core::GrantState).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use distlock_core::{Holder, Lease, LeaseId, LockName};
use tokio::time::Instant;

use crate::instance::KnownCas;
use crate::proto::Key;

/// A permit this backend instance holds: to extend and release it in one
/// command, and for [`Backend::list`](distlock_core::Backend::list)
/// through the backend's [`Listing`](crate::grant::Listing).
#[derive(Debug)]
pub(crate) struct PermitHold {
    /// The grant's identity.
    pub(super) id: LeaseId,
    pub(super) name: LockName,
    pub(super) limit: u32,
    /// The slot's key.
    pub(super) key: Key,
    /// What the slot holds: the grant's identity and details.
    pub(super) value: Arc<[u8]>,
    pub(super) holder: Arc<Holder>,
    pub(super) fencing_token: u64,
    pub(super) lease: Duration,
    live: Mutex<Live>,
}

/// What changes while a permit is held.
#[derive(Debug, Clone, Copy)]
pub(super) struct Live {
    pub(super) confirmed_at: Instant,
    /// The CAS of our last store of the slot, where known.
    pub(super) cas: Option<KnownCas>,
    /// Released, refused or found gone.
    pub(super) ended: bool,
}

/// A permit's grant, as [`PermitHold::new`] takes it.
pub(super) struct PermitGrant {
    pub(super) id: LeaseId,
    pub(super) name: LockName,
    pub(super) limit: u32,
    pub(super) key: Key,
    pub(super) value: Arc<[u8]>,
    pub(super) holder: Arc<Holder>,
    pub(super) fencing_token: u64,
    pub(super) lease: Duration,
    pub(super) confirmed_at: Instant,
    pub(super) cas: Option<KnownCas>,
}

impl PermitHold {
    pub(super) fn new(grant: PermitGrant) -> Self {
        Self {
            id: grant.id,
            name: grant.name,
            limit: grant.limit,
            key: grant.key,
            value: grant.value,
            holder: grant.holder,
            fencing_token: grant.fencing_token,
            lease: grant.lease,
            live: Mutex::new(Live {
                confirmed_at: grant.confirmed_at,
                cas: grant.cas,
                ended: false,
            }),
        }
    }

    /// The permit `lease` carries in its state, if any.
    pub(super) fn of(lease: &Lease) -> Option<&Self> {
        lease.state.get::<Self>()
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What changes, as it is now.
    pub(super) fn live(&self) -> Live {
        *self.lock()
    }

    /// Records an extension, sent at `sent`.
    pub(super) fn confirm(&self, sent: Instant, cas: Option<KnownCas>) {
        let mut live = self.lock();
        if !live.ended {
            live.confirmed_at = sent;
            live.cas = cas;
        }
    }

    /// Ends the permit; returns whether it was held until now.
    pub(super) fn end(&self) -> bool {
        !std::mem::replace(&mut self.lock().ended, true)
    }
}

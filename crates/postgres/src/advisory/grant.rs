//! What an advisory grant keeps: the session its lock lives on, pinned to
//! the grant until the release takes it back.

use std::sync::{Arc, Mutex, PoisonError};

use distlock_core::backend::{AcquireRequest, Attempt, GrantState, Lease, LeaseId};

use super::keys::Key;
use super::session::Session;

/// What a grant keeps: its session, and what identifies the grant on it.
pub(super) struct Pinned {
    id: LeaseId,
    pub(super) key: Key,
    pub(super) shared: bool,
    /// The server process of the session, as the grant found it: an
    /// extension that answers from another one (a pooler between us and
    /// the server) does not hold the lock.
    pub(super) pid: i32,
    /// Taken out by the release.
    session: Mutex<Option<Arc<Session>>>,
}

impl Pinned {
    /// The grant's session, unless released; `None` also for another
    /// identity's lease.
    pub(super) fn session(&self, lease: &Lease) -> Option<Arc<Session>> {
        (self.id == lease.id)
            .then(|| {
                self.session
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
            })
            .flatten()
    }

    pub(super) fn take_session(&self, lease: &Lease) -> Option<Arc<Session>> {
        (self.id == lease.id)
            .then(|| {
                self.session
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
            })
            .flatten()
    }
}

/// The grant of `request` on `session`, which the server process `pid`
/// was granted `key` on with `fencing_token`, as the attempt answers it.
pub(super) fn pin(
    request: &AcquireRequest,
    session: Session,
    key: Key,
    shared: bool,
    pid: i32,
    fencing_token: u64,
) -> Attempt {
    // Should it end between the caller's check and the pin, unheard, the
    // next extension finds it closed and refuses.
    session.pin(request.loss.clone());
    let pinned = Pinned {
        id: request.lease_id,
        key,
        shared,
        pid,
        session: Mutex::new(Some(Arc::new(session))),
    };
    Attempt::Acquired {
        fencing_token,
        state: GrantState::new(pinned),
    }
}

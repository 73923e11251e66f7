//! The trait every backend implements, and the values it exchanges with core.
//!
//! A backend only tries once, extends, releases and lists. Waiting,
//! timeouts, cancellation, background extension and loss detection are
//! written once, in [`LockClient`](crate::LockClient).

use std::fmt;

use async_trait::async_trait;

use crate::error::Result;
use crate::info::LockInfo;
use crate::name::LockName;

use super::abilities::{DelayedRelease, HandOvers, Session, Wakeups};
use super::capabilities::Capabilities;
use super::request::{AcquireRequest, Attempt, Lease};
use super::server_info::ServerInfo;
use super::state::WaitState;
use super::terms::TermLog;

/// How many extensions the default [`Backend::extend_many`] keeps in flight.
const EXTEND_CONCURRENCY: usize = 32;

/// A store that can grant leases on named locks.
///
/// Implementations must be safe to call concurrently, must never extend or
/// release a lease whose stored [`LeaseId`](crate::backend::LeaseId) differs from the one given, and
/// must judge expiry by the server's clock wherever the server has one.
///
/// # Cancel safety
/// Core may drop any of these futures at an await point, after its
/// operation timeout or when its caller goes away. Each call must leave the
/// store consistent when dropped: the operation then either happened or did
/// not. Core deals with the rest: a grant whose reply was lost is released
/// by its identity, and extension outcomes that never arrive count as
/// failures.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug {
    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    /// The store's short name (`file`, `postgres`, `redis`, …), which
    /// labels this backend's metrics. The default is `custom`.
    fn store_name(&self) -> &'static str {
        "custom"
    }

    /// Asks the server for its version, the time on its clock and the
    /// features this backend relies on, for checking a deployment. The
    /// default knows none of them.
    ///
    /// # Errors
    /// A backend error when the server does not answer.
    async fn server_info(&self) -> Result<ServerInfo> {
        Ok(ServerInfo::default())
    }

    /// Tries once to take `request.claim` on `request.name`.
    ///
    /// `wait` is this wait's state: empty at its first attempt, and handed
    /// back as this call left it on each later attempt of the same wait.
    /// A backend that records waiters keeps what it needs to find its
    /// record there, and clears it with the grant.
    ///
    /// # Errors
    /// A backend error; [`Error::KindConflict`](crate::Error::KindConflict)
    /// when the name is held as another kind, or as a semaphore with
    /// another limit; [`Error::Unsupported`](crate::Error::Unsupported) for
    /// a claim this backend does not grant. Losing to another holder is
    /// [`Attempt::Held`], not an error, and so is losing a race to create
    /// the lock.
    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt>;

    /// Called once when a wait whose state is not empty ends without a
    /// grant (it timed out, failed, or was cancelled), with the last
    /// request and that state, so the backend can remove what it recorded.
    /// The default drops the state. A backend must not rely on this call
    /// alone: a process that dies mid-wait never makes it, so records of
    /// waiters must expire by themselves.
    ///
    /// # Errors
    /// A backend error; core logs it and carries on.
    async fn end_wait(&self, request: &AcquireRequest, wait: WaitState) -> Result<()> {
        let _ = (request, wait);
        Ok(())
    }

    /// Extends `lease` by its lease period if it is still ours.
    /// Returns `Ok(false)` when it is not: that lease is lost.
    ///
    /// # Errors
    /// A backend error, after which the outcome is unknown.
    async fn extend(&self, lease: &Lease) -> Result<bool>;

    /// Extends many leases; the result has one entry per lease, in order.
    /// The default calls [`extend`](Self::extend) with bounded concurrency;
    /// backends that can extend in bulk override it, and
    /// [`extend_many_limit`](Self::extend_many_limit) with it.
    async fn extend_many(&self, leases: &[Lease]) -> Vec<Result<bool>> {
        let mut outcomes = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(EXTEND_CONCURRENCY) {
            let mut pending = Vec::with_capacity(chunk.len());
            for lease in chunk {
                pending.push(self.extend(lease));
            }
            outcomes.extend(futures::future::join_all(pending).await);
        }
        outcomes
    }

    /// The most leases the keeper passes to one
    /// [`extend_many`](Self::extend_many) call, which it bounds by one
    /// operation timeout. The default suits the default `extend_many`,
    /// which extends that many at once; backends that extend in bulk,
    /// in a few commands whatever the number, return more.
    fn extend_many_limit(&self) -> usize {
        EXTEND_CONCURRENCY
    }

    /// Extends many leases as [`extend_many`](Self::extend_many) does, and
    /// reads the server's clock in the same step, where the backend can do
    /// so at no extra cost (a column of the same statement, a command of
    /// the same pipeline).
    ///
    /// Core compares each reading with its own monotonic clock. When the
    /// server's clock has advanced further between two readings than any
    /// time that could have passed here, the server's clock stepped
    /// forward, and every lease it judges by that clock ends sooner by at
    /// least the step: core shortens the leases confirmed before the step
    /// by it, and reports those it ended
    /// [`LossReason::ServerClockStepped`](crate::LossReason::ServerClockStepped).
    /// Only a step between two readings is seen: the first reading has
    /// nothing to be compared with. The default reads no clock.
    async fn extend_many_timed(&self, leases: &[Lease]) -> Extended {
        Extended::new(self.extend_many(leases).await, None)
    }

    /// Releases `lease` if it is still ours. Returns whether it was.
    /// Releasing a lease twice, or one that was lost, is `Ok(false)`.
    ///
    /// # Errors
    /// A backend error.
    async fn release(&self, lease: &Lease) -> Result<bool>;

    /// The locks held now.
    ///
    /// # Errors
    /// A backend error.
    async fn list(&self) -> Result<Vec<LockInfo>>;

    /// Releases `name` from every holder: an administrator's tool. Each
    /// holder learns it lost the lock at its next extension. Returns
    /// whether the lock was held.
    ///
    /// # Errors
    /// A backend error, or [`Error::Unsupported`](crate::Error::Unsupported).
    async fn force_release(&self, name: &LockName) -> Result<bool>;

    /// The backend's one-step hand-over, when it has one: core then passes
    /// a lock to the next task of the same client that waits for it without
    /// releasing it. The default has none.
    fn hand_overs(&self) -> Option<&dyn HandOvers> {
        None
    }

    /// The session every grant and wait of this backend hangs on, when
    /// there is one (an etcd lease for all of a client's keys): core then
    /// renews it once per extension period while anything is held or
    /// waited for, and never calls [`extend`](Self::extend) or
    /// [`extend_many`](Self::extend_many). The default has none.
    fn session(&self) -> Option<&dyn Session> {
        None
    }

    /// The backend's record of election terms, if it keeps one: a backend
    /// that returns it appends each grant whose request
    /// [`records_term`](AcquireRequest::records_term) to it, in the same
    /// atomic write, keeping at least [`TERMS_KEPT`](crate::backend::TERMS_KEPT) terms per name. Without
    /// one, [`Election::observe`](crate::Election::observe) is
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    fn term_log(&self) -> Option<&dyn TermLog> {
        None
    }

    /// The backend's reports of releases, when it makes them: waiters then
    /// wait for a release instead of polling. The default has none. The
    /// answer may change over the backend's life (a listening connection
    /// that could not start); core asks before each wait.
    fn wakeups(&self) -> Option<&dyn Wakeups> {
        None
    }

    /// The backend's way to give a lock up later instead of now, for
    /// [`AcquireOptions::min_hold`](crate::AcquireOptions::min_hold); or
    /// why it has none, as the [`Error::Unsupported`](crate::Error::Unsupported)
    /// an acquire with `min_hold` then fails with at once. The default has
    /// none: a backend offers it only where it has checked that the lock
    /// stays held for the time asked for, which the default `extend` of a
    /// backend cannot promise.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported), saying why.
    fn delayed_release(&self) -> Result<&dyn DelayedRelease> {
        Err(crate::Error::Unsupported(format!(
            "the {} backend cannot keep a lock held after its release (min_hold)",
            self.store_name()
        )))
    }

    /// Gives back what the backend keeps on the server for this client
    /// alone, once the client is done with it: etcd's session, which would
    /// otherwise live on for its TTL after the process exits (and for ever
    /// while elections keep renewing it). Locks still held through the
    /// backend are lost with it. Called by
    /// [`LockClient::close`](crate::LockClient::close), which tries again
    /// after a transient error within the operation timeout. The default
    /// has nothing to give back.
    ///
    /// # Errors
    /// A backend error; the server then ends what was not given back by
    /// itself, later.
    ///
    /// # Cancel safety
    /// As for every [`Backend`] call: dropped, it either happened or not.
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// What [`Backend::extend_many_timed`] did: one outcome per lease, as
/// [`Backend::extend_many`] gives them, and the time the server's clock
/// read while it extended them, when it was read.
#[derive(Debug)]
#[non_exhaustive]
pub struct Extended {
    /// Whether each lease was still ours, in the order asked.
    pub outcomes: Vec<Result<bool>>,
    /// The server's clock during the extension, on the server's own
    /// wall clock.
    pub server_time: Option<std::time::SystemTime>,
}

impl Extended {
    /// The outcomes of an extension, and the server's clock read with it.
    pub fn new(outcomes: Vec<Result<bool>>, server_time: Option<std::time::SystemTime>) -> Self {
        Self {
            outcomes,
            server_time,
        }
    }
}

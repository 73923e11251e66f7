//! The trait every backend implements, and the values it exchanges with core.
//!
//! A backend only tries once, extends, releases and lists. Waiting,
//! timeouts, cancellation, background extension and loss detection are
//! written once, in [`LockClient`](crate::LockClient).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::info::LockInfo;
use crate::name::LockName;

use super::abilities::{Abilities, HandOvers, Session, Wakeups};
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
/// # Time budget
/// Every call gets its time from core: an attempt in its request's
/// [`operation_timeout`](crate::backend::AcquireRequest::operation_timeout),
/// a call on a lease in the lease's, and the administrative calls
/// ([`server_info`](Self::server_info), [`list`](Self::list),
/// [`force_release`](Self::force_release) and
/// [`TermLog::terms_after`]) as their `limit`: the client's operation
/// timeout, or its caller's own. Core stops waiting for an administrative
/// call at its `limit`, with a timer of its own whatever
/// [`Capabilities::bounds_calls`] says, so a backend keeps no timeout of
/// its own for these calls: a step that needs one (a command, a statement,
/// a connection from a pool, one server of several) is bounded by `limit`.
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
    /// features this backend relies on, for checking a deployment, within
    /// `limit` (see [Time budget](Self#time-budget)). The default knows
    /// none of them.
    ///
    /// # Errors
    /// A backend error when the server does not answer.
    async fn server_info(&self, limit: Duration) -> Result<ServerInfo> {
        let _ = limit;
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

    /// Extends each of `leases` by its lease period if it is still ours:
    /// its end becomes the server's now plus
    /// [`Lease::lease`](crate::backend::Lease::lease), also when that is
    /// sooner than its end was (core's default delayed release relies on
    /// it; see [`Abilities::delayed_release`]). The answer has one outcome
    /// per lease, in order: `Ok(false)` for a lease that is no longer ours,
    /// which is then lost, and an error when the outcome is unknown.
    ///
    /// A store that extends one lease per command builds the answer with
    /// [`Extended::each`]. Where the store can read its clock in the same
    /// step at no extra cost (a column of the same statement, a command of
    /// the same pipeline), the answer carries that reading: core compares
    /// it with its own monotonic clock, and when the server's clock
    /// advanced further between two readings than any time that could have
    /// passed here, it stepped forward, and every lease it judges ends
    /// sooner by at least the step. Core shortens the leases confirmed
    /// before the step by it, and reports those it ended
    /// [`LossReason::ServerClockStepped`](crate::LossReason::ServerClockStepped).
    /// [`LockGuard::extend`](crate::LockGuard::extend) calls this with one
    /// lease; the keeper with up to
    /// [`extend_many_limit`](Self::extend_many_limit) of them.
    async fn extend_many(&self, leases: &[Lease]) -> Extended;

    /// The most leases the keeper passes to one
    /// [`extend_many`](Self::extend_many) call, which it bounds by one
    /// operation timeout. The default suits a store that extends one lease
    /// per command, as [`Extended::each`] does; a store that extends in
    /// bulk, in a few commands whatever the number, returns more.
    fn extend_many_limit(&self) -> usize {
        EXTEND_CONCURRENCY
    }

    /// Releases `lease` if it is still ours. Returns whether it was.
    /// Releasing a lease twice, or one that was lost, is `Ok(false)`.
    ///
    /// # Errors
    /// A backend error.
    async fn release(&self, lease: &Lease) -> Result<bool>;

    /// The locks held now, read within `limit` (see
    /// [Time budget](Self#time-budget)).
    ///
    /// # Errors
    /// A backend error.
    async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>>;

    /// Releases `name` from every holder, within `limit` (see
    /// [Time budget](Self#time-budget)): an administrator's tool. Each
    /// holder learns it lost the lock at its next extension. Returns
    /// whether the lock was held.
    ///
    /// # Errors
    /// A backend error, or [`Error::Unsupported`](crate::Error::Unsupported).
    async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool>;

    /// What this backend can do beyond the contract, each as the object
    /// that does it: a one-step hand-over, a session, a record of terms,
    /// wake-ups, and its way of releasing later. The default has none of
    /// them, and releases later by extension. The answer may change over
    /// the backend's life (a listening connection that could not start):
    /// core asks before each use.
    fn abilities(&self) -> Abilities<'_> {
        Abilities::none()
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

/// What [`Backend::extend_many`] did: one outcome per lease, in the order
/// asked, and the time the server's clock read while it extended them,
/// when it was read.
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

    /// Extends each lease with `extend`, a few at a time (as many as the
    /// default [`Backend::extend_many_limit`]), for a store that extends
    /// one lease per command. Reads no clock.
    pub async fn each<'a, F, Fut>(leases: &'a [Lease], mut extend: F) -> Self
    where
        F: FnMut(&'a Lease) -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        let mut outcomes = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(EXTEND_CONCURRENCY) {
            outcomes.extend(futures::future::join_all(chunk.iter().map(&mut extend)).await);
        }
        Self::new(outcomes, None)
    }

    /// The outcome of the first lease: the answer to an extension of one.
    ///
    /// # Errors
    /// That lease's error; a backend error when the answer has no outcome.
    pub fn into_first(self) -> Result<bool> {
        self.outcomes.into_iter().next().unwrap_or_else(|| {
            Err(crate::Error::Backend {
                backend: "core",
                message: "an extension answered no outcome for its lease".into(),
                source: None,
            })
        })
    }
}

/// Calls on any [`Backend`] that read better than the contract's own, for
/// core, tests and tools; backends never implement it (every backend has
/// it).
#[async_trait]
pub trait BackendExt: Backend {
    /// Extends one lease: [`Backend::extend_many`] with it alone.
    ///
    /// # Errors
    /// That lease's error, after which the outcome is unknown.
    async fn extend(&self, lease: &Lease) -> Result<bool> {
        self.extend_many(std::slice::from_ref(lease))
            .await
            .into_first()
    }

    /// The backend's one-step hand-over, if it has one.
    fn hand_overs(&self) -> Option<&dyn HandOvers> {
        self.abilities().hand_overs
    }

    /// The session the backend's grants hang on, if there is one.
    fn session(&self) -> Option<&dyn Session> {
        self.abilities().session
    }

    /// The backend's record of election terms, if it keeps one.
    fn term_log(&self) -> Option<&dyn TermLog> {
        self.abilities().term_log
    }

    /// The backend's reports of releases, if it makes them.
    fn wakeups(&self) -> Option<&dyn Wakeups> {
        self.abilities().wakeups
    }

    /// Whether the backend can give a lock up later, for
    /// [`AcquireOptions::min_hold`](crate::AcquireOptions::min_hold).
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported), saying why not.
    fn releases_later(&self) -> Result<()> {
        crate::engine::min_hold::check_release_later(self)
    }
}

impl<B: Backend + ?Sized> BackendExt for B {}

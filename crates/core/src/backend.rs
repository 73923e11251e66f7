//! The trait every backend implements, and the values it exchanges with core.
//!
//! A backend only tries once, extends, releases and lists. Waiting,
//! timeouts, cancellation, background extension and loss detection are
//! written once, in [`LockClient`](crate::LockClient).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::claim::{Claim, LockKind, Permits};
use crate::error::Result;
use crate::lease::LossReporter;
use crate::name::LockName;
use crate::options::LockOptions;
use crate::state::{GrantState, Payload, WaitState};
use crate::terms::TermLog;
use crate::wake::ReleaseWatch;

/// The random 128-bit identity of one grant. A backend extends and releases
/// a lease only while the stored identity is this one, so nobody can extend
/// or release someone else's lease.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseId(u128);

impl LeaseId {
    /// A fresh random identity.
    pub fn random() -> Self {
        Self(rand::random())
    }

    /// The identity as a number.
    pub fn as_u128(self) -> u128 {
        self.0
    }

    /// Rebuilds an identity read back from a backend.
    pub fn from_u128(value: u128) -> Self {
        Self(value)
    }
}

impl fmt::Debug for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Who holds a lock, for inspection only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// The label from [`LockOptions::label`](crate::LockOptions::label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

// distlock is for Unix: the host name below is uname(2)'s, and the file
// backend and the command stand on flock(2), signals and exec. Elsewhere,
// one clear error instead of rustix's missing modules.
#[cfg(not(unix))]
compile_error!(
    "distlock builds on Unix only (Linux, macOS and the BSDs); Windows is not supported"
);

impl Holder {
    /// This process, with an optional label.
    pub fn this_process(label: Option<&str>) -> Self {
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        Self {
            host,
            pid: std::process::id(),
            label: label.map(str::to_owned),
        }
    }
}

/// One attempt to take a lock, as core asks a backend for it.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    /// The lock.
    pub name: LockName,
    /// What is asked for on it.
    pub claim: Claim,
    /// The identity to store with the grant.
    pub lease_id: LeaseId,
    /// How long the grant lasts unless extended.
    pub lease: Duration,
    /// The longest this call may take: the client's
    /// [`operation_timeout`](crate::LockOptions::operation_timeout). A
    /// backend that bounds its own calls
    /// ([`Capabilities::bounds_calls`]) answers within it.
    pub operation_timeout: Duration,
    /// Who asks, recorded for inspection. Shared: a client asks with the
    /// same holder every time.
    pub holder: Arc<Holder>,
    /// Whether core tries again should this attempt find the lock held.
    /// A backend that records waiters (a waiting writer keeps new readers
    /// out) records one only then, so that a single try leaves no trace.
    pub retries: bool,
    /// Ends the grant's [`lost`](crate::LockGuard::lost) signal, for a
    /// backend that learns of a loss by itself (a pinned connection that
    /// dropped, a key that was deleted). A backend keeps it only with the
    /// grant it makes, in its [`GrantState`] or a task of its own.
    pub loss: LossReporter,
    /// What the caller handed the backend for this call (see
    /// [`AcquireOptions::payload`](crate::AcquireOptions::payload));
    /// empty for most calls.
    pub payload: Payload,
    /// Whether the grant is an election's term, to be appended to the
    /// name's record of terms in the same atomic write that grants it
    /// (see [`Backend::term_log`]). Only exclusive claims ask for it.
    pub records_term: bool,
}

impl AcquireRequest {
    /// A request for `claim` on `name` with a fresh identity, tried once,
    /// with the default operation timeout for `lease`.
    pub fn new(name: LockName, claim: Claim, lease: Duration, holder: Arc<Holder>) -> Self {
        Self {
            name,
            claim,
            lease_id: LeaseId::random(),
            lease,
            operation_timeout: LockOptions::default_operation_timeout(lease),
            holder,
            retries: false,
            loss: LossReporter::new(),
            payload: Payload::none(),
            records_term: false,
        }
    }

    /// The lease this request's grant is, once granted with
    /// `fencing_token` and `state`.
    pub fn granted(&self, fencing_token: u64, state: GrantState) -> Lease {
        Lease {
            name: self.name.clone(),
            claim: self.claim,
            id: self.lease_id,
            fencing_token,
            lease: self.lease,
            operation_timeout: self.operation_timeout,
            state,
        }
    }
}

/// What one attempt gave.
#[derive(Debug, Clone)]
pub enum Attempt {
    /// The lock is ours, with this fencing token.
    Acquired {
        /// Strictly greater than every token granted before for this name.
        fencing_token: u64,
        /// What the backend keeps for this grant; it comes back with the
        /// grant's [`Lease`].
        state: GrantState,
    },
    /// Someone else holds it.
    Held {
        /// When the backend knows the current lease will end, how long until
        /// then, so a waiter need not retry earlier.
        retry_after: Option<Duration>,
    },
}

/// What a [`HandOvers::hand_over`] did.
#[derive(Debug, Clone)]
pub enum HandOver {
    /// The old lease ended and the new one began in the same step, with
    /// this fencing token.
    Granted {
        /// Strictly greater than every token granted before for this name.
        fencing_token: u64,
        /// `None` when the server confirmed the new grant in this call, so
        /// that it lasts a lease from when the call was sent. A backend that
        /// hands over without a server command, because this process keeps
        /// the lease it already holds, gives the time the server last
        /// confirmed that lease: the new grant then lasts a lease from then,
        /// and is extended as that lease would have been.
        confirmed_at: Option<Instant>,
        /// What the backend keeps for the new grant.
        state: GrantState,
    },
    /// The old lease was no longer ours, so nothing changed.
    NotOurs,
}

/// A lease core holds, as it hands it back to the backend.
#[derive(Debug, Clone)]
pub struct Lease {
    /// The lock.
    pub name: LockName,
    /// What was granted on it.
    pub claim: Claim,
    /// The grant's identity.
    pub id: LeaseId,
    /// The grant's fencing token.
    pub fencing_token: u64,
    /// How long each grant or extension lasts.
    pub lease: Duration,
    /// The longest a call on this lease may take, as for
    /// [`AcquireRequest::operation_timeout`].
    pub operation_timeout: Duration,
    /// What the backend keeps for this grant, as it gave it.
    pub state: GrantState,
}

/// What a backend can do, where backends differ, described as facts.
///
/// The optional abilities that need methods of their own (hand-overs, a
/// session, wake-ups) are not flags here: a backend offers each through an
/// accessor of [`Backend`] that returns the ability itself
/// ([`Backend::hand_overs`], [`Backend::session`], [`Backend::wakeups`]),
/// so that a backend cannot claim an ability without its method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Locks live exactly as long as the holder's process (or its handle)
    /// and never expire while it lives, like OS file locks. Such locks are
    /// never given up by the lease clock.
    pub process_bound: bool,
    /// Locks are shared with other processes (false for the in-memory backend).
    pub cross_process: bool,
    /// [`Backend::list`] shows locks held by every process, not only by
    /// this backend instance (false for memcached, which cannot enumerate).
    pub lists_every_holder: bool,
    /// [`Claim::Shared`] is granted, so a name is a reader-writer lock.
    pub shared: bool,
    /// [`Claim::Permit`] is granted, so a name can be a semaphore.
    pub semaphores: bool,
    /// [`try_acquire`](Backend::try_acquire), [`release`](Backend::release)
    /// and [`hand_over`](HandOvers::hand_over) each answer within the
    /// operation timeout their request or lease carries, with an error if
    /// the servers do not. Core then sets no timer of its own around them:
    /// a timer costs the runtime a registration, and often a wake-up of its
    /// timer driver, per call.
    pub bounds_calls: bool,
    /// Fair mode: the whole lock is granted to waiters in the order they
    /// asked, across processes, by the backend itself. A waiting attempt
    /// ([`AcquireRequest::retries`]) that cannot be granted at once takes
    /// a place in a queue the store keeps, recorded in its
    /// [`WaitState`], and renews that place with each attempt: a place not
    /// renewed for the request's lease is dropped, by the store's clock. A
    /// release (or an expiry) grants the lock to the first live place, in
    /// the same write where the store allows it, with the waiter's lease,
    /// holder and term, under an identity of the place's own (each attempt
    /// of a wait asks under a new one). That waiter's next attempt, whose
    /// wait state proves the place its own, takes the grant over under its
    /// own identity and extends it from that attempt, so that the lease
    /// core counts from the attempt's sending is never longer than the
    /// store's. A single try (no retries)
    /// takes no place, and is granted only when nobody holds or waits.
    /// [`Backend::end_wait`] gives the place up, and a grant made to it
    /// meanwhile passes on to the next place.
    ///
    /// Core then lets each task of a client wait in the store by itself,
    /// rather than one task per name, and hands no lock over inside the
    /// client, so that the store's order is the order of asking.
    pub fair: bool,
}

impl Capabilities {
    /// A lease-based backend shared across processes, without wake-ups.
    pub const fn lease_based() -> Self {
        Self {
            process_bound: false,
            cross_process: true,
            lists_every_holder: true,
            shared: false,
            semaphores: false,
            bounds_calls: false,
            fair: false,
        }
    }

    /// These capabilities in fair mode, or not.
    pub const fn with_fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// These capabilities with calls that bound themselves, or without.
    pub const fn with_bounds_calls(mut self, on: bool) -> Self {
        self.bounds_calls = on;
        self
    }

    /// These capabilities with shared (reader) locks or without.
    pub const fn with_shared(mut self, on: bool) -> Self {
        self.shared = on;
        self
    }

    /// These capabilities with semaphores or without.
    pub const fn with_semaphores(mut self, on: bool) -> Self {
        self.semaphores = on;
        self
    }

    /// Whether `claim` is granted at all.
    pub const fn grants(&self, claim: Claim) -> bool {
        match claim {
            Claim::Exclusive => true,
            Claim::Shared => self.shared,
            Claim::Permit { .. } => self.semaphores,
        }
    }

    /// These capabilities, process-bound or not.
    pub const fn with_process_bound(mut self, on: bool) -> Self {
        self.process_bound = on;
        self
    }

    /// These capabilities, listing every holder's locks or only this
    /// instance's.
    pub const fn with_lists_every_holder(mut self, on: bool) -> Self {
        self.lists_every_holder = on;
        self
    }

    /// These capabilities, shared across processes or not.
    pub const fn with_cross_process(mut self, on: bool) -> Self {
        self.cross_process = on;
        self
    }
}

/// One holder of a lock, as [`Backend::list`] sees it. A name held by
/// several readers, or by several permits of a semaphore, has one entry per
/// holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock's name, exactly as given.
    pub name: LockName,
    /// The holder's kind.
    pub kind: LockKind,
    /// For a semaphore, the permits in use out of its limit.
    pub permits: Option<Permits>,
    /// Who holds it, when known.
    pub holder: Option<Holder>,
    /// The fencing token of the current grant, when known.
    pub fencing_token: Option<u64>,
    /// How long until the lease ends unless extended; `None` when it lasts as
    /// long as the holder's process.
    pub expires_in: Option<Duration>,
}

/// What a store's server says of itself, for checking a deployment
/// (`distlock check`); see [`Backend::server_info`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// The server's product and version, as it reports them.
    pub version: Option<String>,
    /// The time on the server's clock when it answered, where the server
    /// has a clock distlock reads.
    pub clock: Option<std::time::SystemTime>,
    /// The features of the deployment this backend relies on, as it found
    /// them: change streams, an eviction policy, a private directory, …
    pub features: Vec<Feature>,
}

impl ServerInfo {
    /// What a server said: its version and its clock, where known.
    pub fn new(version: Option<String>, clock: Option<std::time::SystemTime>) -> Self {
        Self {
            version,
            clock,
            features: Vec::new(),
        }
    }

    /// Adds what was found of one feature.
    #[must_use]
    pub fn with_feature(mut self, feature: Feature) -> Self {
        self.features.push(feature);
        self
    }
}

/// One feature of a deployment that a backend relies on, and what the
/// backend found of it; see [`ServerInfo::features`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Feature {
    /// A short name, such as `change streams` or `eviction`.
    pub name: &'static str,
    /// Whether it is there.
    pub state: FeatureState,
    /// What was found, and when it falls short, its cost and the remedy.
    pub detail: String,
}

/// Whether a feature a backend relies on is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FeatureState {
    /// There, and working.
    Present,
    /// Missing or limited: locks stay safe, at a cost the detail states
    /// (waiters that poll, a table that grows, less availability).
    Degraded,
    /// Missing, and without it locks are not safe or do not work.
    Missing,
}

impl Feature {
    /// A feature that is there.
    pub fn present(name: &'static str, detail: impl Into<String>) -> Self {
        Self::new(name, FeatureState::Present, detail)
    }

    /// A feature that is missing or limited, at a cost `detail` states.
    pub fn degraded(name: &'static str, detail: impl Into<String>) -> Self {
        Self::new(name, FeatureState::Degraded, detail)
    }

    /// A feature without which locks are not safe or do not work.
    pub fn missing(name: &'static str, detail: impl Into<String>) -> Self {
        Self::new(name, FeatureState::Missing, detail)
    }

    fn new(name: &'static str, state: FeatureState, detail: impl Into<String>) -> Self {
        Self {
            name,
            state,
            detail: detail.into(),
        }
    }
}

/// How many extensions the default [`Backend::extend_many`] keeps in flight.
const EXTEND_CONCURRENCY: usize = 32;

/// A store that can grant leases on named locks.
///
/// Implementations must be safe to call concurrently, must never extend or
/// release a lease whose stored [`LeaseId`] differs from the one given, and
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
    /// atomic write, keeping at least [`TERMS_KEPT`](crate::TERMS_KEPT) terms per name. Without
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

/// A backend's release that takes effect later; see
/// [`Backend::delayed_release`].
#[async_trait]
pub trait DelayedRelease: Send + Sync {
    /// Gives `lease` up `remaining` from now, if it is still ours: until
    /// then the lock stays held, though nobody extends it, and then it is
    /// free without any further call. The time is judged by the server's
    /// clock where the backend has one. A backend may keep the lock longer
    /// than `remaining` (its clock counts in whole seconds, say), never
    /// shorter. Returns whether the lease was still ours. Core asks it
    /// only for an exclusive lease.
    ///
    /// Where leases end by the server's clock, an owner-checked extension
    /// of the lease to `remaining` is this call, if the backend's extension
    /// sets the new end from the server's now and honours a lease shorter
    /// than the current one.
    ///
    /// # Errors
    /// A backend error, after which the outcome is unknown: the lock then
    /// ends as the lease would have.
    ///
    /// # Cancel safety
    /// As for every [`Backend`] call: dropped, it either happened or not.
    async fn release_after(&self, lease: &Lease, remaining: Duration) -> Result<bool>;
}

/// A backend's one-step hand-over; see [`Backend::hand_overs`].
#[async_trait]
pub trait HandOvers: Send + Sync {
    /// Ends `lease` and grants `next` in one atomic step, if `lease` is
    /// still ours; otherwise changes nothing. Both are exclusive. The lock
    /// is never free in between, so no other process can take it, and the
    /// new grant gets a fresh identity and a fencing token greater than
    /// the old one's.
    ///
    /// Core calls it only to pass a lock to the next task of the same
    /// client that waits for it; it never passes a lock to another process.
    ///
    /// # Errors
    /// A backend error, after which the outcome is unknown: core then
    /// releases both identities.
    ///
    /// # Cancel safety
    /// As for every [`Backend`] call: dropped, it either happened or not.
    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver>;
}

/// The session a backend's grants and waits hang on; see
/// [`Backend::session`].
///
/// A backend may replace its session (the old one ended, and the next
/// grant started another), so grants made at different times may hang on
/// different sessions. Each renewal says which session it confirmed and
/// which ended, and core keeps or ends exactly the grants of each.
#[async_trait]
pub trait Session: Send + Sync {
    /// The session `lease` was granted on; `None` when the backend cannot
    /// tell, and then no renewal confirms the grant: it runs out at the
    /// end of its lease unless released first.
    fn session_of(&self, lease: &Lease) -> Option<SessionId>;

    /// Renews the current session, if there is one, and reports the
    /// sessions found gone since the last renewal.
    ///
    /// [`Renewal::renewed`] keeps every grant of that session for a lease
    /// from when the renewal was sent, and no other grant. Every grant of
    /// a session in [`Renewal::ended`] is lost. Grants on no session named
    /// are neither kept nor lost. A renewal with no session to renew
    /// confirms nothing. The backend starts a new session for the next
    /// grant or wait.
    ///
    /// # Errors
    /// A backend error, after which the outcome is unknown: core tries
    /// again, and gives up the grants once none was confirmed for the lease
    /// minus the safety margin.
    ///
    /// # Cancel safety
    /// As for every [`Backend`] call: dropped, it either happened or not.
    /// A backend reports a session found gone until a renewal that returns
    /// has reported it.
    async fn renew(&self) -> Result<Renewal>;
}

/// One of a backend's sessions, by the backend's own number for it (for
/// etcd, its lease id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

/// What a [`Session::renew`] confirmed, and which sessions it found gone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Renewal {
    /// The session renewed, whose grants are kept for a lease from when
    /// the renewal was sent; `None` when there was none to renew.
    pub renewed: Option<SessionId>,
    /// The sessions found gone since the last renewal (by this one, or by a
    /// grant that found its session gone and started another): exactly
    /// their grants are lost.
    pub ended: Vec<SessionId>,
}

impl Renewal {
    /// A renewal of `session`.
    pub fn of(session: SessionId) -> Self {
        Self {
            renewed: Some(session),
            ended: Vec::new(),
        }
    }

    /// A renewal that found no session to renew, and confirms nothing.
    pub fn nothing() -> Self {
        Self::default()
    }

    /// This renewal, reporting also that `session` ended.
    pub fn with_ended(mut self, session: SessionId) -> Self {
        if !self.ended.contains(&session) {
            self.ended.push(session);
        }
        if self.renewed == Some(session) {
            self.renewed = None;
        }
        self
    }
}

/// A backend's reports of releases; see [`Backend::wakeups`].
pub trait Wakeups: Send + Sync {
    /// Starts watching `name` for releases; `None` when none can be
    /// reported now (a listening connection still being checked), and the
    /// waiter then polls. A wait that got `None` asks again before each of
    /// its attempts, so this must answer cheaply.
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch>;
}

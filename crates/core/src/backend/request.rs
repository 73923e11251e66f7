//! What core asks of a backend for one attempt, and what it answers: the
//! request, the grant (a [`Lease`]) and its identity.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::claim::Claim;
use crate::info::Holder;
use crate::name::LockName;
use crate::options::LockOptions;

use super::loss::LossReporter;
use super::state::{GrantState, Payload};

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
    /// ([`Capabilities::bounds_calls`](crate::backend::Capabilities::bounds_calls)) answers within it.
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
    /// (see [`Abilities::term_log`](crate::backend::Abilities::term_log)). Only exclusive claims ask for it.
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

/// What a [`HandOvers::hand_over`](crate::backend::HandOvers::hand_over) did.
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

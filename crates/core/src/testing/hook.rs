//! What a test can put around each call of a wrapped backend.

use std::fmt;

use async_trait::async_trait;

use crate::backend::{AcquireRequest, Attempt, HandOver, Lease, LockInfo, Renewal};
use crate::error::Result;
use crate::name::LockName;

/// The kinds of call a backend is asked to make, for
/// [`TestBackend::calls_of`](super::TestBackend::calls_of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// One attempt to take a lock.
    Acquire,
    /// The end of a wait that recorded something.
    EndWait,
    /// An extension of one lease or of a batch of leases.
    Extend,
    /// A renewal of the session every grant hangs on.
    RenewSession,
    /// A release.
    Release,
    /// A release before the grant's shortest hold has passed, which keeps
    /// the lock until then.
    DelayedRelease,
    /// A one-step hand-over to the next task of the same client.
    HandOver,
    /// A listing of the locks held.
    List,
    /// An administrator's release of a name from every holder.
    ForceRelease,
    /// The end of the client's use of the backend.
    Close,
}

impl Operation {
    /// The operation's name, as errors give it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::EndWait => "end wait",
            Self::Extend => "extend",
            Self::RenewSession => "renew session",
            Self::Release => "release",
            Self::DelayedRelease => "delayed release",
            Self::HandOver => "hand-over",
            Self::List => "list",
            Self::ForceRelease => "force release",
            Self::Close => "close",
        }
    }
}

/// One call, as a [`Hook`] sees it before it is passed on.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Call<'a> {
    /// An attempt to take a lock.
    Acquire(&'a AcquireRequest),
    /// The end of a wait, with its last request.
    EndWait(&'a AcquireRequest),
    /// An extension: one lease, or a batch.
    Extend(&'a [Lease]),
    /// A session's renewal.
    RenewSession,
    /// A release.
    Release(&'a Lease),
    /// A release that keeps the lock for `remaining` yet.
    DelayedRelease {
        /// The lease released.
        lease: &'a Lease,
        /// How long the lock is kept.
        remaining: std::time::Duration,
    },
    /// A hand-over of `lease` to `next`.
    HandOver {
        /// The lease that ends.
        lease: &'a Lease,
        /// The grant asked for in its place.
        next: &'a AcquireRequest,
    },
    /// A listing.
    List,
    /// A forced release of a name.
    ForceRelease(&'a LockName),
    /// The end of the client's use of the backend.
    Close,
}

impl Call<'_> {
    /// What kind of call this is.
    pub const fn operation(&self) -> Operation {
        match self {
            Self::Acquire(_) => Operation::Acquire,
            Self::EndWait(_) => Operation::EndWait,
            Self::Extend(_) => Operation::Extend,
            Self::RenewSession => Operation::RenewSession,
            Self::Release(_) => Operation::Release,
            Self::DelayedRelease { .. } => Operation::DelayedRelease,
            Self::HandOver { .. } => Operation::HandOver,
            Self::List => Operation::List,
            Self::ForceRelease(_) => Operation::ForceRelease,
            Self::Close => Operation::Close,
        }
    }
}

/// What the wrapped backend answered a call, as a [`Hook`] sees it; the
/// hook may change the answer before the client gets it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Answer<'a> {
    /// An attempt's outcome.
    Acquire {
        /// The request.
        request: &'a AcquireRequest,
        /// What it gave.
        outcome: &'a mut Result<Attempt>,
    },
    /// The end of a wait.
    EndWait(&'a mut Result<()>),
    /// An extension's outcomes, one per lease.
    Extend {
        /// The leases.
        leases: &'a [Lease],
        /// Whether each is still ours.
        outcomes: &'a mut Vec<Result<bool>>,
    },
    /// A renewal's outcome.
    RenewSession(&'a mut Result<Renewal>),
    /// A release's outcome.
    Release {
        /// The lease.
        lease: &'a Lease,
        /// Whether it was ours.
        outcome: &'a mut Result<bool>,
    },
    /// A delayed release's outcome.
    DelayedRelease {
        /// The lease released.
        lease: &'a Lease,
        /// Whether it was ours.
        outcome: &'a mut Result<bool>,
    },
    /// A hand-over's outcome.
    HandOver {
        /// The lease that ends.
        lease: &'a Lease,
        /// The grant asked for.
        next: &'a AcquireRequest,
        /// What happened.
        outcome: &'a mut Result<HandOver>,
    },
    /// A listing.
    List(&'a mut Result<Vec<LockInfo>>),
    /// A forced release's outcome.
    ForceRelease {
        /// The name.
        name: &'a LockName,
        /// Whether it was held.
        outcome: &'a mut Result<bool>,
    },
    /// The end of the client's use of the backend.
    Close(&'a mut Result<()>),
}

/// Code a test runs around every call of a
/// [`TestBackend`](super::TestBackend), given with
/// [`with_hook`](super::TestBackend::with_hook): to record what the client
/// asks, stall or fail a chosen call, or change an answer. Every method
/// has a default that does nothing.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use distlock_core::testing::{Call, Hook, TestBackend};
/// use distlock_core::{LockClient, Result};
///
/// /// Counts the leases extended, one batch or many.
/// #[derive(Debug, Default)]
/// struct Extended(AtomicUsize);
///
/// #[distlock_core::backend::async_trait]
/// impl Hook for Extended {
///     async fn before(&self, call: Call<'_>) -> Result<()> {
///         if let Call::Extend(leases) = call {
///             self.0.fetch_add(leases.len(), Ordering::SeqCst);
///         }
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<()> {
/// let extended = Arc::new(Extended::default());
/// let backend = TestBackend::new().with_hook(extended.clone());
/// let client = LockClient::builder().build_shared(backend.shared())?;
/// let guard = client.acquire("report").await?;
/// tokio::time::sleep(std::time::Duration::from_secs(60)).await;
/// assert!(extended.0.load(Ordering::SeqCst) > 0);
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait Hook: Send + Sync + fmt::Debug {
    /// Runs before `call` is passed on. An error is the call's answer, and
    /// the call is not passed on. It may wait, or never return: the time
    /// counts against the call's operation timeout.
    async fn before(&self, call: Call<'_>) -> Result<()> {
        let _ = call;
        Ok(())
    }

    /// Runs once the wrapped backend answered, and may change the answer.
    async fn after(&self, answer: Answer<'_>) {
        let _ = answer;
    }

    /// Whether a wait for `name` gets the wrapped backend's watch of its
    /// releases now; `false` makes the wait poll, and ask again before its
    /// next attempt, as when a backend's wake-ups have not started yet.
    fn watches(&self, name: &LockName) -> bool {
        let _ = name;
        true
    }
}

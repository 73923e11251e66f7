//! What one call to take a lock asks for: the kind of claim, how long to
//! wait, when to give up, and what to hand the backend.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::backend::state::Payload;
use crate::claim::Claim;
use crate::engine::hold::HoldBounds;

/// The setters an attempt's options share, written once for
/// [`TryOptions`] and [`AcquireOptions`]: each goes through the type's
/// `attempt_mut`.
macro_rules! attempt_setters {
    () => {
        /// Takes `claim`: the general form of [`shared`](Self::shared) and
        /// [`permit`](Self::permit).
        pub fn claim(mut self, claim: Claim) -> Self {
            self.attempt_mut().claim = claim;
            self
        }

        /// Takes a reader's share of the name instead of the whole lock.
        ///
        /// Readers hold a name together, and never while a writer (an
        /// exclusive holder) does. Once a writer waits, readers that come after
        /// it wait behind it, so a steady stream of readers cannot starve
        /// writers; readers already in finish first. Each reader has its own
        /// grant, fencing token and lease.
        pub fn shared(self) -> Self {
            self.claim(Claim::Shared)
        }

        /// Takes one of `limit` permits of the semaphore of this name: at most
        /// `limit` holders, in every process, hold a permit at once.
        ///
        /// Every permit holder has its own grant, fencing token and lease, so a
        /// holder that dies gives its permit back when its lease ends. All
        /// holders of a semaphore must agree on its limit: asking with another
        /// limit than its holders' is an
        /// [`Error::KindConflict`](crate::Error::KindConflict). A limit outside
        /// 1 to [`MAX_PERMITS`](crate::MAX_PERMITS) is refused by the call.
        pub fn permit(self, limit: u32) -> Self {
            self.claim(Claim::Permit { limit })
        }

        /// Hands the backend `payload` with every attempt: something a backend
        /// needs from its caller beside the name, as an entity lock needs the
        /// value to insert when the entity is missing. Calls with different
        /// payloads still queue for the name together in one client.
        pub fn payload(mut self, payload: Payload) -> Self {
            self.attempt_mut().payload = payload;
            self
        }

        /// Holds the lock for at most `max_hold` from its grant: then the
        /// background extension stops, the lease is released, and
        /// [`lost`](crate::LockGuard::lost) resolves with
        /// [`LossReason::HoldLimit`](crate::LossReason::HoldLimit), on every
        /// backend. A job that hangs then loses its lock in time, instead of
        /// holding it for as long as its process lives. A zero `max_hold` is
        /// refused by the call.
        pub fn max_hold(mut self, max_hold: Duration) -> Self {
            self.attempt_mut().max_hold = Some(max_hold);
            self
        }

        /// Keeps the lock at least `min_hold` from its grant, as ShedLock's
        /// `lockAtLeastFor` does: a release before then leaves the lock held
        /// until `min_hold` has passed, and then it is free without any further
        /// call. A job that fires on every instance at once, and ends sooner
        /// than the instances' clocks disagree, then runs once: an instance
        /// that fires a moment late still finds the lock held, and skips.
        ///
        /// The time is judged by the server's clock where the backend has one,
        /// and counted from when the grant's reply arrived, so the lock stays
        /// held at least `min_hold` after the server granted it, never less.
        /// Once released, the lock is no longer extended, the guard's
        /// [`release`](crate::LockGuard::release) returns `Ok(true)`, and
        /// [`lost`](crate::LockGuard::lost) says
        /// [`LossReason::Released`](crate::LossReason::Released). Other tasks
        /// of this client wait for it on the backend as everyone else does: it
        /// is never handed over to them early. Dropping the guard releases the
        /// same way; a guard dropped after its runtime shut down, and a
        /// [`release_with`](crate::LockGuard::release_with), run no delayed
        /// release. A release after `min_hold` is an ordinary one.
        ///
        /// The lock then outlives the holder's process by at most `min_hold`,
        /// even on backends whose locks die with their process (the file
        /// backend keeps a marker, judged by the machine's clock).
        ///
        /// # Errors
        /// The call fails at once, before asking the backend: with
        /// [`Error::Unsupported`](crate::Error::Unsupported) on a backend that
        /// cannot keep a lock after its release (PostgreSQL in advisory mode,
        /// whose locks die with their connection); with
        /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a zero
        /// `min_hold`, one longer than [`max_hold`](Self::max_hold), or a claim
        /// other than the whole lock (readers and permits have no shortest
        /// hold).
        pub fn min_hold(mut self, min_hold: Duration) -> Self {
            self.attempt_mut().min_hold = Some(min_hold);
            self
        }

        /// Records `label` with this grant in place of the client's
        /// [`LockOptions::label`](crate::LockOptions::label): `distlock list`
        /// and [`LockInfo::holder`](crate::LockInfo::holder) show it. One line
        /// of text, at most 1 KiB; anything else is refused by the call.
        pub fn label(mut self, label: impl Into<String>) -> Self {
            self.attempt_mut().label = Some(label.into());
            self
        }
    };
}

/// What one attempt asks for: the options of
/// [`LockClient::try_acquire_with`](crate::LockClient::try_acquire_with),
/// which never waits, so they carry no timeout and no cancellation. Each
/// of them is an option of [`AcquireOptions`] too, which a `TryOptions`
/// converts into.
///
/// ```
/// use distlock_core::{LockClient, MemoryBackend, TryOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::Error> {
/// let client = LockClient::builder().build(MemoryBackend::new())?;
/// // One of three permits, or nothing now.
/// let permit = client.try_acquire_with("exports", TryOptions::new().permit(3)).await?;
/// assert!(permit.is_some());
/// # Ok(())
/// # }
/// ```
///
/// A try never waits, so it cannot be given a wait's options:
///
/// ```compile_fail
/// # use std::time::Duration;
/// # use distlock_core::{LockClient, MemoryBackend, TryOptions};
/// # async fn refused(client: LockClient) {
/// client.try_acquire_with("exports", TryOptions::new().timeout(Duration::from_secs(1))).await;
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "options do nothing until passed to a call"]
pub struct TryOptions {
    pub(crate) claim: Claim,
    pub(crate) payload: Payload,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) label: Option<String>,
}

impl Default for TryOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl TryOptions {
    /// An exclusive claim.
    pub fn new() -> Self {
        Self {
            claim: Claim::Exclusive,
            payload: Payload::none(),
            max_hold: None,
            min_hold: None,
            label: None,
        }
    }

    fn attempt_mut(&mut self) -> &mut TryOptions {
        self
    }

    attempt_setters!();

    /// The claim these options ask for.
    pub fn requested_claim(&self) -> Claim {
        self.claim
    }

    /// The longest and shortest hold these options ask for.
    pub(crate) fn hold_bounds(&self) -> HoldBounds {
        HoldBounds {
            max: self.max_hold,
            min: self.min_hold,
        }
    }
}

impl From<Claim> for TryOptions {
    fn from(claim: Claim) -> Self {
        Self::new().claim(claim)
    }
}

/// The options of one call of
/// [`LockClient::acquire_with`](crate::LockClient::acquire_with) and
/// [`with_lock`](crate::LockClient::with_lock): those of one attempt
/// ([`TryOptions`]), and how long to wait.
///
/// The default takes the lock exclusively and waits with no deadline, as
/// [`LockClient::acquire`](crate::LockClient::acquire) does. A
/// [`Duration`] converts into the options of an exclusive wait for that
/// long, so `client.acquire_with("jobs", Duration::from_secs(5))` reads as
/// it should.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::{AcquireOptions, LockClient, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::Error> {
/// let client = LockClient::builder().build(MemoryBackend::new())?;
///
/// // A reader's share, waited for at most five seconds.
/// let reader = client
///     .acquire_with("config", AcquireOptions::new().shared().timeout(Duration::from_secs(5)))
///     .await?;
/// reader.release().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "options do nothing until passed to a call"]
pub struct AcquireOptions<'a> {
    /// What each attempt asks for.
    pub(crate) attempt: TryOptions,
    pub(crate) timeout: Option<Duration>,
    pub(crate) cancel: Option<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>,
    /// Whether the grant is an election's term (set by a campaign).
    pub(crate) records_term: bool,
}

impl Default for AcquireOptions<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> AcquireOptions<'a> {
    /// An exclusive claim, waited for with no deadline.
    pub fn new() -> Self {
        Self {
            attempt: TryOptions::new(),
            timeout: None,
            cancel: None,
            records_term: false,
        }
    }

    fn attempt_mut(&mut self) -> &mut TryOptions {
        &mut self.attempt
    }

    attempt_setters!();

    /// Waits for at most `timeout`, then gives up with
    /// [`Error::Timeout`](crate::Error::Timeout). A zero timeout tries
    /// exactly once. Without one, the call waits until it is granted or
    /// cancelled.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Gives up with [`Error::Cancelled`](crate::Error::Cancelled) when
    /// `cancel` completes: a shutdown signal, a
    /// `CancellationToken::cancelled()`, a timer.
    ///
    /// Dropping a call's future leaves an attempt in flight to finish in
    /// the background, and a grant it brings to be released there.
    /// Cancelling through `cancel` returns only once nothing is held: an
    /// attempt in flight is waited for (it ends within the operation
    /// timeout), and a grant it brings is released before the error is
    /// returned. Use it when the process is about to exit: background work
    /// ends with the runtime, and a grant nobody released would keep others
    /// waiting until its lease ran out.
    pub fn cancel_on(mut self, cancel: impl Future<Output = ()> + Send + 'a) -> Self {
        self.cancel = Some(Box::pin(cancel));
        self
    }

    /// Records the grant as a term of the election of the same name, with
    /// the label as the leader's value, as
    /// [`Election::campaign`](crate::Election::campaign) does, so that
    /// observers of the election see it. For callers that take the
    /// election's lock through the general calls (`distlock campaign` takes
    /// it through [`LockClient::acquire_all`](crate::LockClient::acquire_all)).
    /// Such a grant is never handed over by another task of the client.
    ///
    /// # Errors
    /// The call fails with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a claim
    /// other than the whole lock, or for a set of more than one lock: an
    /// election has one leader, on one name.
    pub(crate) fn records_term(mut self) -> Self {
        self.records_term = true;
        self
    }

    /// The claim asked for.
    pub fn requested_claim(&self) -> Claim {
        self.attempt.claim
    }

    /// The longest wait, if there is one.
    pub fn wait_limit(&self) -> Option<Duration> {
        self.timeout
    }
}

impl From<Duration> for AcquireOptions<'_> {
    /// An exclusive claim, waited for at most `timeout`.
    fn from(timeout: Duration) -> Self {
        Self::new().timeout(timeout)
    }
}

impl From<TryOptions> for AcquireOptions<'_> {
    /// The same attempt, waited for with no deadline.
    fn from(attempt: TryOptions) -> Self {
        Self {
            attempt,
            ..Self::new()
        }
    }
}

impl From<Claim> for AcquireOptions<'_> {
    /// `claim`, waited for with no deadline.
    fn from(claim: Claim) -> Self {
        Self::new().claim(claim)
    }
}

impl fmt::Debug for AcquireOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcquireOptions")
            .field("attempt", &self.attempt)
            .field("timeout", &self.timeout)
            .field("cancel", &self.cancel.is_some())
            .finish()
    }
}

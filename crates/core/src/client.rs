//! The lock client: waiting, timeouts, cancellation and coalescing, written
//! once for every backend.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{Fuse, FusedFuture};
use tokio::time::Instant;
use tracing::Instrument;

use crate::attempt::{Asking, Outcome};
use crate::backend::{AcquireRequest, Backend, Holder, Lease, LockInfo};
use crate::backoff::Backoff;
use crate::claim::Claim;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handover::Succession;
use crate::keeper::Keeper;
use crate::lease::{HeldLease, LossReporter, LostSignal};
use crate::name::LockName;
use crate::options::LockOptions;
use crate::slots::{Baton, LocalReleases, LocalReleasesWatch, SlotPermit, Slots};
use crate::state::Payload;
use crate::wake::ReleaseWatch;

/// Takes, keeps and releases locks on one backend.
///
/// A client is cheap to clone; clones share one keeper task, which extends
/// every lease the client holds, and one table of in-process slots, so that
/// tasks of this process queue for a name locally instead of each asking the
/// backend.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use distlock_core::{LockClient, LockName, LockOptions, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::Error> {
/// let client = LockClient::new(Arc::new(MemoryBackend::new()), LockOptions::default());
/// let name = LockName::new("nightly-report")?;
///
/// let guard = client.acquire(&name, Duration::from_secs(5)).await?;
/// println!("fencing token {}", guard.fencing_token());
/// assert!(client.try_acquire(&name).await?.is_none());
/// assert!(guard.release().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    backend: Arc<dyn Backend>,
    options: LockOptions,
    holder: Arc<Holder>,
    keeper: Keeper,
    slots: Slots,
    release_wakeups: bool,
    /// Set when the backend can hand a lock from one task to the next.
    succession: Option<Arc<Succession>>,
}

/// What a closure run by [`LockClient::with_lock`] knows of its lock.
#[derive(Debug, Clone)]
pub struct LockContext {
    /// The lock's name.
    pub name: LockName,
    /// The grant's fencing token.
    pub fencing_token: u64,
    /// Resolves if the lease is lost while the closure runs.
    pub lost: LostSignal,
}

impl LockClient {
    /// A client of `backend` with `options`.
    pub fn new(backend: Arc<dyn Backend>, options: LockOptions) -> Self {
        let capabilities = backend.capabilities();
        let holder = Arc::new(Holder::this_process(options.label()));
        let keeper = Keeper::new(options.clone(), &backend);
        let succession = (capabilities.hand_over && options.local_hand_overs() > 0).then(|| {
            Arc::new(Succession {
                holder: holder.clone(),
                lease: options.lease(),
                bound: options.local_hand_overs(),
                min_run: options.min_local_run(),
                keeper: keeper.clone(),
            })
        });
        Self {
            inner: Arc::new(Inner {
                keeper,
                backend,
                options,
                holder,
                slots: Slots::default(),
                release_wakeups: capabilities.release_wakeups,
                succession,
            }),
        }
    }

    /// The backend this client uses.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The options this client uses.
    pub fn options(&self) -> &LockOptions {
        &self.inner.options
    }

    /// Tries once to take `name` exclusively. Returns `Ok(None)` when it is
    /// held elsewhere, including by another task of this client.
    ///
    /// # Errors
    /// As [`try_acquire_claim`](Self::try_acquire_claim).
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped after the backend granted the
    /// lock, the grant is released in the background.
    pub async fn try_acquire(&self, name: &LockName) -> Result<Option<LockGuard>> {
        self.try_acquire_claim(name, Claim::Exclusive).await
    }

    /// Tries once to take a reader's share of `name`; see
    /// [`acquire_shared`](Self::acquire_shared).
    ///
    /// # Errors
    /// As [`try_acquire_claim`](Self::try_acquire_claim).
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_shared(&self, name: &LockName) -> Result<Option<LockGuard>> {
        self.try_acquire_claim(name, Claim::Shared).await
    }

    /// Tries once to take one of `limit` permits of the semaphore `name`;
    /// see [`acquire_permit`](Self::acquire_permit).
    ///
    /// # Errors
    /// As [`try_acquire_claim`](Self::try_acquire_claim).
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_permit(
        &self,
        name: &LockName,
        limit: u32,
    ) -> Result<Option<LockGuard>> {
        self.try_acquire_claim(name, Claim::Permit { limit }).await
    }

    /// Tries once to take `claim` on `name`. Returns `Ok(None)` when it
    /// cannot be had now: a writer or all permits are in, or (for a
    /// reader) a writer waits.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a permit limit outside 1 to
    /// [`MAX_PERMITS`](crate::MAX_PERMITS); [`Error::KindConflict`] when the
    /// name is held as another kind; [`Error::Unsupported`] for a claim the
    /// backend does not grant; a backend error, or a timeout of the single
    /// attempt (the operation timeout of the options).
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_claim(
        &self,
        name: &LockName,
        claim: Claim,
    ) -> Result<Option<LockGuard>> {
        self.try_acquire_claim_with(name, claim, Payload::none())
            .await
    }

    /// As [`try_acquire_claim`](Self::try_acquire_claim), handing the
    /// backend `payload` with the attempt; see
    /// [`acquire_claim_with`](Self::acquire_claim_with).
    ///
    /// # Errors
    /// As [`try_acquire_claim`](Self::try_acquire_claim).
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_claim_with(
        &self,
        name: &LockName,
        claim: Claim,
        payload: Payload,
    ) -> Result<Option<LockGuard>> {
        let claim = claim.validated()?;
        let span = tracing::debug_span!("try_acquire", name = %name, ?claim);
        async {
            let Some(permit) = self.inner.slots.try_acquire(name) else {
                tracing::debug!(outcome = "held in this process");
                return Ok(None);
            };
            let asking = Asking::new(self.request(name, claim, false, payload));
            let budget = self.inner.options.operation_timeout();
            let (outcome, asking) = asking.attempt(&self.inner.backend, budget).await;
            self.end_wait(asking).await;
            match outcome {
                Ok(Outcome::Granted(lease, sent_at, reporter)) => Ok(Some(self.guard(
                    permit,
                    lease,
                    sent_at,
                    reporter,
                    Instant::now(),
                ))),
                Ok(Outcome::Held(_)) => {
                    tracing::debug!(outcome = "held elsewhere");
                    Ok(None)
                }
                Err(error) => {
                    tracing::debug!(%error, outcome = "error");
                    Err(error)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Waits for `name` for at most `timeout`, then gives up with
    /// [`Error::Timeout`]. A zero timeout tries exactly once.
    ///
    /// The first attempt always has the whole operation timeout to answer,
    /// so that even a zero timeout gets a real answer from a slow backend.
    /// Later attempts end at the deadline, except the one made at the
    /// deadline, which may take up to 100 ms (at most the operation
    /// timeout). So `acquire` returns within `timeout` plus 100 ms, or
    /// within the operation timeout if that is longer and the backend is
    /// that slow to answer the first attempt.
    ///
    /// Waiters retry with jittered exponential backoff within the options'
    /// range, never later than the moment the backend says the current lease
    /// ends, and at once when the backend reports a release (where it can).
    ///
    /// # Errors
    /// [`Error::Timeout`] after the deadline; a backend error as soon as one
    /// happens.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future at any point leaves no lease held
    /// that nobody owns. A grant that arrives after the drop is released in
    /// the background. To know that nothing is held when the wait ends, use
    /// [`acquire_or_cancel`](Self::acquire_or_cancel) instead.
    pub async fn acquire(&self, name: &LockName, timeout: Duration) -> Result<LockGuard> {
        self.acquire_claim(name, Claim::Exclusive, timeout).await
    }

    /// Waits for a reader's share of `name`, for at most `timeout`.
    ///
    /// Readers hold `name` together, and never while a writer (a holder
    /// from [`acquire`](Self::acquire)) does. Once a writer waits, readers
    /// that come after it wait behind it, so a steady stream of readers
    /// cannot starve writers; readers already in finish first. Each reader
    /// has its own grant, fencing token and lease.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, LockName, LockOptions, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::Error> {
    /// let client = LockClient::new(Arc::new(MemoryBackend::new()), LockOptions::default());
    /// let config = LockName::new("config")?;
    ///
    /// let first = client.acquire_shared(&config, Duration::from_secs(5)).await?;
    /// let second = client.acquire_shared(&config, Duration::from_secs(5)).await?;
    /// assert!(second.fencing_token() > first.fencing_token());
    /// // The writer's side waits for both readers.
    /// assert!(client.try_acquire(&config).await?.is_none());
    /// first.release().await?;
    /// second.release().await?;
    /// let writer = client.acquire(&config, Duration::from_secs(5)).await?;
    /// writer.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`acquire_claim`](Self::acquire_claim).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_shared(&self, name: &LockName, timeout: Duration) -> Result<LockGuard> {
        self.acquire_claim(name, Claim::Shared, timeout).await
    }

    /// Waits for one of `limit` permits of the semaphore `name`, for at most
    /// `timeout`: at most `limit` holders, in every process, hold a permit
    /// at once.
    ///
    /// Every permit holder has its own grant, fencing token and lease, so a
    /// holder that dies gives its permit back when its lease ends. All
    /// holders of a semaphore must agree on its limit: asking with another
    /// limit than its holders' is an [`Error::KindConflict`]. A name that
    /// nobody holds takes the limit of whoever asks first.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, LockName, LockOptions, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::Error> {
    /// let client = LockClient::new(Arc::new(MemoryBackend::new()), LockOptions::default());
    /// let exports = LockName::new("exports")?;
    ///
    /// let one = client.acquire_permit(&exports, 2, Duration::from_secs(5)).await?;
    /// let two = client.acquire_permit(&exports, 2, Duration::from_secs(5)).await?;
    /// assert!(client.try_acquire_permit(&exports, 2).await?.is_none());
    /// one.release().await?;
    /// let three = client.acquire_permit(&exports, 2, Duration::from_secs(5)).await?;
    /// two.release().await?;
    /// three.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`acquire_claim`](Self::acquire_claim).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_permit(
        &self,
        name: &LockName,
        limit: u32,
        timeout: Duration,
    ) -> Result<LockGuard> {
        self.acquire_claim(name, Claim::Permit { limit }, timeout)
            .await
    }

    /// Waits for `claim` on `name`, for at most `timeout`: the general form
    /// of [`acquire`](Self::acquire),
    /// [`acquire_shared`](Self::acquire_shared) and
    /// [`acquire_permit`](Self::acquire_permit), with the same timing.
    ///
    /// # Errors
    /// [`Error::Timeout`] after the deadline; [`Error::InvalidConfig`] for a
    /// permit limit outside 1 to [`MAX_PERMITS`](crate::MAX_PERMITS);
    /// [`Error::KindConflict`] when the name is held as another kind;
    /// [`Error::Unsupported`] for a claim the backend does not grant; a
    /// backend error as soon as one happens.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_claim(
        &self,
        name: &LockName,
        claim: Claim,
        timeout: Duration,
    ) -> Result<LockGuard> {
        self.acquire_claim_or_cancel(name, claim, timeout, std::future::pending())
            .await
    }

    /// As [`acquire`](Self::acquire), and gives up with
    /// [`Error::Cancelled`] when `cancel` completes.
    ///
    /// Dropping the future of `acquire` leaves an attempt in flight to
    /// finish in the background, and a grant it brings to be released
    /// there. Cancelling through `cancel` returns only once nothing is
    /// held: an attempt in flight is waited for (it ends within the
    /// operation timeout), and a grant it brings is released before the
    /// error is returned. Use it when the process is about to exit, on a
    /// signal for example: background work ends with the runtime, and a
    /// grant nobody released would keep others waiting until its lease ran
    /// out.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{Error, LockClient, LockName, LockOptions, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let client = LockClient::new(Arc::new(MemoryBackend::new()), LockOptions::default());
    /// let name = LockName::new("nightly-report")?;
    /// let held = client.acquire(&name, Duration::ZERO).await?;
    ///
    /// // Gives up after 50 ms, long before the 10 s timeout.
    /// let stop = tokio::time::sleep(Duration::from_millis(50));
    /// let waited = client.acquire_or_cancel(&name, Duration::from_secs(10), stop).await;
    /// assert!(matches!(waited, Err(Error::Cancelled { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Cancelled`] once `cancel` completed (also when it completed
    /// while a grant arrived: the grant is released); otherwise as
    /// [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Dropping the returned future is as safe as dropping `acquire`'s.
    /// Cancelling through `cancel` leaves nothing held, except a lock that
    /// another task of this client hands over at that very moment: that one
    /// goes to the next task waiting, or is released in the background.
    pub async fn acquire_or_cancel(
        &self,
        name: &LockName,
        timeout: Duration,
        cancel: impl Future<Output = ()>,
    ) -> Result<LockGuard> {
        self.acquire_claim_or_cancel(name, Claim::Exclusive, timeout, cancel)
            .await
    }

    /// As [`acquire_claim`](Self::acquire_claim), and gives up with
    /// [`Error::Cancelled`] when `cancel` completes; see
    /// [`acquire_or_cancel`](Self::acquire_or_cancel).
    ///
    /// # Errors
    /// [`Error::Cancelled`] once `cancel` completed; otherwise as
    /// [`acquire_claim`](Self::acquire_claim).
    ///
    /// # Cancel safety
    /// As [`acquire_or_cancel`](Self::acquire_or_cancel).
    pub async fn acquire_claim_or_cancel(
        &self,
        name: &LockName,
        claim: Claim,
        timeout: Duration,
        cancel: impl Future<Output = ()>,
    ) -> Result<LockGuard> {
        self.wait_with(name, claim, timeout, Payload::none(), cancel)
            .await
    }

    /// As [`acquire_claim`](Self::acquire_claim), handing the backend
    /// `payload` with every attempt: something a backend needs from its
    /// caller beside the name, as an entity lock needs the value to insert
    /// when the entity is missing. Calls with different payloads still
    /// queue for the name together in this client.
    ///
    /// # Errors
    /// As [`acquire_claim`](Self::acquire_claim).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_claim_with(
        &self,
        name: &LockName,
        claim: Claim,
        timeout: Duration,
        payload: Payload,
    ) -> Result<LockGuard> {
        self.wait_with(name, claim, timeout, payload, std::future::pending())
            .await
    }

    /// Validates `claim`, then waits for it in a span of its own.
    async fn wait_with(
        &self,
        name: &LockName,
        claim: Claim,
        timeout: Duration,
        payload: Payload,
        cancel: impl Future<Output = ()>,
    ) -> Result<LockGuard> {
        let claim = claim.validated()?;
        let span = tracing::debug_span!(
            "acquire",
            name = %name,
            ?claim,
            timeout_ms = timeout.as_millis() as u64
        );
        self.wait_for(name, claim, timeout, payload, cancel)
            .instrument(span)
            .await
    }

    /// Waits for `claim` on `name` until `timeout` or `cancel`: first for
    /// this client's slot of the name, then for the backend's grant.
    async fn wait_for(
        &self,
        name: &LockName,
        claim: Claim,
        timeout: Duration,
        payload: Payload,
        cancel: impl Future<Output = ()>,
    ) -> Result<LockGuard> {
        let cancel = std::pin::pin!(cancel.fuse());
        let mut wait = Wait::new(self, name, timeout, cancel);
        let (permit, yielded) = match wait.local_turn(claim).await? {
            Baton::Granted(guard) => return wait.deliver(guard).await,
            Baton::Free(permit) => (permit, false),
            Baton::Yielded(permit) => (permit, true),
        };
        // A backend whose waits hang on its session keeps it while we wait.
        let _waiting = self.inner.keeper.begin_wait();
        // A zero timeout tries once, so it leaves no record of a waiter.
        let retries = !timeout.is_zero();
        let mut pending = PendingWait::new(
            self,
            Asking::new(self.request(name, claim, retries, payload)),
        );
        let outcome = wait.for_grant(&mut pending, yielded).await;
        pending.end().await;
        let (lease, sent_at, reporter) = outcome?;
        let guard = self.guard(permit, lease, sent_at, reporter, wait.started);
        wait.deliver(guard).await
    }

    /// Takes `name`, runs `work`, and releases on every path: when `work`
    /// returns, when it panics (the guard's drop releases in the
    /// background), and when this future is dropped.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); [`Error::Lost`] if the lease was lost
    /// before `work` finished (its output is then dropped: watch
    /// [`LockContext::lost`] to stop early); a backend error if the release
    /// failed.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire); once `work` runs,
    /// dropping the future releases the lock in the background.
    pub async fn with_lock<T, F, Fut>(
        &self,
        name: &LockName,
        timeout: Duration,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_claim(name, Claim::Exclusive, timeout, work).await
    }

    /// As [`with_lock`](Self::with_lock), holding `claim`: a reader's share
    /// or a semaphore's permit.
    ///
    /// # Errors
    /// As [`acquire_claim`](Self::acquire_claim), and as
    /// [`with_lock`](Self::with_lock) once `work` runs.
    ///
    /// # Cancel safety
    /// As [`with_lock`](Self::with_lock).
    pub async fn with_claim<T, F, Fut>(
        &self,
        name: &LockName,
        claim: Claim,
        timeout: Duration,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire_claim(name, claim, timeout).await?;
        let context = LockContext {
            name: name.clone(),
            fencing_token: guard.fencing_token(),
            lost: guard.lost_signal(),
        };
        let output = work(context).await;
        if guard.release().await? {
            Ok(output)
        } else {
            Err(Error::Lost {
                name: name.to_string(),
            })
        }
    }

    /// The locks held now, as the backend sees them (see
    /// [`Capabilities::lists_every_holder`](crate::Capabilities::lists_every_holder)).
    ///
    /// # Errors
    /// A backend error.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn list(&self) -> Result<Vec<LockInfo>> {
        self.inner.backend.list().await
    }

    /// Releases `name` whoever holds it; see [`Backend::force_release`].
    ///
    /// # Errors
    /// A backend error.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the release done or not done; it is
    /// safe to call again.
    pub async fn force_release(&self, name: &LockName) -> Result<bool> {
        tracing::info!(name = %name, "forcing release");
        self.inner.backend.force_release(name).await
    }

    /// A request for `claim` on `name`, made by this client.
    fn request(
        &self,
        name: &LockName,
        claim: Claim,
        retries: bool,
        payload: Payload,
    ) -> AcquireRequest {
        AcquireRequest {
            retries,
            payload,
            operation_timeout: self.inner.options.operation_timeout(),
            ..AcquireRequest::new(
                name.clone(),
                claim,
                self.inner.options.lease(),
                self.inner.holder.clone(),
            )
        }
    }

    /// Ends a wait that got no grant on the backend.
    async fn end_wait(&self, asking: Option<Asking>) {
        if let Some(asking) = asking {
            asking.end(&*self.inner.backend).await;
        }
    }

    /// The guard of `lease`, granted by a request sent at `sent_at` for a
    /// wait that began at `started`. An exclusive grant keeps this client's
    /// slot of the name; a reader or a permit passes it on at once, so that
    /// the next task of this client may try too.
    fn guard(
        &self,
        permit: SlotPermit,
        lease: Lease,
        sent_at: Instant,
        reporter: LossReporter,
        started: Instant,
    ) -> LockGuard {
        tracing::debug!(
            fencing_token = lease.fencing_token,
            waited_us = started.elapsed().as_micros() as u64,
            outcome = "acquired"
        );
        let exclusive = lease.claim == Claim::Exclusive;
        let held = Arc::new(HeldLease::new(lease, self.inner.backend.clone(), reporter));
        let key = self.inner.keeper.insert(held.clone(), sent_at);
        let (slot, succession, shared) = if exclusive {
            (Some(permit), self.inner.succession.clone(), None)
        } else {
            let shared = Box::new(self.inner.slots.shared_release(&held.lease.name));
            drop(permit);
            (None, None, Some(shared))
        };
        LockGuard::new(
            held,
            self.inner.keeper.clone(),
            key,
            slot,
            succession,
            shared,
        )
    }
}

/// One call's wait: its deadline, its cancellation, and the errors it ends
/// with.
struct Wait<'a, C: Future<Output = ()>> {
    client: &'a LockClient,
    name: &'a LockName,
    started: Instant,
    deadline: Instant,
    cancel: Pin<&'a mut Fuse<C>>,
    /// The transient error the last attempt failed with, if it did.
    last_error: Option<Error>,
}

impl<'a, C: Future<Output = ()>> Wait<'a, C> {
    fn new(
        client: &'a LockClient,
        name: &'a LockName,
        timeout: Duration,
        cancel: Pin<&'a mut Fuse<C>>,
    ) -> Self {
        let started = Instant::now();
        let deadline = started
            .checked_add(timeout)
            .unwrap_or_else(|| started + Duration::from_secs(86_400 * 365 * 30));
        Self {
            client,
            name,
            started,
            deadline,
            cancel,
            last_error: None,
        }
    }

    fn timed_out(&mut self) -> Error {
        tracing::debug!(outcome = "timeout");
        Error::Timeout {
            name: self.name.to_string(),
            waited: self.started.elapsed(),
            last_error: self.last_error.take().map(Box::new),
        }
    }

    fn cancelled(&self) -> Error {
        tracing::debug!(outcome = "cancelled");
        Error::Cancelled {
            name: self.name.to_string(),
            waited: self.started.elapsed(),
        }
    }

    fn is_cancelled(&mut self) -> bool {
        self.cancel.is_terminated() || self.cancel.as_mut().now_or_never().is_some()
    }

    /// Waits for this client's slot of the name: a lock handed over by the
    /// task before, or the right to ask the backend.
    async fn local_turn(&mut self, claim: Claim) -> Result<Baton> {
        tokio::select! {
            biased;
            baton = self.client.inner.slots.acquire(self.name, claim) => Ok(baton),
            () = tokio::time::sleep_until(self.deadline) => Err(self.timed_out()),
            () = &mut self.cancel => Err(self.cancelled()),
        }
    }

    /// Asks the backend until it grants, the deadline passes, or the wait
    /// is cancelled. After a yielding release, other processes get the
    /// first chance.
    async fn for_grant(
        &mut self,
        pending: &mut PendingWait,
        yielded: bool,
    ) -> Result<(Lease, Instant, LossReporter)> {
        let inner = &self.client.inner;
        let mut watch = if inner.release_wakeups {
            inner.backend.watch_releases(self.name)
        } else {
            None
        };
        let (min, max) = inner.options.backoff();
        let mut backoff = Backoff::new(min, max);
        if yielded {
            // Another task of this client just held the lock through a run
            // of hand-overs: give other processes the first chance at it.
            let pause = min.min(self.deadline.saturating_duration_since(Instant::now()));
            self.pause(watch.as_mut(), None, pause).await?;
        }
        let operation_timeout = inner.options.operation_timeout();
        // Heard only once the lock was found held: an uncontended wait
        // pays nothing for it.
        let mut local_releases: Option<LocalReleasesWatch> = None;
        let mut first = true;
        loop {
            // Wake-ups that were not available when the wait began may be
            // now. Asked before the attempt, so that a release after it is
            // heard.
            if watch.is_none() && inner.release_wakeups {
                watch = inner.backend.watch_releases(self.name);
            }
            let seen = local_releases.as_ref().map(|releases| releases.seen());
            // An attempt is never cut short: its answer is waited for, so
            // that a cancelled wait knows whether it must release a grant.
            if self.is_cancelled() {
                return Err(self.cancelled());
            }
            // The timeout rule (see `LockOptions::operation_timeout`): the
            // first attempt gets the whole operation timeout, so a zero
            // timeout still tries once; later ones end at the deadline,
            // except that the attempt made at the deadline gets a moment to
            // answer rather than being abandoned unheard.
            let budget = if first {
                operation_timeout
            } else {
                self.deadline
                    .saturating_duration_since(Instant::now())
                    .max(operation_timeout.min(LockOptions::FINAL_ATTEMPT))
            };
            first = false;
            let wait = match pending.attempt(budget).await {
                Ok(Outcome::Granted(lease, sent_at, reporter)) => {
                    return Ok((lease, sent_at, reporter));
                }
                Ok(Outcome::Held(retry_after)) => {
                    self.last_error = None;
                    if local_releases.is_none() {
                        local_releases = Some(inner.slots.watch_local_releases(self.name));
                    }
                    match (&watch, retry_after) {
                        // With wake-ups a release wakes us; only a lease that
                        // runs out unreleased needs a timed retry.
                        (Some(_), Some(until_expiry)) => until_expiry + Duration::from_millis(1),
                        (Some(_), None) => max,
                        (None, Some(until_expiry)) => backoff
                            .next_wait()
                            .min(until_expiry + Duration::from_millis(1)),
                        (None, None) => backoff.next_wait(),
                    }
                }
                // A store that is briefly away (a restart, an election) is
                // waited out like a held lock, until the deadline.
                Err(error) if error.is_transient() => {
                    if self.last_error.is_none() {
                        tracing::warn!(%error, "an attempt failed; trying again until the deadline");
                    } else {
                        tracing::debug!(%error, outcome = "transient error");
                    }
                    self.last_error = Some(error);
                    backoff.next_wait()
                }
                Err(error) => {
                    tracing::debug!(%error, outcome = "error");
                    return Err(error);
                }
            };
            let now = Instant::now();
            if now >= self.deadline {
                return Err(self.timed_out());
            }
            let local = local_releases
                .as_deref()
                .map(|releases| (releases, seen.unwrap_or_else(|| releases.seen())));
            self.pause(watch.as_mut(), local, wait.min(self.deadline - now))
                .await?;
        }
    }

    /// Sleeps for `wait`, or less if `watch` reports a release first, or
    /// this client released a reader or a permit of the name since it last
    /// asked (`local`: the releases, and how many it had seen then).
    async fn pause(
        &mut self,
        watch: Option<&mut ReleaseWatch>,
        local: Option<(&LocalReleases, u64)>,
        wait: Duration,
    ) -> Result<()> {
        let released_here = async {
            match local {
                Some((releases, seen)) => releases.since(seen).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep_unless_released(watch, wait) => Ok(()),
            () = released_here => Ok(()),
            () = &mut self.cancel => Err(self.cancelled()),
        }
    }

    /// Hands `guard` to the caller, or releases it if the caller cancelled
    /// meanwhile.
    async fn deliver(&mut self, guard: LockGuard) -> Result<LockGuard> {
        if !self.is_cancelled() {
            return Ok(guard);
        }
        let error = self.cancelled();
        if let Err(release_error) = guard.release().await {
            tracing::warn!(%release_error, "could not release a grant that came after the wait was cancelled; it will expire");
        }
        Err(error)
    }
}

/// The backend's side of a wait: what it asks, and the state the backend
/// keeps for it. If the wait is dropped unfinished, the backend's record of
/// it is ended in the background.
struct PendingWait {
    backend: Arc<dyn Backend>,
    /// The next request; `None` once an attempt was left to finish in the
    /// background, until the next one begins afresh.
    asking: Option<Asking>,
    template: AcquireRequest,
}

impl PendingWait {
    fn new(client: &LockClient, asking: Asking) -> Self {
        Self {
            backend: client.inner.backend.clone(),
            template: asking.request.clone(),
            asking: Some(asking),
        }
    }

    async fn attempt(&mut self, budget: Duration) -> Result<Outcome> {
        let asking = self.asking.take().unwrap_or_else(|| {
            // The last attempt went on in the background with its state,
            // and ends it there; this one starts afresh.
            Asking::new(AcquireRequest {
                loss: LossReporter::new(),
                ..self.template.clone()
            })
        });
        let (outcome, asking) = asking.attempt(&self.backend, budget).await;
        self.asking = asking;
        outcome
    }

    /// Ends the backend's record of the wait, if it kept one.
    async fn end(mut self) {
        if let Some(asking) = self.asking.take() {
            asking.end(&*self.backend).await;
        }
    }
}

impl Drop for PendingWait {
    fn drop(&mut self) {
        let Some(asking) = self.asking.take().filter(|asking| !asking.wait.is_empty()) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let backend = self.backend.clone();
            runtime.spawn(async move { asking.end(&*backend).await });
        }
    }
}

/// Sleeps for `wait`, or less if `watch` reports a release first.
async fn sleep_unless_released(watch: Option<&mut ReleaseWatch>, wait: Duration) {
    match watch {
        Some(watch) => {
            tokio::select! {
                () = watch.released() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
        None => tokio::time::sleep(wait).await,
    }
}

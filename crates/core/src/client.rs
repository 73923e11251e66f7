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

use crate::acquire::{AcquireOptions, TryOptions};
use crate::backend::LossReporter;
use crate::backend::state::Payload;
use crate::backend::wake::ReleaseWatch;
use crate::backend::{AcquireRequest, Backend, Holder, Lease, LockInfo};
use crate::builder::LockClientBuilder;
use crate::claim::Claim;
use crate::engine::attempt::{Asking, Outcome, Unclaimed};
use crate::engine::backoff::Backoff;
use crate::engine::bounded;
use crate::engine::handover::Succession;
use crate::engine::held::HeldLease;
use crate::engine::keeper::Keeper;
use crate::engine::slots::{self, Baton, LocalReleases, LocalReleasesWatch};
use crate::engine::waiting::{PendingWait, sleep_unless_released};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::guard::SlotPermit;
use crate::lost::LostSignal;
use crate::metrics;
use crate::name::{IntoLockName, LockName};
use crate::options::LockOptions;

mod resume;

/// Takes, keeps and releases locks on one backend.
///
/// A client is cheap to clone; clones share one keeper task, which extends
/// every lease the client holds, and one table of in-process slots, so that
/// tasks of this process queue for a name locally instead of each asking the
/// backend.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::{LockClient, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::Error> {
/// let client = LockClient::builder().build(MemoryBackend::new())?;
///
/// let guard = client.acquire_with("nightly-report", Duration::from_secs(5)).await?;
/// println!("fencing token {}", guard.fencing_token());
/// assert!(client.try_acquire("nightly-report").await?.is_none());
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
    slots: slots::Slots<LockGuard>,
    /// Set when the backend can hand a lock from one task to the next.
    succession: Option<Arc<Succession>>,
}

impl Inner {
    /// A watch of `name`'s releases, when the backend reports them now.
    fn watch_releases(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.backend.abilities().wakeups?.watch(name)
    }
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
    /// A builder of a client: options first, then the backend.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// A client of `backend` with `options`, already built.
    pub fn new(backend: Arc<dyn Backend>, options: LockOptions) -> Self {
        let holder = Arc::new(Holder::this_process(options.label()));
        let keeper = Keeper::new(options.clone(), &backend);
        // In fair mode the store's queue decides who is next, so nothing is
        // handed over inside the client.
        let hands_over = backend.abilities().hand_overs.is_some() && !backend.capabilities().fair;
        let succession = (hands_over && options.local_hand_overs() > 0).then(|| {
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
                slots: slots::Slots::default(),
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

    /// Gives back what the backend keeps on the server for this client,
    /// before the process exits: an etcd client revokes its session, as
    /// etcd's own `Session.Close()` does, so that its keys go now rather
    /// than a TTL later. Other backends keep nothing of the kind, and this
    /// does nothing. Release every lock first: those still held through
    /// this client's backend are lost (their holders learn it), and a
    /// backend shared with other clients is closed for them too.
    ///
    /// A transient failure (a server election, a timeout) is tried again,
    /// with backoff, until the operation timeout has passed.
    ///
    /// # Errors
    /// The last error once the operation timeout has passed, or the first
    /// one that trying again cannot mend; the server then ends the session
    /// by itself at the end of its TTL.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped, the session is either given back or left to
    /// end by itself.
    pub async fn close(&self) -> Result<()> {
        let backend = &self.inner.backend;
        let limit = self.inner.options.operation_timeout();
        let deadline = Instant::now() + limit;
        let (mut pause, longest) = self.inner.options.backoff();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let outcome = bounded::call(&**backend, left, "close", backend.close()).await;
            match outcome {
                Err(error) if error.is_transient() && Instant::now() + pause < deadline => {
                    tracing::debug!(%error, "closing the backend failed; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(longest);
                }
                other => return other,
            }
        }
    }

    /// Waits for `name`, exclusively, with no deadline: as
    /// `tokio::sync::Mutex::lock` waits, but across every process sharing
    /// the backend. A name string is validated here.
    ///
    /// Waiters retry with jittered exponential backoff within the options'
    /// range, never later than the moment the backend says the current lease
    /// ends, and at once when the backend reports a release (where it can).
    /// A backend that fails with transient errors (an election, a restart)
    /// is waited out like a held lock. To wait for at most a while, to take
    /// a reader's share or a permit, or to give up on a signal, use
    /// [`acquire_with`](Self::acquire_with).
    ///
    /// ```
    /// use distlock_core::{LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::Error> {
    /// let client = LockClient::builder().build(MemoryBackend::new())?;
    /// let guard = client.acquire("nightly-report").await?;
    /// println!("fencing token {}", guard.fencing_token());
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an invalid name; an error that retrying
    /// cannot mend as soon as one happens ([`Error::Denied`],
    /// [`Error::KindConflict`], …).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future at any point leaves no lease held
    /// that nobody owns. A grant that arrives after the drop is released in
    /// the background. To know that nothing is held when the wait ends, give
    /// [`AcquireOptions::cancel_on`] to [`acquire_with`](Self::acquire_with)
    /// instead.
    pub async fn acquire(&self, name: impl IntoLockName) -> Result<LockGuard> {
        self.acquire_with(name, AcquireOptions::new()).await
    }

    /// Waits for `name` as `options` say: the claim (exclusive, a reader's
    /// share, a permit), the longest wait, a cancellation, a payload for
    /// the backend. A [`Duration`] converts into options that wait that
    /// long for the whole lock.
    ///
    /// With a timeout, the first attempt always has the whole operation
    /// timeout to answer, so that even a zero timeout gets a real answer
    /// from a slow backend. Later attempts end at the deadline, except the
    /// one made at the deadline, which may take up to 100 ms (at most the
    /// operation timeout). So the call returns within the timeout plus
    /// 100 ms, or within the operation timeout if that is longer and the
    /// backend is that slow to answer the first attempt.
    ///
    /// ```
    /// use std::time::Duration;
    /// use distlock_core::{AcquireOptions, Error, LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let client = LockClient::builder().build(MemoryBackend::new())?;
    /// let held = client.acquire_with("nightly-report", Duration::from_secs(5)).await?;
    ///
    /// // Gives up after 50 ms, long before the 10 s timeout.
    /// let stop = tokio::time::sleep(Duration::from_millis(50));
    /// let options = AcquireOptions::new().timeout(Duration::from_secs(10)).cancel_on(stop);
    /// let waited = client.acquire_with("nightly-report", options).await;
    /// assert!(matches!(waited, Err(Error::Cancelled { .. })));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`] after the deadline; [`Error::Cancelled`] once the
    /// cancellation completed (also when it completed while a grant
    /// arrived: the grant is released); [`Error::InvalidName`] for an
    /// invalid name; [`Error::InvalidConfig`] for a permit limit outside 1
    /// to [`MAX_PERMITS`](crate::MAX_PERMITS); [`Error::KindConflict`] when
    /// the name is held as another kind; [`Error::Unsupported`] for a claim
    /// the backend does not grant; an error that retrying cannot mend as
    /// soon as one happens.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire). Cancelling through
    /// [`AcquireOptions::cancel_on`] leaves nothing held, except a lock that
    /// another task of this client hands over at that very moment: that one
    /// goes to the next task waiting, or is released in the background.
    pub async fn acquire_with<'a>(
        &self,
        name: impl IntoLockName,
        options: impl Into<AcquireOptions<'a>>,
    ) -> Result<LockGuard> {
        let name = name.into_lock_name()?;
        let AcquireOptions {
            attempt,
            timeout,
            cancel,
            records_term,
        } = options.into();
        let claim = attempt.claim.validated()?;
        let bounds = attempt.hold_bounds();
        bounds.check(claim, &*self.inner.backend)?;
        let details = self.grant_details(attempt.payload, attempt.label, records_term)?;
        let span = tracing::debug_span!(
            "acquire",
            name = %name,
            ?claim,
            timeout_ms = timeout.map(|timeout| timeout.as_millis() as u64)
        );
        let cancel = async move {
            match cancel {
                Some(cancel) => cancel.await,
                None => std::future::pending().await,
            }
        };
        let started = Instant::now();
        let outcome = self
            .wait_for(&name, claim, timeout, details, cancel)
            .instrument(span)
            .await
            .map(|guard| guard.bound_hold(bounds));
        let ended = match &outcome {
            Ok(_) => metrics::Acquired::Granted,
            Err(error) => metrics::Acquired::of_error(error),
        };
        self.meter(&name, claim, ended, started);
        outcome
    }

    /// Counts an acquisition of `claim` on `name`, begun at `started`, that
    /// ended so.
    fn meter(&self, name: &LockName, claim: Claim, ended: metrics::Acquired, started: Instant) {
        metrics::acquisition(
            self.inner.backend.store_name(),
            claim.kind(),
            self.inner.options.metrics_by_name().then_some(name),
            ended,
            started.elapsed(),
        );
    }

    /// Tries once to take `name` exclusively. Returns `Ok(None)` when it is
    /// held elsewhere, including by another task of this client.
    ///
    /// # Errors
    /// As [`try_acquire_with`](Self::try_acquire_with).
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped after the backend granted the
    /// lock, the grant is released in the background.
    pub async fn try_acquire(&self, name: impl IntoLockName) -> Result<Option<LockGuard>> {
        self.try_acquire_with(name, TryOptions::new()).await
    }

    /// Tries once to take the claim of `options` on `name`, handing the
    /// backend their payload. Returns `Ok(None)` when it cannot be had now:
    /// a writer or all permits are in, or (for a reader) a writer waits.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an invalid name; [`Error::InvalidConfig`]
    /// for a permit limit outside 1 to [`MAX_PERMITS`](crate::MAX_PERMITS);
    /// [`Error::KindConflict`] when the name is held as another kind;
    /// [`Error::Unsupported`] for a claim the backend does not grant; a
    /// backend error, or [`Error::OperationTimeout`] when the single attempt
    /// did not answer within the operation timeout.
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_with(
        &self,
        name: impl IntoLockName,
        options: impl Into<TryOptions>,
    ) -> Result<Option<LockGuard>> {
        let name = name.into_lock_name()?;
        let options = options.into();
        let claim = options.claim.validated()?;
        let bounds = options.hold_bounds();
        bounds.check(claim, &*self.inner.backend)?;
        let details = self.grant_details(options.payload, options.label, false)?;
        let span = tracing::debug_span!("try_acquire", name = %name, ?claim);
        let started = Instant::now();
        let outcome = self
            .try_once(&name, claim, details)
            .instrument(span)
            .await
            .map(|granted| granted.map(|guard| guard.bound_hold(bounds)));
        let ended = match &outcome {
            Ok(Some(_)) => metrics::Acquired::Granted,
            Ok(None) => metrics::Acquired::Refused,
            Err(error) => metrics::Acquired::of_error(error),
        };
        self.meter(&name, claim, ended, started);
        outcome
    }

    /// One attempt at `claim` on `name`, if this client's slot of the
    /// name is free.
    async fn try_once(
        &self,
        name: &LockName,
        claim: Claim,
        details: GrantDetails,
    ) -> Result<Option<LockGuard>> {
        let permit = if self.waits_in_store(claim) {
            None
        } else {
            let Some(permit) = self.inner.slots.try_acquire(name) else {
                tracing::debug!(outcome = "held in this process");
                return Ok(None);
            };
            Some(permit)
        };
        let asking = Asking::new(self.request(name, claim, false, details));
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

    /// Waits for `claim` on `name` until `timeout` or `cancel`: first for
    /// this client's slot of the name, then for the backend's grant.
    async fn wait_for(
        &self,
        name: &LockName,
        claim: Claim,
        timeout: Option<Duration>,
        details: GrantDetails,
        cancel: impl Future<Output = ()>,
    ) -> Result<LockGuard> {
        let cancel = std::pin::pin!(cancel.fuse());
        let mut wait = Wait::new(self, name, timeout, cancel);
        let (permit, yielded) = if self.waits_in_store(claim) {
            (None, false)
        } else {
            match wait.local_turn(details.takes_hand_overs(claim)).await? {
                Baton::Granted(guard) => return wait.deliver(guard).await,
                Baton::Free(permit) => (Some(permit), false),
                Baton::Yielded(permit) => (Some(permit), true),
            }
        };
        // A backend whose waits hang on its session keeps it while we wait.
        let _waiting = self.inner.keeper.begin_wait();
        // A zero timeout tries once, so it leaves no record of a waiter.
        let retries = timeout != Some(Duration::ZERO);
        let mut pending = PendingWait::new(
            self.inner.backend.clone(),
            Asking::new(self.request(name, claim, retries, details)),
        );
        let outcome = match wait.for_grant(&mut pending, yielded).await {
            Ok((lease, ..)) if pending.request().records_term && wait.is_cancelled() => {
                // Cancelled as the grant came: nobody leads by it, so its
                // term goes with it.
                Unclaimed::of(pending.request(), lease)
                    .release(&*self.inner.backend, self.inner.options.operation_timeout())
                    .await;
                Err(wait.cancelled())
            }
            outcome => outcome,
        };
        pending.end().await;
        let (lease, sent_at, reporter) = outcome?;
        let guard = self.guard(permit, lease, sent_at, reporter, wait.started);
        wait.deliver(guard).await
    }

    /// Takes `name` as `options` say, runs `work`, and releases on every
    /// path: when `work` returns, when it panics (the guard's drop releases
    /// in the background), and when this future is dropped. `options` may
    /// be a [`Duration`] (the whole lock, waited for that long) or
    /// [`AcquireOptions`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::Error> {
    /// let client = LockClient::builder().build(MemoryBackend::new())?;
    /// let token = client
    ///     .with_lock("nightly-report", Duration::from_secs(5), |lock| async move {
    ///         // Write with `lock.fencing_token`; stop early if `lock.lost` fires.
    ///         lock.fencing_token
    ///     })
    ///     .await?;
    /// assert!(token > 0);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with); [`Error::Lost`] if the lease
    /// was lost before `work` finished (its output is then dropped: watch
    /// [`LockContext::lost`] to stop early); a backend error if the release
    /// failed.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire); once `work` runs,
    /// dropping the future releases the lock in the background.
    pub async fn with_lock<'a, T, F, Fut>(
        &self,
        name: impl IntoLockName,
        options: impl Into<AcquireOptions<'a>>,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let name = name.into_lock_name()?;
        let guard = self.acquire_with(&name, options).await?;
        let context = LockContext {
            fencing_token: guard.fencing_token(),
            lost: guard.lost_signal(),
            name,
        };
        let name = context.name.to_string();
        let output = work(context).await;
        if guard.release().await? {
            Ok(output)
        } else {
            Err(Error::Lost { name })
        }
    }

    /// The locks held now, as the backend sees them (see
    /// [`Capabilities::lists_every_holder`](crate::backend::Capabilities::lists_every_holder)).
    ///
    /// # Errors
    /// A backend error; [`Error::OperationTimeout`] when the backend did
    /// not answer within the operation timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn list(&self) -> Result<Vec<LockInfo>> {
        let limit = self.inner.options.operation_timeout();
        let backend = &self.inner.backend;
        let Some(waiters) = backend.abilities().waiters else {
            return self.admin("list", limit, backend.list(limit)).await;
        };
        // Side by side, so the listing still ends within one limit.
        let (held, waiting) = futures::future::join(
            self.admin("list", limit, backend.list(limit)),
            self.admin("list waiters", limit, waiters.waiters(limit)),
        )
        .await;
        let every_wait = waiters.sees_every_wait();
        Ok(crate::info::with_waiters(held?, waiting?, every_wait))
    }

    /// Releases `name` whoever holds it; see [`Backend::force_release`].
    ///
    /// # Errors
    /// A backend error; [`Error::OperationTimeout`] when the backend did
    /// not answer within the operation timeout.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the release done or not done; it is
    /// safe to call again.
    pub async fn force_release(&self, name: impl IntoLockName) -> Result<bool> {
        let name = name.into_lock_name()?;
        tracing::info!(name = %name, "forcing release");
        let limit = self.inner.options.operation_timeout();
        let forced = self.inner.backend.force_release(&name, limit);
        self.admin("force release", limit, forced).await
    }

    /// `call`, the backend's administrative `operation`, which was given
    /// `limit`, bounded by it (see the [`Backend`]'s time budget).
    pub(crate) async fn admin<T>(
        &self,
        operation: &'static str,
        limit: Duration,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        bounded::admin_call(&*self.inner.backend, limit, operation, call).await
    }

    /// Whether a call for `claim` waits in the store's own queue, each task
    /// by itself, rather than one task of this client at a time: the whole
    /// lock, on a backend in fair mode.
    fn waits_in_store(&self, claim: Claim) -> bool {
        claim == Claim::Exclusive && self.inner.backend.capabilities().fair
    }

    /// A request for `claim` on `name`, made by this client.
    fn request(
        &self,
        name: &LockName,
        claim: Claim,
        retries: bool,
        details: GrantDetails,
    ) -> AcquireRequest {
        AcquireRequest {
            retries,
            payload: details.payload,
            records_term: details.records_term,
            operation_timeout: self.inner.options.operation_timeout(),
            ..AcquireRequest::new(
                name.clone(),
                claim,
                self.inner.options.lease(),
                details.holder,
            )
        }
    }

    /// What a call hands the backend beside the name and claim: its
    /// payload, the holder to record, with the call's own label if it
    /// gave one, and whether the grant is an election's term.
    fn grant_details(
        &self,
        payload: Payload,
        label: Option<String>,
        records_term: bool,
    ) -> Result<GrantDetails> {
        let own_label = label.is_some();
        let holder = match label {
            None => self.inner.holder.clone(),
            Some(label) => {
                check_label(&label)?;
                Arc::new(Holder {
                    label: Some(label),
                    ..(*self.inner.holder).clone()
                })
            }
        };
        Ok(GrantDetails {
            payload,
            holder,
            records_term,
            own_label,
        })
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
        permit: Option<SlotPermit>,
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
        let held = Arc::new(HeldLease::new(
            lease,
            self.inner.backend.clone(),
            reporter,
            self.inner.options.metrics_by_name(),
        ));
        let key = self.inner.keeper.insert(held.clone(), sent_at);
        let (slot, succession, shared) = match permit {
            Some(permit) if exclusive => (Some(permit), self.inner.succession.clone(), None),
            // A reader, a permit, or a lock waited for in a fair store's
            // queue: its release is told to this client's other waiters.
            permit => {
                let shared = Box::new(self.inner.slots.shared_release(&held.lease.name));
                drop(permit);
                (None, None, Some(shared))
            }
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

/// What one call hands the backend beside the name and claim.
struct GrantDetails {
    payload: Payload,
    holder: Arc<Holder>,
    records_term: bool,
    /// Whether `holder` has the call's own label, not the client's.
    own_label: bool,
}

impl GrantDetails {
    /// Whether a lock another task of this client hands over may be this
    /// call's grant. A hand-over grants the whole lock with the client's
    /// holder and records no term, so a call that asks for its own label or
    /// for a term asks the backend itself.
    fn takes_hand_overs(&self, claim: Claim) -> bool {
        claim == Claim::Exclusive && !self.own_label && !self.records_term
    }
}

/// The longest label a call may record with its grant, in bytes.
pub(crate) const MAX_LABEL_LEN: usize = 1024;

/// Refuses a label too long to record, or with control characters, which
/// `distlock list` would have to print.
pub(crate) fn check_label(label: &str) -> Result<()> {
    if label.len() > MAX_LABEL_LEN {
        return Err(Error::config(
            "label",
            format!(
                "is {} bytes long; a label is at most {MAX_LABEL_LEN} bytes",
                label.len()
            ),
        ));
    }
    if label.chars().any(char::is_control) {
        return Err(Error::config(
            "label",
            "has a control character (a newline, a tab, a NUL…); labels are one line of text",
        ));
    }
    Ok(())
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
        timeout: Option<Duration>,
        cancel: Pin<&'a mut Fuse<C>>,
    ) -> Self {
        let started = Instant::now();
        // No deadline, or one past what the clock can hold: thirty years.
        let deadline = timeout
            .and_then(|timeout| started.checked_add(timeout))
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
    async fn local_turn(&mut self, takes_hand_overs: bool) -> Result<Baton<LockGuard>> {
        tokio::select! {
            biased;
            baton = self.client.inner.slots.acquire(self.name, takes_hand_overs) => Ok(baton),
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
        let mut watch = inner.watch_releases(self.name);
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
            if watch.is_none() {
                watch = inner.watch_releases(self.name);
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

// The builder collects options; the client's module makes the client.
impl LockClientBuilder {
    /// Checks the options, then makes the client of `backend`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming the
    /// first option that is out of range and saying why.
    pub fn build(self, backend: impl Backend + 'static) -> Result<LockClient> {
        self.build_shared(Arc::new(backend))
    }

    /// As [`build`](Self::build), for a backend already shared.
    ///
    /// # Errors
    /// As [`build`](Self::build).
    pub fn build_shared(self, backend: Arc<dyn Backend>) -> Result<LockClient> {
        Ok(LockClient::new(backend, self.build_options()?))
    }
}

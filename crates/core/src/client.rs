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

use crate::backend::{AcquireRequest, Attempt, Backend, Holder, Lease, LeaseId, LockInfo};
use crate::backoff::Backoff;
use crate::bounded;
use crate::detach::Detach;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handover::Succession;
use crate::keeper::Keeper;
use crate::lease::{HeldLease, LostSignal};
use crate::name::LockName;
use crate::options::LockOptions;
use crate::slots::{Baton, SlotPermit, Slots};
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

/// How long the attempt made at the deadline may take to answer.
const FINAL_ATTEMPT_BUDGET: Duration = Duration::from_millis(100);

enum Outcome {
    Granted(Lease, Instant),
    Held(Option<Duration>),
}

impl LockClient {
    /// A client of `backend` with `options`.
    pub fn new(backend: Arc<dyn Backend>, options: LockOptions) -> Self {
        let capabilities = backend.capabilities();
        let holder = Arc::new(Holder::this_process(options.label()));
        let keeper = Keeper::new(options.clone(), capabilities.process_bound);
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

    /// Tries once to take `name`. Returns `Ok(None)` when it is held
    /// elsewhere, including by another task of this client.
    ///
    /// # Errors
    /// A backend error, or a timeout of the single attempt (the operation
    /// timeout of the options).
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped after the backend granted the
    /// lock, the grant is released in the background.
    pub async fn try_acquire(&self, name: &LockName) -> Result<Option<LockGuard>> {
        let span = tracing::debug_span!("try_acquire", name = %name);
        async {
            let Some(permit) = self.inner.slots.try_acquire(name) else {
                tracing::debug!(outcome = "held in this process");
                return Ok(None);
            };
            let outcome = self
                .attempt(name, self.inner.options.operation_timeout())
                .await;
            self.finish(permit, outcome, Instant::now()).map(Result::ok)
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
        let span =
            tracing::debug_span!("acquire", name = %name, timeout_ms = timeout.as_millis() as u64);
        self.acquire_inner(name, timeout, std::future::pending())
            .instrument(span)
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
        let span = tracing::debug_span!(
            "acquire_or_cancel",
            name = %name,
            timeout_ms = timeout.as_millis() as u64
        );
        self.acquire_inner(name, timeout, cancel)
            .instrument(span)
            .await
    }

    async fn acquire_inner(
        &self,
        name: &LockName,
        timeout: Duration,
        cancel: impl Future<Output = ()>,
    ) -> Result<LockGuard> {
        let started = Instant::now();
        let deadline = started
            .checked_add(timeout)
            .unwrap_or_else(|| started + Duration::from_secs(86_400 * 365 * 30));
        let timed_out = || Error::Timeout {
            name: name.to_string(),
            waited: started.elapsed(),
        };
        let cancelled = || {
            tracing::debug!(outcome = "cancelled");
            Error::Cancelled {
                name: name.to_string(),
                waited: started.elapsed(),
            }
        };
        let mut cancel = std::pin::pin!(cancel.fuse());
        let baton = tokio::select! {
            biased;
            baton = self.inner.slots.acquire(name) => baton,
            () = tokio::time::sleep_until(deadline) => return Err(timed_out()),
            () = &mut cancel => return Err(cancelled()),
        };
        let (permit, yielded) = match baton {
            Baton::Granted(guard) => {
                tracing::debug!(
                    fencing_token = guard.fencing_token(),
                    waited_us = started.elapsed().as_micros() as u64,
                    outcome = "handed over"
                );
                if is_done(cancel.as_mut()) {
                    return Err(give_back(guard, cancelled()).await);
                }
                return Ok(guard);
            }
            Baton::Free(permit) => (permit, false),
            Baton::Yielded(permit) => (permit, true),
        };
        let mut watch = if self.inner.release_wakeups {
            self.inner.backend.watch_releases(name)
        } else {
            None
        };
        let (min, max) = self.inner.options.backoff();
        let mut backoff = Backoff::new(min, max);
        if yielded {
            // Another task of this client just held the lock through a run
            // of hand-overs: give other processes the first chance at it.
            let pause = min.min(deadline.saturating_duration_since(Instant::now()));
            tokio::select! {
                () = sleep_unless_released(watch.as_mut(), pause) => {}
                () = &mut cancel => return Err(cancelled()),
            }
        }
        let mut first = true;
        let mut permit = Some(permit);
        loop {
            // An attempt is never cut short: its answer is waited for, so
            // that a cancelled wait knows whether it must release a grant.
            if is_done(cancel.as_mut()) {
                return Err(cancelled());
            }
            // The first attempt always gets the full operation timeout, so a
            // zero timeout still tries once. Later ones end at the deadline,
            // except that the attempt made at the deadline gets a moment to
            // answer rather than being abandoned unheard.
            let operation_timeout = self.inner.options.operation_timeout();
            let budget = if first {
                operation_timeout
            } else {
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(operation_timeout.min(FINAL_ATTEMPT_BUDGET))
            };
            first = false;
            let outcome = self.attempt(name, budget).await;
            let retry_after = match outcome {
                Ok(Outcome::Held(retry_after)) => retry_after,
                other => {
                    let permit = permit.take().expect("the permit is only taken here");
                    let guard = match self.finish(permit, other, started)? {
                        Ok(guard) => guard,
                        Err(_) => unreachable!("held outcomes are handled above"),
                    };
                    if is_done(cancel.as_mut()) {
                        return Err(give_back(guard, cancelled()).await);
                    }
                    return Ok(guard);
                }
            };
            let now = Instant::now();
            if now >= deadline {
                tracing::debug!(outcome = "timeout");
                return Err(timed_out());
            }
            let mut wait = match (&watch, retry_after) {
                // With wake-ups a release wakes us; only a lease that runs out
                // unreleased needs a timed retry.
                (Some(_), Some(until_expiry)) => until_expiry + Duration::from_millis(1),
                (Some(_), None) => max,
                (None, Some(until_expiry)) => backoff
                    .next_wait()
                    .min(until_expiry + Duration::from_millis(1)),
                (None, None) => backoff.next_wait(),
            };
            wait = wait.min(deadline - now);
            tokio::select! {
                () = sleep_unless_released(watch.as_mut(), wait) => {}
                () = &mut cancel => return Err(cancelled()),
            }
        }
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
        let guard = self.acquire(name, timeout).await?;
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

    /// One attempt. If the caller stops waiting (cancellation, or the budget
    /// runs out), the attempt still completes in the background, and a grant
    /// that nobody waits for is released rather than leaked.
    async fn attempt(&self, name: &LockName, budget: Duration) -> Result<Outcome> {
        let request = AcquireRequest {
            name: name.clone(),
            lease_id: LeaseId::random(),
            lease: self.inner.options.lease(),
            holder: self.inner.holder.clone(),
        };
        let backend = self.inner.backend.clone();
        let operation_timeout = self.inner.options.operation_timeout();
        let call = {
            let backend = backend.clone();
            async move {
                let sent_at = Instant::now();
                let attempt = bounded::within(
                    backend.call_bound(request.lease),
                    operation_timeout,
                    "acquire",
                    backend.try_acquire(&request),
                )
                .await;
                let lease = Lease {
                    name: request.name,
                    id: request.lease_id,
                    fencing_token: 0,
                    lease: request.lease,
                };
                match attempt {
                    Ok(Attempt::Acquired { fencing_token }) => Ok(Outcome::Granted(
                        Lease {
                            fencing_token,
                            ..lease
                        },
                        sent_at,
                    )),
                    Ok(Attempt::Held { retry_after }) => Ok(Outcome::Held(retry_after)),
                    Err(error) => {
                        // The backend may have granted before the reply was
                        // lost; release by identity, harmless if it did not.
                        tokio::spawn(async move {
                            release_unclaimed(&*backend, &lease, operation_timeout).await;
                        });
                        Err(error)
                    }
                }
            }
        };
        let attempt = Detach::with_orphan(call, move |outcome| async move {
            if let Ok(Outcome::Granted(lease, _)) = outcome {
                release_unclaimed(&*backend, &lease, operation_timeout).await;
            }
        });
        if budget >= operation_timeout {
            // The call is bounded by the operation timeout already; a second
            // timer would only cost the runtime's timer wheel a registration.
            return attempt.await;
        }
        match tokio::time::timeout(budget, attempt).await {
            Ok(outcome) => outcome,
            Err(_) => Ok(Outcome::Held(None)),
        }
    }

    /// Turns an attempt's outcome into a guard (`Ok(Ok)`), "held"
    /// (`Ok(Err(retry_after))`), or an error.
    fn finish(
        &self,
        permit: SlotPermit,
        outcome: Result<Outcome>,
        started: Instant,
    ) -> Result<Result<LockGuard, Option<Duration>>> {
        match outcome {
            Ok(Outcome::Granted(lease, sent_at)) => {
                tracing::debug!(
                    fencing_token = lease.fencing_token,
                    waited_us = started.elapsed().as_micros() as u64,
                    outcome = "acquired"
                );
                let held = Arc::new(HeldLease::new(
                    lease,
                    self.inner.backend.clone(),
                    self.inner.options.operation_timeout(),
                ));
                let key = self.inner.keeper.insert(held.clone(), sent_at);
                Ok(Ok(LockGuard::new(
                    held,
                    self.inner.keeper.clone(),
                    key,
                    permit,
                    self.inner.succession.clone(),
                )))
            }
            Ok(Outcome::Held(retry_after)) => {
                drop(permit);
                tracing::debug!(outcome = "held elsewhere");
                Ok(Err(retry_after))
            }
            Err(error) => {
                drop(permit);
                tracing::debug!(%error, outcome = "error");
                Err(error)
            }
        }
    }
}

/// Whether `cancel` has completed, without waiting for it.
fn is_done(cancel: Pin<&mut Fuse<impl Future<Output = ()>>>) -> bool {
    cancel.is_terminated() || cancel.now_or_never().is_some()
}

/// Releases `guard`, taken after the caller cancelled, and returns `error`.
async fn give_back(guard: LockGuard, error: Error) -> Error {
    if let Err(release_error) = guard.release().await {
        tracing::warn!(%release_error, "could not release a grant that came after the wait was cancelled; it will expire");
    }
    error
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

async fn release_unclaimed(backend: &dyn Backend, lease: &Lease, timeout: Duration) {
    match tokio::time::timeout(timeout, backend.release(lease)).await {
        Ok(Ok(true)) => tracing::debug!(name = %lease.name, "released a grant nobody waited for"),
        Ok(Ok(false)) => {}
        Ok(Err(error)) => {
            tracing::warn!(name = %lease.name, %error, "could not release an unclaimed grant; it will expire")
        }
        Err(_) => {
            tracing::warn!(name = %lease.name, "releasing an unclaimed grant timed out; it will expire")
        }
    }
}

//! The guard that proves a lock is held.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::Lease;
use crate::backend::state::GrantState;
use crate::claim::Claim;
use crate::engine::detach::Detach;
use crate::engine::handover::{self, NextGrant, Succession};
use crate::engine::held::HeldLease;
use crate::engine::hold::HoldBounds;
use crate::engine::keeper::Keeper;
use crate::engine::min_hold::{release_after, time_left};
use crate::engine::slots::{self, SharedRelease};
use crate::error::{Error, Result};
use crate::lost::{LossReason, LostSignal};
use crate::name::LockName;
use crate::risk::{RiskReason, RiskSignal};

/// The slot of a name in this client, which a guard holds while it holds
/// the lock, and passes on when it is done.
pub(crate) type SlotPermit = slots::SlotPermit<LockGuard>;

/// Proof that this process holds a lock. It is owned, `'static` and `Send`,
/// so it can move into a spawned task.
///
/// While the guard lives, the client's keeper extends the lease in the
/// background. [`lost`](Self::lost) resolves if the lease stops being ours.
///
/// Release it with [`release`](Self::release), which says whether the lock
/// was still ours. Dropping the guard instead stops the extension and
/// releases in a spawned task, without blocking. Where no Tokio runtime is
/// running (the guard is dropped after the runtime shut down), nothing can be
/// sent: the lease then ends when it expires on the server, and for the file
/// backend when the file handle closes, which happens at once.
#[must_use = "dropping the guard releases the lock at once"]
#[derive(Debug)]
pub struct LockGuard {
    held: Arc<HeldLease>,
    keeper: Keeper,
    key: u64,
    slot: Option<SlotPermit>,
    /// Set when the backend can hand the lock to this client's next waiter.
    succession: Option<Arc<Succession>>,
    /// A reader's or a permit's tie to this client's waiters for the name
    /// (boxed: exclusive guards, the common kind, stay small).
    shared: Option<Box<SharedRelease>>,
    /// How long after the grant a release still leaves the lock held; see
    /// [`AcquireOptions::min_hold`](crate::AcquireOptions::min_hold).
    min_hold: Option<Duration>,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(
        held: Arc<HeldLease>,
        keeper: Keeper,
        key: u64,
        slot: Option<SlotPermit>,
        succession: Option<Arc<Succession>>,
        shared: Option<Box<SharedRelease>>,
    ) -> Self {
        Self {
            held,
            keeper,
            key,
            slot,
            succession,
            shared,
            min_hold: None,
            released: false,
        }
    }

    /// Ends the lease `bounds.max` after its grant, and keeps it at least
    /// `bounds.min` after its grant; see
    /// [`AcquireOptions::max_hold`](crate::AcquireOptions::max_hold) and
    /// [`min_hold`](crate::AcquireOptions::min_hold).
    pub(crate) fn bound_hold(mut self, bounds: HoldBounds) -> Self {
        if let Some(max_hold) = bounds.max {
            crate::engine::hold::limit(&self.held, self.keeper.clone(), self.key, max_hold);
        }
        self.min_hold = bounds.min;
        self
    }

    /// Gives this freshly handed-over guard to the next task waiting for
    /// its name; gives it back when nobody waits any more.
    pub(crate) fn offer_to_next(self) -> std::result::Result<(), Self> {
        let queue = self
            .slot
            .as_ref()
            .expect("a live guard has its slot")
            .queue();
        queue.offer(self)
    }

    /// The lease this guard holds, shared with the keeper.
    pub(crate) fn held(&self) -> &Arc<HeldLease> {
        &self.held
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.held.lease.name
    }

    /// What this guard holds: the whole lock, a reader's share, or a
    /// semaphore's permit.
    pub fn claim(&self) -> Claim {
        self.held.lease.claim
    }

    /// What the backend keeps for this grant. Opaque to everyone but the
    /// backend that made it: a backend crate that hands its callers
    /// something from the grant (an entity lock hands the locked document)
    /// reads it here.
    pub fn grant_state(&self) -> &GrantState {
        &self.held.lease.state
    }

    /// Which grant this guard holds, as a value to keep (in a file, say)
    /// so that the next run of this process can take the same grant up
    /// with [`LockClient::resume`](crate::LockClient::resume) after a
    /// restart, with the same fencing token. Keep it as you would keep a
    /// credential: whoever has it can take the lock over.
    pub fn handle(&self) -> crate::resume::ResumeHandle {
        let lease = &self.held.lease;
        let backend = &self.held.backend;
        // The identity the store keeps the grant under, which a resume
        // finds it by.
        let id = match backend.abilities().resumes {
            crate::backend::Resuming::By(resumes) => resumes.stored_identity(lease),
            crate::backend::Resuming::Never(_) => lease.id,
        };
        crate::resume::ResumeHandle::new(
            backend.store_name(),
            lease.name.clone(),
            lease.claim,
            id,
            lease.fencing_token,
        )
    }

    /// The fencing token of this grant. It is strictly greater than every
    /// token granted before for the same name, so a protected resource that
    /// remembers the highest token it has seen can turn away a stale holder.
    pub fn fencing_token(&self) -> u64 {
        self.held.lease.fencing_token
    }

    /// Resolves, with the reason, when the lease is no longer ours.
    ///
    /// How early that is depends on the reason:
    /// - [`LossReason::Expired`]: no extension succeeded for the lease
    ///   period minus the safety margin, on the local monotonic clock. This
    ///   fires before the backend could grant the lock to anyone else,
    ///   given a server clock that runs at the local clock's rate within
    ///   the margin. A server clock that steps forward ends the lease on
    ///   the server early; the holder then learns at its next extension
    ///   (refused), and only a fencing token protects work done in between.
    /// - [`LossReason::Refused`] and [`LossReason::Detected`]: the backend
    ///   says the grant is gone. By then it may already have been granted
    ///   to someone else: it expired on the server (a holder paused past its
    ///   lease), or was forced away. Only a fencing token protects work done
    ///   in between.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        self.lost_signal().lost().await
    }

    /// Until when the lease is surely this holder's, on this machine's
    /// monotonic clock: the send time of the last grant or extension the
    /// server confirmed, plus the lease, less the safety margin (and less
    /// any step forward of the server's clock seen since). Past it, the
    /// lease may be someone else's, and [`lost`](Self::lost) fires unless
    /// an extension confirmed it again. It keeps its last value after the
    /// lease ends, so a holder that was paused can tell how long it could
    /// act on the lock. `None` where the lock is bound to this process
    /// (the file backend, PostgreSQL's advisory mode), which no clock
    /// ends.
    pub fn valid_until(&self) -> Option<std::time::Instant> {
        self.held.deadline()
    }

    /// Whether the lease has already been lost.
    pub fn is_lost(&self) -> bool {
        self.held.loss().is_some()
    }

    /// A cloneable, `'static` signal of loss, for the task doing the work.
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    /// Resolves, with the reason, when the lease is in danger but not yet
    /// lost, or once it is lost; at once if it already is. It is a
    /// warning to finish or pause the protected work before a loss:
    /// - [`RiskReason::ExtensionFailed`]: the last extension failed (an
    ///   error, or no answer within the operation timeout); the keeper
    ///   retries while the lease lasts.
    /// - [`RiskReason::LittleLeft`]: less than
    ///   [`LockOptions::at_risk_below`](crate::LockOptions::at_risk_below)
    ///   is left until [`valid_until`](Self::valid_until), the extension
    ///   sent for it still unanswered.
    /// - [`RiskReason::Lost`]: the lease is lost. A sudden loss (a forced
    ///   release, a refused extension) comes with no warning first.
    ///
    /// The danger passes when an extension confirms the lease again
    /// ([`RiskSignal::safe_again`]); call `at_risk` again to hear of the
    /// next one. A lock bound to this process (the file backend,
    /// PostgreSQL's advisory mode) is only ever at risk by its loss.
    ///
    /// ```
    /// use distlock_core::{LockClient, MemoryBackend, RiskReason};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::Error> {
    /// let client = LockClient::builder().build(MemoryBackend::new())?;
    /// let guard = client.acquire("nightly-report").await?;
    /// tokio::select! {
    ///     reason = guard.at_risk() => {
    ///         // Stop taking new work; finish or hand back what is under way.
    ///         assert!(matches!(reason, RiskReason::ExtensionFailed | RiskReason::LittleLeft | RiskReason::Lost(_)));
    ///     }
    ///     () = async { /* the protected work */ } => {}
    /// }
    /// assert_eq!(guard.risk(), None);
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn at_risk(&self) -> RiskReason {
        self.risk_signal().at_risk().await
    }

    /// Whether the lease is in danger now, and why; `None` while it is
    /// safe. See [`at_risk`](Self::at_risk).
    pub fn risk(&self) -> Option<RiskReason> {
        self.held.risk()
    }

    /// A cloneable, `'static` signal of the lease in danger, for the task
    /// doing the work.
    pub fn risk_signal(&self) -> RiskSignal {
        self.held.risk_signal()
    }

    /// Extends the lease now, on top of the background extension.
    ///
    /// # Errors
    /// [`Error::Lost`] if the lease is no longer ours; a backend error if the
    /// backend could not be asked, in which case the background extension
    /// keeps trying while the lease lasts.
    ///
    /// # Cancel safety
    /// Cancel safe: a cancelled extension either happened or did not, and the
    /// keeper goes on either way.
    pub async fn extend(&self) -> Result<()> {
        self.keeper.extend_now(self.key, &self.held).await
    }

    /// Releases the lock. Returns `Ok(true)` if it was still ours, and
    /// `Ok(false)` if it had been lost before.
    ///
    /// When another task of this client waits for the same name and the
    /// backend can, the lock passes straight to that task instead, in one
    /// step, with a new grant and a higher fencing token; see
    /// [`LockOptions::local_hand_overs`](crate::LockOptions::local_hand_overs).
    ///
    /// Before the lock's [`min_hold`](crate::AcquireOptions::min_hold) has
    /// passed, the backend is asked to give the lock up once it has, and
    /// the lock is neither extended nor handed over meanwhile.
    ///
    /// # Errors
    /// A backend error if the release could not be sent or confirmed; the
    /// lease then ends when it expires.
    ///
    /// # Cancel safety
    /// If the returned future is dropped before it completes, the release
    /// carries on in a spawned task, as when the guard is dropped.
    pub async fn release(mut self) -> Result<bool> {
        self.released = true;
        self.keeper.remove(self.key);
        let held = self.held.clone();
        let slot = self.slot.take();
        let succession = self.succession.take();
        let shared = self.shared.take();
        // If this future is dropped halfway, the release still completes, and
        // only then is the local slot handed on.
        Detach::new(release_lease(held, slot, succession, shared, self.min_hold)).await
    }

    /// Releases the lock with `release` in place of the backend's own
    /// release, for a backend that can do more in the same step: an entity
    /// lock, for example, writes the entity's new value and clears the lock
    /// in one update. Everything else is as for [`release`](Self::release).
    ///
    /// The background extension stops, and an extension in flight is waited
    /// for. Then `release` is called with the lease, bounded by the
    /// operation timeout; it must end the lease on the backend, only if the
    /// lease is still ours, and its output is returned. Afterwards
    /// [`lost`](Self::lost) resolves and the next task of this client
    /// waiting for the name may try, whatever the outcome.
    ///
    /// If the lease was already lost, `release` is not called: the lease is
    /// released as [`release`](Self::release) would, and the result is
    /// [`Error::Lost`].
    ///
    /// # Errors
    /// [`Error::Lost`] if the lease had been lost; a backend error if
    /// `release` did not answer within the operation timeout (whether it
    /// took effect is then unknown; an unreleased lease ends when it
    /// expires); otherwise whatever `release` returns.
    ///
    /// # Cancel safety
    /// As for [`release`](Self::release): if the returned future is dropped
    /// before it completes, `release` still runs to its end in a spawned
    /// task, and only then is the name handed to the next local task.
    pub async fn release_with<R, F, Fut>(mut self, release: F) -> Result<R>
    where
        F: FnOnce(Lease) -> Fut + Send + 'static,
        Fut: Future<Output = Result<R>> + Send + 'static,
        R: Send + 'static,
    {
        self.released = true;
        self.keeper.remove(self.key);
        let held = self.held.clone();
        let slot = self.slot.take();
        let shared = self.shared.take();
        Detach::new(release_lease_with(held, slot, shared, release)).await
    }
}

/// Releases `held` on the backend, then passes the local slot on to the
/// next task of this process waiting for the same name; or, where the
/// backend can, hands the lock itself to that task in one step. Before
/// `min_hold` has passed, the backend gives the lock up only once it has,
/// and the next task finds it held on the backend, as any other process
/// would.
async fn release_lease(
    held: Arc<HeldLease>,
    mut slot: Option<SlotPermit>,
    succession: Option<Arc<Succession>>,
    shared: Option<Box<SharedRelease>>,
    min_hold: Option<Duration>,
) -> Result<bool> {
    let started = std::time::Instant::now();
    let ops = held.ops.lock().await;
    let was_lost = held.loss().is_some();
    if let Some(left) = time_left(&held, min_hold).filter(|_| !was_lost) {
        let outcome = release_after(&held, left).await;
        drop(ops);
        end_released(
            &held,
            slot,
            shared,
            started,
            outcome.as_ref().map(|&ours| Some(ours)),
        );
        return outcome;
    }
    if !was_lost
        && let (Some(succession), Some(permit)) = (&succession, slot.as_mut())
        && succession.applies(permit)
    {
        let permit = slot.take().expect("checked just above");
        let outcome = handover::hand_over(&held, permit, succession)
            .await
            .map(|(ours, next)| {
                if let Some(next) = next {
                    offer_to_next_waiter(next, succession);
                }
                ours
            });
        drop(ops);
        tracing::debug!(
            name = %held.lease.name,
            fencing_token = held.lease.fencing_token,
            outcome = ?outcome.as_ref().map_err(ToString::to_string),
            duration_us = started.elapsed().as_micros() as u64,
            "lock released by hand-over"
        );
        return outcome;
    }
    let outcome = held.release_on_backend().await;
    drop(ops);
    end_released(
        &held,
        slot,
        shared,
        started,
        outcome.as_ref().map(|&ours| Some(ours)),
    );
    outcome.map(|still_ours| still_ours && !was_lost)
}

/// Builds the guard of the grant a hand-over made, and offers it to the
/// first task still waiting.
fn offer_to_next_waiter(next: NextGrant<LockGuard>, succession: &Arc<Succession>) {
    let guard = LockGuard::new(
        next.held,
        succession.keeper.clone(),
        next.key,
        Some(next.permit),
        Some(succession.clone()),
        None,
    );
    if let Err(unclaimed) = guard.offer_to_next() {
        // The waiter gave up meanwhile: dropping the guard releases the
        // new grant in the background (or hands it on again).
        drop(unclaimed);
    }
}

/// As [`release_lease`], with the caller's operation in place of the
/// backend's release, unless the lease is already lost.
async fn release_lease_with<R, F, Fut>(
    held: Arc<HeldLease>,
    slot: Option<SlotPermit>,
    shared: Option<Box<SharedRelease>>,
    release: F,
) -> Result<R>
where
    F: FnOnce(Lease) -> Fut,
    Fut: Future<Output = Result<R>>,
{
    let started = std::time::Instant::now();
    let ops = held.ops.lock().await;
    let outcome = if held.loss().is_some() {
        // The caller's operation is for a lease that is ours; this one is
        // not (or may not be), so only clear it if the backend still has it.
        let _ = held.release_on_backend().await;
        Err(held.lost_error())
    } else {
        tokio::time::timeout(held.lease.operation_timeout, release(held.lease.clone()))
            .await
            .unwrap_or_else(|_| {
                Err(Error::operation_timeout(
                    "release",
                    held.lease.operation_timeout,
                ))
            })
    };
    drop(ops);
    end_released(&held, slot, shared, started, outcome.as_ref().map(|_| None));
    outcome
}

/// Ends `held` after a release, then lets the next task of this process
/// try; logs the outcome (whether the lease was still ours, when known).
fn end_released(
    held: &HeldLease,
    slot: Option<SlotPermit>,
    shared: Option<Box<SharedRelease>>,
    started: std::time::Instant,
    outcome: std::result::Result<Option<bool>, &Error>,
) {
    held.end(LossReason::Released);
    // Only now may the next task of this process try.
    drop(slot);
    if let Some(shared) = shared {
        shared.released();
    }
    match outcome {
        Ok(still_ours) => tracing::debug!(
            name = %held.lease.name,
            fencing_token = held.lease.fencing_token,
            still_ours,
            duration_us = started.elapsed().as_micros() as u64,
            "lock released"
        ),
        Err(error @ Error::Lost { .. }) => tracing::debug!(
            name = %held.lease.name,
            fencing_token = held.lease.fencing_token,
            %error,
            "the lease was lost before its release"
        ),
        Err(error) => tracing::warn!(
            name = %held.lease.name,
            fencing_token = held.lease.fencing_token,
            %error,
            "release failed; the lease will expire on its own"
        ),
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.held.let_go();
        if self.released {
            return;
        }
        self.keeper.remove(self.key);
        let held = self.held.clone();
        let slot = self.slot.take();
        let succession = self.succession.take();
        let shared = self.shared.take();
        let min_hold = self.min_hold;
        match crate::sync::Runtime::current() {
            Some(runtime) => {
                runtime.spawn(async move {
                    let _ = release_lease(held, slot, succession, shared, min_hold).await;
                });
            }
            None => {
                // Nothing can be sent. Dropping the lease drops its grant
                // state, which is how a backend whose grants live in that
                // state (an open file) lets go; others' leases expire.
                held.end(LossReason::Released);
            }
        }
    }
}

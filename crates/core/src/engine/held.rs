//! A lease held by this process, shared by its guard and the keeper.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Mutex;

use crate::backend::{Backend, Lease, LossReporter};
use crate::engine::bounded;
use crate::error::{Error, Result};
use crate::lost::{Loss, LossReason, LostSignal};
use crate::risk::{RiskReason, RiskSignal};

/// A lease and what belongs to it for as long as it is held.
#[derive(Debug)]
pub(crate) struct HeldLease {
    pub(crate) lease: Lease,
    pub(crate) backend: Arc<dyn Backend>,
    /// Serialises extension and release of this lease, so a release never
    /// races an extension (a compare-and-swap backend would then refuse the
    /// release and leave the key until it expires).
    pub(crate) ops: Mutex<()>,
    loss: Arc<Loss>,
    /// When the grant began, for the hold time in metrics.
    granted_at: std::time::Instant,
    /// Whether metrics carry the lock's name.
    pub(crate) metrics_by_name: bool,
    /// Until when the lease is surely ours, as the keeper last confirmed
    /// it; kept after the lease ends, for the guard's `valid_until`.
    deadline: crate::sync::Mutex<Option<std::time::Instant>>,
    /// Whether the end of the hold was counted in metrics: once, at the
    /// first of its end and its drop.
    end_metered: AtomicBool,
    /// Whether its guard is gone (released or dropped): the lease may
    /// live on a little in the release under way, but nobody acts on it.
    let_go: AtomicBool,
}

impl HeldLease {
    /// The lease `lease`, whose loss `reporter` (the one its request
    /// carried) reports.
    pub(crate) fn new(
        lease: Lease,
        backend: Arc<dyn Backend>,
        reporter: LossReporter,
        metrics_by_name: bool,
    ) -> Self {
        let named = metrics_by_name.then_some(&lease.name);
        crate::metrics::hold_began(backend.store_name(), lease.claim.kind(), named);
        Self {
            lease,
            backend,
            ops: Mutex::new(()),
            loss: reporter.into_loss(),
            granted_at: std::time::Instant::now(),
            metrics_by_name,
            deadline: crate::sync::Mutex::new(None),
            end_metered: AtomicBool::new(false),
            let_go: AtomicBool::new(false),
        }
    }

    /// Counts the end of this hold in metrics, once, with the reason it
    /// ended for: a loss the backend reported by itself is counted at the
    /// guard's next release or drop.
    fn meter_end(&self) {
        let Some(reason) = self.loss() else {
            return;
        };
        if !self.end_metered.swap(true, Ordering::Relaxed) {
            crate::metrics::hold_ended(
                self.backend.store_name(),
                self.lease.claim.kind(),
                self.metrics_by_name.then_some(&self.lease.name),
                reason,
                self.granted_at.elapsed(),
            );
        }
    }

    /// Records the end of the lease; the first reason wins. Returns whether
    /// this call ended it.
    pub(crate) fn end(&self, reason: LossReason) -> bool {
        let ended = self.loss.end(reason);
        if ended && reason != LossReason::Released {
            tracing::warn!(
                name = %self.lease.name,
                fencing_token = self.lease.fencing_token,
                %reason,
                "lock lost"
            );
        }
        self.meter_end();
        ended
    }

    pub(crate) fn loss(&self) -> Option<LossReason> {
        self.loss.reason.get().copied()
    }

    /// Notes that the guard is gone.
    pub(crate) fn let_go(&self) {
        self.let_go.store(true, Ordering::Release);
    }

    /// Whether the guard is gone.
    pub(crate) fn is_let_go(&self) -> bool {
        self.let_go.load(Ordering::Acquire)
    }

    /// When the lease was lost, if it was (a release sets none).
    pub(crate) fn ended_at(&self) -> Option<std::time::Instant> {
        self.loss.ended_at.get().copied()
    }

    /// When the grant was made, on this machine's monotonic clock.
    pub(crate) fn granted_at(&self) -> std::time::Instant {
        self.granted_at
    }

    /// Records until when the lease is surely ours: the keeper calls it
    /// whenever that moves.
    pub(crate) fn set_deadline(&self, until: Option<std::time::Instant>) {
        *self
            .deadline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = until;
    }

    /// Until when the lease is surely ours, as last recorded.
    pub(crate) fn deadline(&self) -> Option<std::time::Instant> {
        *self
            .deadline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The error for a call on this lease once it is lost.
    pub(crate) fn lost_error(&self) -> Error {
        Error::Lost {
            name: self.lease.name.to_string(),
        }
    }

    /// The backend's release of this lease, bounded by the operation
    /// timeout.
    pub(crate) async fn release_on_backend(&self) -> Result<bool> {
        bounded::call(
            &*self.backend,
            self.lease.operation_timeout,
            "release",
            self.backend.release(&self.lease),
        )
        .await
    }

    /// A signal that resolves when this lease ends.
    pub(crate) fn lost_signal(&self) -> LostSignal {
        LostSignal::new(self.loss.clone())
    }

    /// A signal of this lease in danger.
    pub(crate) fn risk_signal(&self) -> RiskSignal {
        RiskSignal::new(self.loss.clone())
    }

    /// How endangered the lease is now; `None` while safe.
    pub(crate) fn risk(&self) -> Option<RiskReason> {
        crate::risk::risk_of(&self.loss)
    }

    /// Marks the lease in danger, for `reason`, and counts it in metrics
    /// when the danger rose. Called by the keeper only.
    pub(crate) fn endanger(&self, reason: RiskReason) {
        let Some(level) = reason.level() else {
            return;
        };
        if self.loss().is_some() || !self.loss.danger.raise(level) {
            return;
        }
        if reason == RiskReason::LittleLeft {
            tracing::warn!(
                name = %self.lease.name,
                fencing_token = self.lease.fencing_token,
                "lock at risk: little of its lease is left unconfirmed"
            );
        }
        crate::metrics::at_risk(
            self.backend.store_name(),
            self.lease.claim.kind(),
            self.metrics_by_name.then_some(&self.lease.name),
            reason,
        );
    }

    /// Clears the danger: the server confirmed the lease again.
    pub(crate) fn reassure(&self) {
        self.loss.danger.clear();
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        // Nobody can end the lease any more, so it is over for whoever
        // still watches it.
        self.loss.end(LossReason::Released);
        self.meter_end();
    }
}

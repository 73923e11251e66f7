//! A lease held by this process, shared by its guard and the keeper.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::{Mutex, Notify};

use crate::backend::{Backend, Lease};

/// Why a lease stopped being ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The backend refused an extension: the lease expired on the server or
    /// was taken away (by a forced release, a deletion, or another holder),
    /// so it may already be someone else's.
    Refused,
    /// No extension succeeded for the lease period minus the safety margin,
    /// measured on the local monotonic clock: the lease is given up before
    /// the server could let anyone else have it, as long as the server's
    /// clock runs at the local clock's rate within the margin and does not
    /// step forward (see [`LockGuard::lost`](crate::LockGuard::lost)).
    Expired,
    /// The backend saw the grant end by itself: its key was deleted, or
    /// the connection it lived on dropped.
    Detected,
    /// The guard released the lock.
    Released,
    /// The task that extends the client's leases stopped, because the Tokio
    /// runtime it ran on shut down, so nothing extends this lease any more.
    /// A client shared between runtimes starts a new task on its next
    /// grant; locks held across a runtime's shutdown should be taken again.
    KeeperStopped,
    /// The lock was held for the longest hold asked for
    /// ([`AcquireOptions::max_hold`](crate::AcquireOptions::max_hold)): the
    /// extension stopped and the lease was released.
    HoldLimit,
    /// The server's clock was seen to step forward (its readings in two
    /// extensions were further apart than the time that passed here), so
    /// the lease ran out on the server sooner than its extension said:
    /// early enough that it may already be someone else's, or too early to
    /// be extended in time. Only backends that read the server's clock in
    /// their extensions see it (see
    /// [`Backend::extend_many_timed`](crate::Backend::extend_many_timed)),
    /// and only a step between two of the client's readings: a step before
    /// its first reading has nothing to be compared with, and a lease it
    /// cut short is lost only when its own extension is refused
    /// ([`Refused`](Self::Refused)).
    ServerClockStepped,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Refused => "the backend refused to extend the lease",
            Self::Expired => "no extension succeeded before the lease ran out",
            Self::Detected => "the backend saw the grant end",
            Self::Released => "the lock was released",
            Self::KeeperStopped => {
                "the runtime that extended the lease shut down, so nothing extends it any more"
            }
            Self::HoldLimit => "it was held for its longest hold (max_hold), and given up",
            Self::ServerClockStepped => {
                "the server's clock stepped forward, so the lease ran out early on the server"
            }
        })
    }
}

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
}

/// Why the lease ended, once it has, and the tasks waiting to hear it.
///
/// Every release ends a lease, so this is on the hot path: one atomic
/// write and one wake of the waiters, if any.
#[derive(Debug, Default)]
struct Loss {
    reason: OnceLock<LossReason>,
    ended: Notify,
}

impl Loss {
    fn end(&self, reason: LossReason) -> bool {
        let ended = self.reason.set(reason).is_ok();
        if ended {
            self.ended.notify_waiters();
        }
        ended
    }
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
            loss: reporter.loss,
            granted_at: std::time::Instant::now(),
            metrics_by_name,
            deadline: crate::sync::Mutex::new(None),
            end_metered: AtomicBool::new(false),
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
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        // Nobody can end the lease any more, so it is over for whoever
        // still watches it.
        self.loss.end(LossReason::Released);
        self.meter_end();
    }
}

/// How a backend reports that a grant ended by itself, before core would
/// find out at the next extension: see
/// [`AcquireRequest::loss`](crate::AcquireRequest::loss). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct LossReporter {
    loss: Arc<Loss>,
}

impl LossReporter {
    /// A reporter for a grant not yet made.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports that the grant ended: its guard's
    /// [`lost`](crate::LockGuard::lost) resolves with
    /// [`LossReason::Detected`]. Reporting after the guard was released,
    /// or twice, does nothing.
    pub fn report(&self) {
        if self.loss.end(LossReason::Detected) {
            tracing::warn!("lock lost: the backend saw the grant end");
        }
    }

    /// Whether the grant this reporter belongs to has ended, for any
    /// reason.
    pub fn is_ended(&self) -> bool {
        self.loss.reason.get().is_some()
    }
}

/// A signal that resolves when a lease is no longer ours. Cloneable and
/// `'static`, so it can move into the task doing the protected work.
#[derive(Debug, Clone)]
pub struct LostSignal {
    loss: Arc<Loss>,
}

impl LostSignal {
    pub(crate) fn new(held: &HeldLease) -> Self {
        Self {
            loss: held.loss.clone(),
        }
    }

    /// Resolves with the reason once the lease has ended.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        let ended = self.loss.ended.notified();
        tokio::pin!(ended);
        // Registered before the check, so an end between the two still
        // wakes this task.
        ended.as_mut().enable();
        // The model checker may end the lease here, to check just that.
        crate::sync::switch_point();
        if let Some(&reason) = self.loss.reason.get() {
            return reason;
        }
        ended.await;
        self.loss
            .reason
            .get()
            .copied()
            .unwrap_or(LossReason::Released)
    }

    /// Whether the lease has ended, without waiting.
    pub fn is_lost(&self) -> bool {
        self.loss.reason.get().is_some()
    }
}

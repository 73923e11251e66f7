//! How a holder hears that its lease ended, and why.

use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use crate::danger::Danger;

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
    /// [`Backend::extend_many`](crate::backend::Backend::extend_many)),
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

/// Why the lease ended, once it has, and the tasks waiting to hear it;
/// and, until then, how endangered it is.
///
/// Every release ends a lease, so this is on the hot path: one atomic
/// write and two wakes of the waiters, if any.
#[derive(Debug, Default)]
pub(crate) struct Loss {
    pub(crate) reason: OnceLock<LossReason>,
    pub(crate) ended: Notify,
    pub(crate) danger: Danger,
    /// When the lease was lost, for a leader's health check; not set by a
    /// release, which every hold ends with, so that a release reads no
    /// clock.
    pub(crate) ended_at: OnceLock<std::time::Instant>,
}

impl Loss {
    pub(crate) fn end(&self, reason: LossReason) -> bool {
        let ended = self.reason.set(reason).is_ok();
        if ended {
            if reason != LossReason::Released {
                // Tokio's clock, as the keeper's deadlines are on.
                let _ = self.ended_at.set(tokio::time::Instant::now().into_std());
            }
            self.ended.notify_waiters();
            // A loss is the last danger: whoever waits for one hears it.
            self.danger.changed.notify_waiters();
        }
        ended
    }
}

/// A signal that resolves when a lease is no longer ours. Cloneable and
/// `'static`, so it can move into the task doing the protected work.
#[derive(Debug, Clone)]
pub struct LostSignal {
    loss: Arc<Loss>,
}

impl LostSignal {
    pub(crate) fn new(loss: Arc<Loss>) -> Self {
        Self { loss }
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

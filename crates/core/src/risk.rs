//! A warning before a loss: a lease whose extension failed, or that has
//! little time left unconfirmed, is at risk until an extension confirms
//! it again, or it is lost.

use std::sync::Arc;

use tokio::sync::Notify;

use crate::lost::{Loss, LossReason};
use crate::sync::atomic::{AtomicU8, Ordering};

/// Why a lease is in danger; see [`LockGuard::at_risk`](crate::LockGuard::at_risk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RiskReason {
    /// The last extension failed: the backend answered an error, or
    /// nothing within the operation timeout. The keeper retries while the
    /// lease lasts.
    ExtensionFailed,
    /// Less of the lease is left unconfirmed than
    /// [`LockOptions::at_risk_below`](crate::LockOptions::at_risk_below):
    /// its extension has not been answered in time. Past
    /// [`valid_until`](crate::LockGuard::valid_until) the lease is lost.
    LittleLeft,
    /// The lease is lost, for this reason: no warning came first when the
    /// loss was sudden (a forced release, a refused extension).
    Lost(LossReason),
}

impl std::fmt::Display for RiskReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ExtensionFailed => f.write_str("the last extension of the lease failed"),
            Self::LittleLeft => f.write_str("little of the lease is left unconfirmed"),
            Self::Lost(reason) => write!(f, "the lease is lost: {reason}"),
        }
    }
}

/// How endangered a lease is now, short of its loss: each level outranks
/// the one before, and a lease only rises until an extension confirms it.
const SAFE: u8 = 0;
const EXTENSION_FAILED: u8 = 1;
const LITTLE_LEFT: u8 = 2;

/// A lease's danger, set by the keeper (under its schedule's lock, so
/// writes never race) and read by whoever watches the lease.
#[derive(Debug, Default)]
pub(crate) struct Danger {
    level: AtomicU8,
    /// Woken on every change of the level, and at the loss.
    pub(crate) changed: Notify,
}

impl Danger {
    /// Raises the danger to `reason`, unless it already stands as high.
    /// Returns whether it rose.
    pub(crate) fn raise(&self, reason: RiskReason) -> bool {
        let level = match reason {
            RiskReason::ExtensionFailed => EXTENSION_FAILED,
            RiskReason::LittleLeft => LITTLE_LEFT,
            // A loss is recorded by `Loss::end`, which wakes the watchers.
            RiskReason::Lost(_) => return false,
        };
        if self.level.load(Ordering::Acquire) >= level {
            return false;
        }
        self.level.store(level, Ordering::Release);
        self.changed.notify_waiters();
        true
    }

    /// Clears the danger: an extension confirmed the lease.
    pub(crate) fn clear(&self) {
        if self.level.swap(SAFE, Ordering::AcqRel) != SAFE {
            self.changed.notify_waiters();
        }
    }

    fn reason(&self) -> Option<RiskReason> {
        match self.level.load(Ordering::Acquire) {
            EXTENSION_FAILED => Some(RiskReason::ExtensionFailed),
            LITTLE_LEFT => Some(RiskReason::LittleLeft),
            _ => None,
        }
    }
}

/// A signal of a lease in danger. Cloneable and `'static`, so it can move
/// into the task doing the protected work, as a
/// [`LostSignal`](crate::LostSignal) can.
#[derive(Debug, Clone)]
pub struct RiskSignal {
    loss: Arc<Loss>,
}

impl RiskSignal {
    pub(crate) fn new(loss: Arc<Loss>) -> Self {
        Self { loss }
    }

    /// Whether the lease is in danger now, and why; `None` while it is
    /// safe. A lost lease answers [`RiskReason::Lost`] from then on.
    pub fn risk(&self) -> Option<RiskReason> {
        match self.loss.reason.get() {
            Some(&reason) => Some(RiskReason::Lost(reason)),
            None => self.loss.danger.reason(),
        }
    }

    /// Resolves, with the reason, once the lease is in danger or lost; at
    /// once if it already is.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn at_risk(&self) -> RiskReason {
        let risk = self.wait_for(|risk| risk.is_some()).await;
        risk.expect("waited for a risk")
    }

    /// Resolves once an extension confirmed the lease again (at once if
    /// it is not in danger), or with the reason it was lost instead.
    ///
    /// # Errors
    /// The [`LossReason`] of a lease lost before it was confirmed again.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn safe_again(&self) -> Result<(), LossReason> {
        let risk = self
            .wait_for(|risk| matches!(risk, None | Some(RiskReason::Lost(_))))
            .await;
        match risk {
            Some(RiskReason::Lost(reason)) => Err(reason),
            _ => Ok(()),
        }
    }

    /// Waits until the danger is one that `wanted` accepts, and returns it.
    async fn wait_for(&self, wanted: impl Fn(Option<RiskReason>) -> bool) -> Option<RiskReason> {
        loop {
            let changed = self.loss.danger.changed.notified();
            tokio::pin!(changed);
            // Registered before the read, so a change in between still
            // wakes this task.
            changed.as_mut().enable();
            // The model checker may change the danger here, to check just
            // that.
            crate::sync::switch_point();
            let now = self.risk();
            if wanted(now) {
                return now;
            }
            changed.await;
        }
    }
}

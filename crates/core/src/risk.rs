//! A warning before a loss: a lease whose extension failed, or that has
//! little time left unconfirmed, is at risk until an extension confirms
//! it again, or it is lost.

use std::sync::Arc;

use crate::danger::Level;
use crate::lost::{Loss, LossReason};

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

impl RiskReason {
    /// The danger this reason stands for; `None` for a loss, which is
    /// recorded as such.
    pub(crate) fn level(self) -> Option<Level> {
        match self {
            Self::ExtensionFailed => Some(Level::ExtensionFailed),
            Self::LittleLeft => Some(Level::LittleLeft),
            Self::Lost(_) => None,
        }
    }
}

impl From<Level> for RiskReason {
    fn from(level: Level) -> Self {
        match level {
            Level::ExtensionFailed => Self::ExtensionFailed,
            Level::LittleLeft => Self::LittleLeft,
        }
    }
}

/// How endangered the lease `loss` watches is now; `None` while safe.
pub(crate) fn risk_of(loss: &Loss) -> Option<RiskReason> {
    match loss.reason.get() {
        Some(&reason) => Some(RiskReason::Lost(reason)),
        None => loss.danger.level().map(RiskReason::from),
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
        risk_of(&self.loss)
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

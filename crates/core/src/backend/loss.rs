//! How a backend reports that a grant ended by itself.

use std::sync::Arc;

use crate::lost::{Loss, LossReason};

/// How a backend reports that a grant ended by itself, before core would
/// find out at the next extension: see
/// [`AcquireRequest::loss`](crate::backend::AcquireRequest::loss). Cheap to clone.
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

    /// The end this reporter reports, which the grant's holder watches.
    pub(crate) fn into_loss(self) -> Arc<Loss> {
        self.loss
    }
}

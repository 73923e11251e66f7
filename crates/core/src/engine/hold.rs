//! Bounds on a hold, checked when a call asks for them, and the longest
//! hold ([`AcquireOptions::max_hold`](crate::AcquireOptions::max_hold)):
//! once it has passed since the grant, the lease stops being extended, is
//! released, and its loss is reported, whatever the holder is doing. The
//! shortest hold is kept at the release, in [`crate::engine::min_hold`].

use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend;
use crate::claim::Claim;
use crate::engine::held::HeldLease;
use crate::engine::keeper::Keeper;
use crate::error::{Error, Result};
use crate::lost::LossReason;

/// The longest and the shortest hold one call asked for.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HoldBounds {
    pub(crate) max: Option<Duration>,
    pub(crate) min: Option<Duration>,
}

impl HoldBounds {
    /// Refuses bounds that cannot be kept, before anything is asked of the
    /// backend: a zero bound, a shortest hold above the longest, one on a
    /// claim other than the whole lock, or one that `backend` cannot keep.
    pub(crate) fn check(&self, claim: Claim, backend: &dyn Backend) -> Result<()> {
        if self.max.is_some_and(|max| max.is_zero()) {
            return Err(Error::config(
                "max_hold",
                "must be above zero: it is how long a grant may be held",
            ));
        }
        let Some(min) = self.min else {
            return Ok(());
        };
        if min.is_zero() {
            return Err(Error::config(
                "min_hold",
                "must be above zero: it is how long a lock stays held after its grant; \
                 leave it unset for a release that frees the lock at once",
            ));
        }
        if let Some(max) = self.max
            && min > max
        {
            return Err(Error::config(
                "min_hold",
                format!(
                    "{min:?} is longer than max_hold ({max:?}), which ends the hold first; \
                     make min_hold at most max_hold"
                ),
            ));
        }
        if claim != Claim::Exclusive {
            return Err(Error::config(
                "min_hold",
                format!(
                    "applies to the whole lock only, not to {claim}; \
                     drop min_hold or take the lock exclusively"
                ),
            ));
        }
        crate::engine::min_hold::check_release_later(backend)
    }
}

/// Ends `held` (kept by `keeper` under `key`) `max_hold` after its grant,
/// unless it ended first. The task holds only a weak reference, so a guard
/// released or dropped before then is not kept alive by it.
pub(crate) fn limit(held: &Arc<HeldLease>, keeper: Keeper, key: u64, max_hold: Duration) {
    let deadline = tokio::time::Instant::from_std(held.granted_at() + max_hold);
    let ended = held.lost_signal();
    let held = Arc::downgrade(held);
    crate::sync::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {}
            _ = ended.lost() => return,
        }
        let Some(held) = held.upgrade() else {
            return;
        };
        // After an extension or a release in flight, never beside one.
        let _ops = held.ops.lock().await;
        if held.loss().is_some() {
            return;
        }
        keeper.remove(key);
        held.end(LossReason::HoldLimit);
        // The holder may be stuck, which is what the bound is for: release
        // for it, so that others need not wait for the lease to run out.
        if let Err(error) = held.release_on_backend().await {
            tracing::warn!(
                name = %held.lease.name,
                %error,
                "could not release a lock held for its longest hold; it ends when its lease runs out"
            );
        }
    });
}

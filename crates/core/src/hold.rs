//! The longest hold ([`AcquireOptions::max_hold`](crate::AcquireOptions::max_hold)):
//! once it has passed since the grant, the lease stops being extended, is
//! released, and its loss is reported, whatever the holder is doing.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::guard::backend_release;
use crate::keeper::Keeper;
use crate::lease::{HeldLease, LossReason, LostSignal};

/// Refuses a longest hold of zero, which would end every grant at once.
pub(crate) fn check(max_hold: Option<Duration>) -> Result<()> {
    match max_hold {
        Some(max_hold) if max_hold.is_zero() => Err(Error::config(
            "max_hold",
            "must be above zero: it is how long a grant may be held",
        )),
        _ => Ok(()),
    }
}

/// Ends `held` (kept by `keeper` under `key`) `max_hold` after its grant,
/// unless it ended first. The task holds only a weak reference, so a guard
/// released or dropped before then is not kept alive by it.
pub(crate) fn limit(held: &Arc<HeldLease>, keeper: Keeper, key: u64, max_hold: Duration) {
    let deadline = tokio::time::Instant::from_std(held.granted_at() + max_hold);
    let ended = LostSignal::new(held);
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
        if let Err(error) = backend_release(&held).await {
            tracing::warn!(
                name = %held.lease.name,
                %error,
                "could not release a lock held for its longest hold; it ends when its lease runs out"
            );
        }
    });
}

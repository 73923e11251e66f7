//! The shortest hold ([`AcquireOptions::min_hold`](crate::AcquireOptions::min_hold)):
//! a release before it has passed asks the backend to give the lock up once
//! it has, by the server's clock, instead of now.

use std::time::Duration;

use crate::engine::bounded;
use crate::engine::held::HeldLease;
use crate::error::Result;

/// What is left of `min_hold` for `held`, counted from when its grant's
/// reply arrived (after the server granted it, so the lock is kept at
/// least `min_hold` by the server's clock); `None` once it has passed.
pub(crate) fn time_left(held: &HeldLease, min_hold: Option<Duration>) -> Option<Duration> {
    let left = min_hold?.checked_sub(held.granted_at().elapsed())?;
    // Backends count in whole milliseconds at best: round up, never down.
    let left = Duration::from_millis(u64::try_from(left.as_nanos().div_ceil(1_000_000)).ok()?);
    (!left.is_zero()).then_some(left)
}

/// Asks the backend to give `held` up `left` from now, within the
/// operation timeout. The timer is always set: a backend's
/// [`bounds_calls`](crate::backend::Capabilities::bounds_calls) promise does not
/// cover this call.
pub(crate) async fn release_after(held: &HeldLease, left: Duration) -> Result<bool> {
    const OPERATION: &str = "delayed release";
    let outcome = bounded::within(false, held.lease.operation_timeout, OPERATION, async {
        held.backend
            .delayed_release()?
            .release_after(&held.lease, left)
            .await
    })
    .await;
    if let Err(error) = &outcome {
        crate::metrics::backend_error(held.backend.store_name(), OPERATION, error);
    }
    outcome
}

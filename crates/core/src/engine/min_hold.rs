//! The shortest hold ([`AcquireOptions::min_hold`](crate::AcquireOptions::min_hold)):
//! a release before it has passed asks the backend to give the lock up once
//! it has, by the server's clock, instead of now.

use std::time::Duration;

use crate::backend::{Backend, BackendExt, Lease, ReleaseLater};
use crate::engine::bounded;
use crate::engine::held::HeldLease;
use crate::error::{Error, Result};

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
        release_later(&*held.backend, &held.lease, left).await
    })
    .await;
    if let Err(error) = &outcome {
        crate::metrics::backend_error(held.backend.store_name(), OPERATION, error);
    }
    outcome
}

/// Checks that `backend` can give a lock up later, saying why not when it
/// cannot: a release by extension is refused for locks that are
/// process-bound or hang on a session, which an extension does not end.
///
/// # Errors
/// [`Error::Unsupported`], saying why.
pub(crate) fn check_release_later<B: Backend + ?Sized>(backend: &B) -> Result<()> {
    match backend.abilities().delayed_release {
        ReleaseLater::By(_) => Ok(()),
        ReleaseLater::Never(why) => Err(Error::Unsupported(why.into())),
        ReleaseLater::ByExtension => {
            let abilities = backend.abilities();
            if backend.capabilities().process_bound || abilities.session.is_some() {
                Err(Error::Unsupported(format!(
                    "the {} backend cannot keep a lock held after its release (min_hold)",
                    backend.store_name()
                )))
            } else {
                Ok(())
            }
        }
    }
}

/// Gives `lease` up `left` from now, the backend's way: by its own call, or
/// by an extension to the time left, which the server then ends.
///
/// # Errors
/// [`Error::Unsupported`] when the backend cannot; a backend error, after
/// which the outcome is unknown.
pub(crate) async fn release_later(
    backend: &dyn Backend,
    lease: &Lease,
    left: Duration,
) -> Result<bool> {
    check_release_later(backend)?;
    match backend.abilities().delayed_release {
        ReleaseLater::By(delayed) => delayed.release_after(lease, left).await,
        _ => {
            let shortened = Lease {
                lease: left,
                ..lease.clone()
            };
            backend.extend(&shortened).await
        }
    }
}

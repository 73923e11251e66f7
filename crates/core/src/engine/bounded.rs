//! Where backend calls are bounded: every call core makes to a backend is
//! bounded here by the operation timeout, with a timer only where the
//! backend does not bound the call itself, and always for an
//! administrative call. (A wait's attempt is cut shorter still at its
//! deadline, in `attempt.rs`, and goes on in the background.)

use std::future::Future;
use std::time::Duration;

use crate::backend::Backend;
use crate::error::{Error, Result};

/// Runs `call`, `backend`'s `operation`, for at most `limit`; see
/// [`within`].
///
/// # Errors
/// The call's error, or [`Error::OperationTimeout`](crate::Error::OperationTimeout)
/// naming `operation`.
pub(crate) async fn call<T>(
    backend: &dyn Backend,
    limit: Duration,
    operation: &'static str,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    let outcome = within(backend.capabilities().bounds_calls, limit, operation, call).await;
    counted(backend, operation, outcome)
}

/// Runs `call`, `backend`'s administrative `operation` (a listing, a
/// forced release, a read of terms or of the server's information), for
/// at most `limit`, under a timer even when the backend bounds its calls
/// itself: [`Capabilities::bounds_calls`](crate::backend::Capabilities::bounds_calls)
/// promises it for the calls on locks, and these calls are rare enough
/// that a timer costs nothing.
///
/// # Errors
/// As [`call`].
pub(crate) async fn admin_call<T>(
    backend: &dyn Backend,
    limit: Duration,
    operation: &'static str,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    counted(
        backend,
        operation,
        within(false, limit, operation, call).await,
    )
}

/// `outcome`, counted in the backend's error metrics when it failed.
fn counted<T>(backend: &dyn Backend, operation: &'static str, outcome: Result<T>) -> Result<T> {
    if let Err(error) = &outcome {
        crate::metrics::backend_error(backend.store_name(), operation, error);
    }
    outcome
}

/// Runs `call`, the keeper's `operation`, for at most `limit`, under a timer
/// even when the backend bounds its calls itself: a batch of extensions may
/// be several calls inside the backend, and the keeper gives the whole
/// batch one operation timeout.
///
/// # Errors
/// As [`call`].
pub(crate) async fn keeper_call<T>(
    limit: Duration,
    operation: &'static str,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    within(false, limit, operation, call).await
}

/// Runs `call`, a backend's `operation`, for at most `limit`. No timer is
/// set when the backend bounds the call itself
/// ([`Capabilities::bounds_calls`](crate::backend::Capabilities::bounds_calls)), as
/// it then ends within the same operation timeout that `limit` is.
///
/// # Errors
/// The call's error, or a timeout naming `operation`.
pub(crate) async fn within<T>(
    self_bounded: bool,
    limit: Duration,
    operation: &'static str,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    if self_bounded {
        return call.await;
    }
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or_else(|_| Err(Error::operation_timeout(operation, limit)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    const LIMIT: Duration = Duration::from_millis(50);

    fn timed_out_naming(outcome: Result<()>, operation: &str) -> bool {
        matches!(outcome, Err(Error::OperationTimeout { operation: named, after })
            if named == operation && after == LIMIT)
    }

    #[tokio::test(start_paused = true)]
    async fn an_unbounded_call_is_timed_out() {
        let outcome = within(false, LIMIT, "release", std::future::pending()).await;
        assert!(timed_out_naming(outcome, "release"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_self_bounded_call_is_left_to_the_backend() {
        // The call outlives the limit: only the backend's bound ends it.
        let call = async {
            tokio::time::sleep(LIMIT * 3).await;
            Ok(7)
        };
        assert_eq!(within(true, LIMIT, "hand-over", call).await.unwrap(), 7);
    }
}

//! The mark a connection carries once it took the
//! [`Fault::ResetAfterRequest`] shot, which both of its pipes read.
//!
//! [`Fault::ResetAfterRequest`]: crate::Fault::ResetAfterRequest

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::sleep;

/// How long a connection doomed by [`Fault::ResetAfterRequest`] waits for
/// the server to start replying before it is reset anyway. Waiting for the
/// reply makes sure the server has read and handled the request.
///
/// [`Fault::ResetAfterRequest`]: crate::Fault::ResetAfterRequest
const RESET_GRACE: Duration = Duration::from_secs(1);

/// Per-connection state the two pipes share.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// Set once the connection took the `ResetAfterRequest` shot.
    doomed: watch::Sender<bool>,
}

impl ConnState {
    pub(crate) fn new() -> Self {
        Self {
            doomed: watch::Sender::new(false),
        }
    }

    /// Marks the connection for a reset once the server has the request.
    pub(crate) fn doom(&self) {
        self.doomed.send_replace(true);
    }

    pub(crate) fn is_doomed(&self) -> bool {
        *self.doomed.borrow()
    }

    /// Completes [`RESET_GRACE`] after the connection was doomed.
    pub(crate) async fn grace_over(&self) {
        let mut doomed = self.doomed.subscribe();
        // Cannot fail: `self` holds the sender.
        let _ = doomed.wait_for(|doomed| *doomed).await;
        sleep(RESET_GRACE).await;
    }
}

//! State shared by the controlling handle and every connection task.

use tokio::sync::watch;

use crate::Fault;
use crate::stats::Counters;

/// What the [`FaultProxy`](crate::FaultProxy) handle changes and the
/// connection tasks watch.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The fault in force; pipes subscribe so they react mid-connection.
    pub(crate) fault: watch::Sender<Fault>,
    /// Bumped by `reset_all`; each connection resets when it changes.
    pub(crate) resets: watch::Sender<u64>,
    pub(crate) counters: Counters,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            fault: watch::Sender::new(Fault::None),
            resets: watch::Sender::new(0),
            counters: Counters::default(),
        }
    }

    /// The fault in force right now.
    pub(crate) fn fault(&self) -> Fault {
        *self.fault.borrow()
    }

    /// Takes the one-shot [`Fault::ResetAfterRequest`] (or
    /// [`Fault::ResetAfterRequestStarting`]) if it is set and `bytes` take
    /// it, so that exactly one connection, the first to send such bytes,
    /// gets it.
    pub(crate) fn take_reset_after_request(&self, bytes: &[u8]) -> bool {
        self.fault.send_if_modified(|fault| {
            let armed = fault.shot_taken_by(bytes);
            if armed {
                *fault = Fault::None;
            }
            armed
        })
    }
}

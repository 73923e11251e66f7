//! Where the listening connection stands, as the backend and its
//! listening task both see it.

use std::sync::Arc;

use tokio::sync::watch;

use super::inbox::Gauges;
use super::index::Watched;

/// Whether releases wake this backend's waiters now. See
/// [`PostgresBackend::wake_ups`](crate::PostgresBackend::wake_ups).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WakeUps {
    /// The listening connection is being opened and checked; waits poll.
    Starting,
    /// Notifications were shown to arrive: a release wakes the waiters.
    Listening,
    /// The listening connection failed and is being opened again; waits
    /// poll meanwhile.
    Reconnecting,
    /// Notifications never arrived over the listening connection (it goes
    /// through PgBouncer in transaction mode, or `listen_url` names another
    /// server or database): waits poll, and the backend does not try again.
    Unavailable,
}

/// How the queue between a backend's listening connection and the task
/// that wakes its waiters has fared. See
/// [`PostgresBackend::wake_up_queue`](crate::PostgresBackend::wake_up_queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WakeUpQueue {
    /// The most names whose releases the queue keeps at once.
    pub limit: usize,
    /// The most it has kept at once so far, never above `limit`.
    pub most_queued: usize,
    /// How many times more names were announced than it keeps, and every
    /// waiter was woken to try again instead.
    pub overflows: u64,
}

/// What the backend and its listening task share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) watched: Watched,
    pub(super) state: watch::Sender<WakeUps>,
    pub(super) gauges: Arc<Gauges>,
}

impl Shared {
    pub(super) fn state(&self) -> WakeUps {
        *self.state.borrow()
    }

    /// Sets the state; a waiter woken after this reads the new one.
    pub(super) fn set(&self, state: WakeUps) {
        self.state.send_replace(state);
    }
}

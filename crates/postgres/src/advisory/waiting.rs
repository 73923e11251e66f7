//! What a waiting writer keeps between its attempts.

use std::time::Duration;

use tokio::time::Instant;

use super::session::Session;

/// A waiting writer's session, which holds the name's intent key shared
/// until the writer is granted or stops waiting.
pub(super) struct WaitingWriter {
    pub(super) session: Session,
    pub(super) objid: i32,
}

/// The time left until `deadline`.
pub(super) fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

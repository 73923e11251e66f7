//! The machine's wall clock, which every worker process on one machine
//! shares: the contended runs' windows and holds are read from it.

use std::time::Duration;

/// Nanoseconds since the Unix epoch.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Sleeps until the wall-clock instant `at_ns` (nanoseconds since the Unix
/// epoch); returns at once if it has passed.
pub(crate) async fn sleep_until_ns(at_ns: u64) {
    let now = now_ns();
    if at_ns > now {
        tokio::time::sleep(Duration::from_nanos(at_ns - now)).await;
    }
}

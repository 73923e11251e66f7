//! The one clock every process of a run shares: the machine's monotonic
//! clock, which `faketime` leaves alone when told to
//! (`FAKETIME_DONT_FAKE_MONOTONIC=1`).

use rustix::time::{ClockId, clock_gettime};

/// Nanoseconds on the machine's monotonic clock.
pub(crate) fn now_ns() -> u64 {
    let now = clock_gettime(ClockId::Monotonic);
    // The monotonic clock counts from boot: never negative, and far from
    // overflowing 64 bits.
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// `at`, a `std::time::Instant` of this process, on the shared clock.
/// Both read the monotonic clock, but `Instant` does not say its reading,
/// so the distance from now is carried over.
pub(crate) fn instant_ns(at: std::time::Instant) -> u64 {
    let (now, here) = (std::time::Instant::now(), now_ns());
    match at.checked_duration_since(now) {
        Some(ahead) => here.saturating_add(ahead.as_nanos() as u64),
        None => here.saturating_sub(now.duration_since(at).as_nanos() as u64),
    }
}

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

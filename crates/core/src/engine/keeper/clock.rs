//! Steps of the server's clock, seen in the readings extensions bring back.
//!
//! A server that judges leases by its wall clock ends them early when that
//! clock steps forward (NTP's `makestep`, a resumed VM, a manual `date`):
//! the holder's own deadline, kept on its monotonic clock, is then too
//! late. A backend that reads the server's clock with each extension (see
//! [`Backend::extend_many`](crate::backend::Backend::extend_many)) lets
//! the keeper see the step: between two readings, the server's clock may
//! advance at most as much as the time from the first request's sending to
//! the second answer's arrival. Whatever it advanced beyond that is a step
//! forward, of at least that much, which every lease confirmed before it
//! lost from its end on the server.
//!
//! Only a step between two readings shows. The first reading has nothing
//! to be compared with, so a step before it (before the client's first
//! batch of extensions was answered) is never seen, and the leases it
//! shortened learn of it only when their own extension is refused. A step
//! that does show may show as less than it was, by up to the two
//! readings' round trips, and one that leaves no more than `TOLERANCE`
//! does not show at all.
//!
//! A step back only makes leases last longer on the server, which the
//! holder cannot shorten; it is not tracked.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// Steps below this are taken for rounding in the server's answer, not for
/// a step of its clock. The safety margin covers clocks that merely run at
/// slightly different rates.
const TOLERANCE: Duration = Duration::from_millis(5);

/// One reading of the server's clock, taken between `sent_at` and
/// `received_at` on this process's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reading {
    pub(super) sent_at: Instant,
    pub(super) received_at: Instant,
    pub(super) server_time: SystemTime,
}

/// How many of the latest steps are remembered for leases that join late.
const STEPS_KEPT: usize = 8;

/// The last reading of a client's server clock, and the latest steps it
/// showed.
#[derive(Debug, Default)]
pub(super) struct ClockWatch {
    last: Option<Reading>,
    /// Each step, with when the request that revealed it was sent: a lease
    /// confirmed by a request sent before that may have been confirmed
    /// before the step, and lost it from its end.
    steps: VecDeque<(Instant, Duration)>,
}

impl ClockWatch {
    /// Records `reading`, and returns the least the server's clock must
    /// have stepped forward since the last one, when that is more than a
    /// rounding error.
    pub(super) fn observe(&mut self, reading: Reading) -> Option<Duration> {
        let previous = self.last.replace(reading)?;
        // Readings of batches sent at once may arrive out of order; a
        // reading older than the last one then shows no advance at all,
        // and the bound below holds whichever came first.
        let advanced = reading
            .server_time
            .duration_since(previous.server_time)
            .ok()?;
        let most_elapsed = reading
            .received_at
            .saturating_duration_since(previous.sent_at);
        let step = advanced.checked_sub(most_elapsed)?;
        if step <= TOLERANCE {
            return None;
        }
        if self.steps.len() == STEPS_KEPT {
            self.steps.pop_front();
        }
        self.steps.push_back((reading.sent_at, step));
        Some(step)
    }

    /// How much the server's clock stepped forward after a lease was
    /// confirmed by a request sent at `confirmed_at`, as far as the steps
    /// seen tell: for a lease that joins the keeper with an older
    /// confirmation (one handed over without a server command keeps its
    /// predecessor's), which the shortening at the step did not reach.
    pub(super) fn stepped_since(&self, confirmed_at: Instant) -> Duration {
        self.steps
            .iter()
            .filter(|(revealed_by, _)| confirmed_at < *revealed_by)
            .map(|(_, step)| *step)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading sent `sent_ms` after `base`, answered `took_ms` later,
    /// of a server clock at `server_ms`.
    fn reading(base: Instant, sent_ms: u64, took_ms: u64, server_ms: u64) -> Reading {
        Reading {
            sent_at: base + Duration::from_millis(sent_ms),
            received_at: base + Duration::from_millis(sent_ms + took_ms),
            server_time: SystemTime::UNIX_EPOCH + Duration::from_millis(server_ms),
        }
    }

    #[test]
    fn the_first_reading_shows_no_step() {
        let base = Instant::now();
        let mut watch = ClockWatch::default();
        assert_eq!(watch.observe(reading(base, 0, 2, 1_000_000)), None);
    }

    #[test]
    fn a_server_clock_that_keeps_time_shows_no_step() {
        let base = Instant::now();
        let mut watch = ClockWatch::default();
        watch.observe(reading(base, 0, 2, 1_000_000));
        // 10 s later here, and 10 s later there, whenever within the round
        // trips the server read its clock.
        assert_eq!(watch.observe(reading(base, 10_000, 2, 1_010_001)), None);
        assert_eq!(watch.observe(reading(base, 20_000, 50, 1_020_049)), None);
    }

    #[test]
    fn a_step_forward_is_bounded_from_below_by_the_round_trips() {
        let base = Instant::now();
        let mut watch = ClockWatch::default();
        watch.observe(reading(base, 0, 2, 1_000_000));
        // 10 s passed here, at most 10.002 s between the two readings;
        // the server's clock advanced 20 s.
        let step = watch.observe(reading(base, 10_000, 2, 1_020_000)).unwrap();
        assert_eq!(step, Duration::from_millis(9_998));
        // The step is seen once; from then on the clock keeps time.
        assert_eq!(watch.observe(reading(base, 20_000, 2, 1_030_000)), None);
    }

    #[test]
    fn a_lease_confirmed_before_a_step_was_revealed_loses_it_when_it_joins() {
        let base = Instant::now();
        let mut watch = ClockWatch::default();
        watch.observe(reading(base, 0, 2, 1_000_000));
        watch.observe(reading(base, 10_000, 2, 1_020_000));
        let step = Duration::from_millis(9_998);
        assert_eq!(
            watch.stepped_since(base + Duration::from_millis(5_000)),
            step
        );
        // Confirmed by a request sent with, or after, the one that showed
        // the step: the server confirmed it on its clock as it is now.
        assert_eq!(
            watch.stepped_since(base + Duration::from_millis(10_000)),
            Duration::ZERO
        );
        // A second step adds up for a lease older than both.
        watch.observe(reading(base, 20_000, 2, 1_040_000));
        assert_eq!(watch.stepped_since(base), step * 2);
        assert_eq!(
            watch.stepped_since(base + Duration::from_millis(15_000)),
            step
        );
    }

    #[test]
    fn a_step_back_and_a_reading_out_of_order_show_no_step() {
        let base = Instant::now();
        let mut watch = ClockWatch::default();
        watch.observe(reading(base, 0, 2, 1_000_000));
        assert_eq!(watch.observe(reading(base, 10_000, 2, 990_000)), None);
        let mut watch = ClockWatch::default();
        watch.observe(reading(base, 10, 2, 1_000_010));
        assert_eq!(watch.observe(reading(base, 0, 20, 1_000_001)), None);
    }
}

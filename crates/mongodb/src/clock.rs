//! An estimate of the server's clock, for the `retry_after` hint only.
//!
//! Expiry is always judged on the server by `$$NOW`; this estimate never
//! decides who holds a lock. It only tells a waiter how long the current
//! lease has left, without an extra command: each reading of the server's
//! time (the `hello` reply's `localTime`, the `acquiredAt` of our own grants)
//! is kept with the local monotonic instant it was taken at, and the server's
//! time now is that reading advanced by the monotonic time elapsed since.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a reading is preferred over a later, less precise one.
const FRESH_FOR: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub(crate) struct ServerClock {
    reading: Mutex<Option<Reading>>,
}

#[derive(Debug, Clone, Copy)]
struct Reading {
    /// The server's time, in milliseconds since the epoch, at `at`.
    server_ms: i64,
    /// The local instant of the reading: the middle of the round trip.
    at: Instant,
    /// Half the round trip: how far off the reading may be.
    uncertainty: Duration,
}

impl ServerClock {
    /// Records that the server's clock read `server_ms` at some moment
    /// between `sent` and `received`.
    pub(crate) fn observe(&self, server_ms: i64, sent: Instant, received: Instant) {
        let half = received.saturating_duration_since(sent) / 2;
        let reading = Reading {
            server_ms,
            at: sent + half,
            uncertainty: half,
        };
        let mut current = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        let replace = match *current {
            None => true,
            Some(old) => {
                reading.uncertainty <= old.uncertainty
                    || reading.at.saturating_duration_since(old.at) > FRESH_FOR
            }
        };
        if replace {
            *current = Some(reading);
        }
    }

    /// How long until the server's clock reaches `until_ms`, rounded up by
    /// the estimate's uncertainty; `None` before any reading.
    pub(crate) fn until(&self, until_ms: i64) -> Option<Duration> {
        let reading = (*self.reading.lock().unwrap_or_else(PoisonError::into_inner))?;
        let elapsed = i64::try_from(reading.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        let now_ms = reading.server_ms.saturating_add(elapsed);
        let left = u64::try_from(until_ms.saturating_sub(now_ms)).unwrap_or(0);
        Some(Duration::from_millis(left) + reading.uncertainty + Duration::from_millis(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_from_the_latest_precise_reading() {
        let clock = ServerClock::default();
        assert_eq!(clock.until(10), None);
        let now = Instant::now();
        clock.observe(1_000_000, now, now);
        let left = clock.until(1_005_000).unwrap();
        assert!(left <= Duration::from_millis(5001), "{left:?}");
        assert!(left >= Duration::from_millis(4000), "{left:?}");
        assert_eq!(clock.until(0).unwrap(), Duration::from_millis(1));
    }

    #[test]
    fn a_less_precise_reading_does_not_replace_a_fresh_one() {
        let clock = ServerClock::default();
        let now = Instant::now();
        clock.observe(1_000_000, now, now);
        clock.observe(9_000_000, now, now + Duration::from_secs(2));
        assert!(clock.until(1_005_000).unwrap() <= Duration::from_millis(5001));
    }
}

//! Bounded exponential backoff with full jitter.

use std::time::Duration;

use rand::Rng;

/// Waits between attempts on a held lock: the ceiling doubles from `min` up
/// to `max`, and each wait is drawn uniformly between `min` and the ceiling,
/// so that waiters in different processes spread out instead of retrying in
/// lockstep.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    ceiling: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            ceiling: min,
        }
    }

    /// The next wait.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = if self.ceiling > self.min {
            rand::rng().random_range(self.min..=self.ceiling)
        } else {
            self.min
        };
        self.ceiling = self
            .ceiling
            .checked_mul(2)
            .map_or(self.max, |doubled| doubled.min(self.max));
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_stay_in_range_and_the_ceiling_grows_to_max() {
        let min = Duration::from_millis(5);
        let max = Duration::from_millis(80);
        let mut backoff = Backoff::new(min, max);
        for _ in 0..100 {
            let wait = backoff.next_wait();
            assert!(wait >= min && wait <= max, "{wait:?}");
        }
        assert_eq!(backoff.ceiling, max);
    }

    #[test]
    fn an_unbounded_range_never_overflows() {
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::MAX);
        for _ in 0..200 {
            backoff.next_wait();
        }
        assert_eq!(backoff.ceiling, Duration::MAX);
        let mut huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.next_wait(), Duration::MAX);
        assert_eq!(huge.next_wait(), Duration::MAX);
    }
}

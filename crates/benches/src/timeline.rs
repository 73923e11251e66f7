//! Holds reported by contending workers, and what they add up to.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One time a worker held the lock, by the machine's wall clock (which all
/// workers on one machine share).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Hold {
    pub(crate) acquired_at_ns: u64,
    pub(crate) released_at_ns: u64,
    pub(crate) token: u64,
}

/// Contention results.
#[derive(Debug, Clone)]
pub(crate) struct Contention {
    pub(crate) acquisitions: usize,
    pub(crate) per_second: f64,
    pub(crate) hand_off_p50: Duration,
    pub(crate) hand_off_p99: Duration,
    /// Holds that began before the previous one ended: must be zero.
    pub(crate) overlaps: usize,
}

impl Contention {
    /// Sums up `holds` gathered over `elapsed`.
    pub(crate) fn from_holds(mut holds: Vec<Hold>, elapsed: Duration) -> Self {
        holds.sort_by_key(|hold| hold.acquired_at_ns);
        let mut gaps = Vec::with_capacity(holds.len());
        let mut overlaps = 0;
        for pair in holds.windows(2) {
            match pair[1].acquired_at_ns.checked_sub(pair[0].released_at_ns) {
                Some(gap) => gaps.push(Duration::from_nanos(gap)),
                None => overlaps += 1,
            }
        }
        gaps.sort_unstable();
        Self {
            acquisitions: holds.len(),
            per_second: holds.len() as f64 / elapsed.as_secs_f64(),
            hand_off_p50: percentile(&gaps, 50),
            hand_off_p99: percentile(&gaps, 99),
            overlaps,
        }
    }
}

/// The `p`th percentile of sorted `values` (nearest rank); zero when empty.
pub(crate) fn percentile(values: &[Duration], p: usize) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let rank = (values.len() * p).div_ceil(100).clamp(1, values.len());
    values[rank - 1]
}

/// Nanoseconds since the Unix epoch.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(from: u64, to: u64) -> Hold {
        Hold {
            acquired_at_ns: from,
            released_at_ns: to,
            token: from,
        }
    }

    #[test]
    fn gaps_and_overlaps() {
        let holds = vec![hold(0, 10), hold(15, 20), hold(18, 30), hold(40, 50)];
        let summary = Contention::from_holds(holds, Duration::from_secs(2));
        assert_eq!(summary.acquisitions, 4);
        assert_eq!(summary.overlaps, 1);
        assert_eq!(summary.hand_off_p50, Duration::from_nanos(5));
        assert_eq!(summary.hand_off_p99, Duration::from_nanos(10));
        assert_eq!(summary.per_second, 2.0);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<_> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&values, 50), Duration::from_millis(50));
        assert_eq!(percentile(&values, 99), Duration::from_millis(99));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }
}

//! What the holds reported by contending workers add up to: a
//! [`Contention`], summed up with [`Contention::from_holds`].

use std::time::Duration;

use crate::commands::Counts;
use crate::distribution::Distribution;
use crate::order;
use crate::worker::Tenure;

/// Contention results.
#[derive(Debug, Clone)]
pub(crate) struct Contention {
    pub(crate) acquisitions: usize,
    pub(crate) per_second: f64,
    /// How many hand-offs were measured.
    pub(crate) hand_offs: usize,
    /// Release to the next grant, whoever got it.
    pub(crate) hand_off_p50: Duration,
    pub(crate) hand_off_p99: Duration,
    /// The mean hand-off: for a lock whose waiters poll, hand-offs are
    /// bimodal (a waiter that happened to try right after the release, or
    /// one that slept its whole period), and the median hides the second
    /// mode.
    pub(crate) hand_off_mean: Duration,
    /// Release to the next grant, counting only grants to a task of another
    /// process.
    pub(crate) cross_process: usize,
    pub(crate) cross_p50: Duration,
    pub(crate) cross_p99: Duration,
    pub(crate) cross_mean: Duration,
    /// How the hand-offs across processes were spread, for the charts of
    /// their cumulative distribution.
    pub(crate) cross_distribution: Distribution,
    /// Release to the next grant, counting only grants to a task of the
    /// same process (ours hand the lock over without the server; a peer's
    /// tasks of one process still go through it).
    pub(crate) in_process: usize,
    pub(crate) in_p50: Duration,
    pub(crate) in_p99: Duration,
    /// Acquisitions whose previous holder (the hold before it in the
    /// window, whatever the round) was in the same process, and in another
    /// one; the window's first acquisition is in neither.
    pub(crate) acquired_in_process: usize,
    pub(crate) acquired_across: usize,
    /// How many tasks got the lock at least once.
    pub(crate) tasks_served: usize,
    /// Grants that overtook a task which had asked earlier and still
    /// waited (see [`order::overtaking`]); `None` where asks are unknown.
    pub(crate) out_of_order: Option<usize>,
    /// Grants that overtook a task surely ahead in line (see
    /// [`order::overtaking_in_line`]); `None` where the worker does not
    /// say when its waits asked the store.
    pub(crate) out_of_line: Option<order::Overtaking>,
    /// The time the lock was held, all holds together (grant to release
    /// call).
    pub(crate) held: Duration,
    /// The time summed up: the window.
    pub(crate) elapsed: Duration,
    /// Holds that began before the previous one ended: must be zero.
    pub(crate) overlaps: usize,
    /// Calls that failed (the worker went on).
    pub(crate) errors: u64,
    /// Server commands over the window, where counted.
    pub(crate) commands: Option<Counts>,
    /// The server's own count of the operations over the window, where it
    /// keeps one (MongoDB's `serverStatus` opcounters).
    pub(crate) server_ops: Option<Counts>,
}

impl Contention {
    /// Sums up `holds` gathered over `elapsed`.
    pub(crate) fn from_holds(mut holds: Vec<Tenure>, elapsed: Duration) -> Self {
        holds.sort_by_key(|hold| (hold.round, hold.acquired_at_ns));
        let mut gaps = Vec::with_capacity(holds.len());
        let (mut cross, mut within) = (Vec::new(), Vec::new());
        let mut overlaps = 0;
        let acquired_across = holds
            .windows(2)
            .filter(|pair| pair[0].process != pair[1].process)
            .count();
        for pair in holds.windows(2) {
            if pair[0].round != pair[1].round {
                continue;
            }
            let Some(gap) = pair[1].acquired_at_ns.checked_sub(pair[0].released_at_ns) else {
                overlaps += 1;
                continue;
            };
            let gap = Duration::from_nanos(gap);
            gaps.push(gap);
            if pair[1].process != pair[0].process {
                cross.push(gap);
            } else {
                within.push(gap);
            }
        }
        let mut served: Vec<(u32, u32)> = holds.iter().map(|h| (h.process, h.task)).collect();
        served.sort_unstable();
        served.dedup();
        gaps.sort_unstable();
        cross.sort_unstable();
        within.sort_unstable();
        let held = holds
            .iter()
            .map(|h| Duration::from_nanos(h.released_at_ns.saturating_sub(h.acquired_at_ns)))
            .sum();
        Self {
            acquisitions: holds.len(),
            per_second: holds.len() as f64 / elapsed.as_secs_f64(),
            hand_offs: gaps.len(),
            hand_off_p50: percentile(&gaps, 50),
            hand_off_p99: percentile(&gaps, 99),
            hand_off_mean: mean(&gaps),
            cross_process: cross.len(),
            cross_p50: percentile(&cross, 50),
            cross_p99: percentile(&cross, 99),
            cross_mean: mean(&cross),
            cross_distribution: Distribution::of_sorted(&cross),
            in_process: within.len(),
            in_p50: percentile(&within, 50),
            in_p99: percentile(&within, 99),
            acquired_in_process: holds.len().saturating_sub(1) - acquired_across,
            acquired_across,
            tasks_served: served.len(),
            out_of_order: order::overtaking(&holds),
            out_of_line: order::overtaking_in_line(&holds),
            held,
            elapsed,
            overlaps,
            errors: 0,
            commands: None,
            server_ops: None,
        }
    }

    /// The share of the window the lock was held, from 0 to 1.
    pub(crate) fn busy(&self) -> f64 {
        self.held.as_secs_f64() / self.elapsed.as_secs_f64()
    }

    /// Acquisitions per second whose previous holder was in the same
    /// process.
    pub(crate) fn per_second_in_process(&self) -> f64 {
        self.acquired_in_process as f64 / self.elapsed.as_secs_f64()
    }

    /// Acquisitions per second whose previous holder was in another
    /// process: the rate a lock is passed between processes.
    pub(crate) fn per_second_across(&self) -> f64 {
        self.acquired_across as f64 / self.elapsed.as_secs_f64()
    }

    /// Server commands per acquisition, where counted.
    pub(crate) fn commands_per_acquisition(&self) -> Option<f64> {
        let commands = self.commands.as_ref()?;
        (self.acquisitions > 0).then(|| commands.total() as f64 / self.acquisitions as f64)
    }
}

/// The mean of `values`; zero when empty.
fn mean(values: &[Duration]) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.iter().sum::<Duration>() / values.len() as u32
}

/// The `p`th percentile of sorted `values` (nearest rank); zero when empty.
pub(crate) fn percentile(values: &[Duration], p: usize) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let rank = (values.len() * p).div_ceil(100).clamp(1, values.len());
    values[rank - 1]
}

#[cfg(test)]
mod tests {
    use distlock::LockKind;

    use super::*;

    fn hold(from: u64, to: u64, process: u32, task: u32) -> Tenure {
        Tenure {
            asked_at_ns: from,
            sent_ns: 0,
            in_line_ns: 0,
            acquired_at_ns: from,
            released_at_ns: to,
            token: from,
            process,
            task,
            round: 0,
            kind: LockKind::Exclusive,
        }
    }

    #[test]
    fn rounds_are_not_laid_end_to_end() {
        let mut holds = vec![hold(0, 10, 0, 0), hold(12, 20, 1, 0), hold(100, 110, 0, 0)];
        holds[2].round = 1;
        holds.push(Tenure {
            round: 1,
            ..hold(111, 120, 1, 0)
        });
        let summary = Contention::from_holds(holds, Duration::from_secs(1));
        assert_eq!(summary.acquisitions, 4);
        assert_eq!(summary.cross_process, 2);
        // The round's boundary passes the lock on too: 1 -> 0 counts.
        assert_eq!(
            (summary.acquired_in_process, summary.acquired_across),
            (0, 3)
        );
        assert_eq!(summary.hand_off_p99, Duration::from_nanos(2));
    }

    #[test]
    fn gaps_and_overlaps() {
        let holds = vec![
            hold(0, 10, 0, 0),
            hold(15, 20, 0, 1),
            hold(18, 30, 1, 0),
            hold(40, 50, 1, 0),
        ];
        let summary = Contention::from_holds(holds, Duration::from_secs(2));
        assert_eq!(summary.acquisitions, 4);
        assert_eq!(summary.overlaps, 1);
        assert_eq!(summary.hand_off_p50, Duration::from_nanos(5));
        assert_eq!(summary.hand_off_p99, Duration::from_nanos(10));
        assert_eq!(summary.hand_off_mean, Duration::from_nanos(7));
        assert_eq!(summary.per_second, 2.0);
        // 0/0 -> 0/1 is another task of the same process; 1/0 -> 1/0 is the
        // same task again.
        assert_eq!(summary.cross_process, 0);
        assert_eq!(summary.in_process, 2);
        assert_eq!(summary.in_p50, Duration::from_nanos(5));
        // 0/0 -> 0/1 -> 1/0 -> 1/0: one acquisition from another process.
        assert_eq!(
            (summary.acquired_in_process, summary.acquired_across),
            (2, 1)
        );
        assert_eq!(summary.hand_offs, 2);
        assert_eq!(summary.tasks_served, 3);
        assert_eq!(summary.held, Duration::from_nanos(10 + 5 + 12 + 10));
    }

    #[test]
    fn cross_process_hand_offs_are_told_apart() {
        let holds = vec![hold(0, 10, 0, 0), hold(12, 20, 1, 0), hold(21, 30, 1, 1)];
        let summary = Contention::from_holds(holds, Duration::from_secs(1));
        assert_eq!(summary.cross_process, 1);
        assert_eq!(summary.cross_p50, Duration::from_nanos(2));
        assert_eq!(summary.cross_mean, Duration::from_nanos(2));
        assert_eq!(summary.cross_distribution.count, 1);
        assert_eq!(
            summary.cross_distribution.cumulative_ms(),
            vec![(Duration::from_nanos(2).as_secs_f64() * 1e3, 1.0)]
        );
        assert_eq!(
            (summary.in_process, summary.in_p50),
            (1, Duration::from_nanos(1))
        );
        assert_eq!(
            (summary.acquired_in_process, summary.acquired_across),
            (1, 1)
        );
        assert_eq!(summary.hand_offs, 2);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<_> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&values, 50), Duration::from_millis(50));
        assert_eq!(percentile(&values, 99), Duration::from_millis(99));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }
}

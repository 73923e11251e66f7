//! The demo's checks and its short report.

use std::fmt;
use std::time::Duration;

use super::HoldReport;
use crate::text::short_duration;

/// Above this many workers, per-worker counts shrink to their range.
const LIST_WORKERS_UP_TO: u32 = 8;

/// What the holds of all workers show.
#[derive(Debug)]
pub(crate) struct Report {
    per_worker: Vec<u64>,
    acquisitions: u64,
    /// Release-to-next-grant gaps, sorted.
    hand_offs: Vec<Duration>,
    marker_overlaps: u64,
    interval_overlaps: u64,
    tokens_increased: bool,
    stale_writes: u64,
    lost: u64,
    counter: u64,
    failed_workers: Vec<u32>,
}

impl Report {
    /// Checks `holds` from `workers` workers against the final `counter`.
    pub(crate) fn new(
        workers: u32,
        mut holds: Vec<HoldReport>,
        counter: u64,
        failed_workers: Vec<u32>,
    ) -> Self {
        holds.sort_by_key(|hold| (hold.acquired_at_ns, hold.released_at_ns));
        let mut per_worker = vec![0; workers as usize];
        for hold in &holds {
            if let Some(count) = per_worker.get_mut(hold.worker as usize) {
                *count += 1;
            }
        }
        let mut hand_offs = Vec::new();
        let mut interval_overlaps = 0;
        let mut tokens_increased = true;
        let mut latest_release = 0;
        for pair in holds.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            latest_release = before.released_at_ns.max(latest_release);
            // A hold that starts before an earlier one ended overlaps it
            // (judged by one machine's wall clock, which all workers share).
            if after.acquired_at_ns < latest_release {
                interval_overlaps += 1;
            } else {
                hand_offs.push(Duration::from_nanos(
                    after.acquired_at_ns - before.released_at_ns,
                ));
            }
            if after.token <= before.token {
                tokens_increased = false;
            }
        }
        hand_offs.sort();
        Self {
            per_worker,
            acquisitions: holds.len() as u64,
            hand_offs,
            marker_overlaps: holds.iter().filter(|hold| hold.overlap).count() as u64,
            interval_overlaps,
            tokens_increased,
            stale_writes: holds.iter().filter(|hold| hold.stale).count() as u64,
            lost: holds.iter().filter(|hold| hold.lost).count() as u64,
            counter,
            failed_workers,
        }
    }

    fn overlaps(&self) -> u64 {
        self.marker_overlaps + self.interval_overlaps
    }

    /// What failed, in a few words each; empty when the demo passed.
    fn failures(&self) -> Vec<&'static str> {
        let mut failures = Vec::new();
        if !self.failed_workers.is_empty() {
            failures.push("a worker failed");
        }
        if self.acquisitions == 0 {
            failures.push("no worker got the lock");
        }
        if self.overlaps() > 0 {
            failures.push("two holders at once");
        }
        if !self.tokens_increased {
            failures.push("a fencing token did not increase");
        }
        if self.counter != self.acquisitions {
            failures.push("the counter does not match");
        }
        failures
    }

    /// Whether every check passed.
    pub(crate) fn passed(&self) -> bool {
        self.failures().is_empty()
    }

    /// The hand-off latency at quantile `q`, by nearest rank.
    fn hand_off(&self, q: f64) -> Option<Duration> {
        let n = self.hand_offs.len();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        Some(self.hand_offs[rank - 1])
    }

    fn per_worker_summary(&self) -> String {
        if self.per_worker.len() as u32 <= LIST_WORKERS_UP_TO {
            let counts: Vec<String> = self
                .per_worker
                .iter()
                .enumerate()
                .map(|(worker, count)| format!("w{worker} {count}"))
                .collect();
            counts.join(", ")
        } else {
            let min = self.per_worker.iter().min().copied().unwrap_or(0);
            let max = self.per_worker.iter().max().copied().unwrap_or(0);
            format!("{min} to {max} per worker")
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "acquisitions  {} ({})",
            self.acquisitions,
            self.per_worker_summary()
        )?;
        match (self.hand_off(0.5), self.hand_off(0.99)) {
            (Some(p50), Some(p99)) => writeln!(
                f,
                "hand-off      p50 {}, p99 {} (release to next grant)",
                short_duration(p50),
                short_duration(p99)
            )?,
            _ => writeln!(f, "hand-off      - (fewer than two holds)")?,
        }
        writeln!(
            f,
            "overlaps      {} (marker file {}, time intervals {})",
            self.overlaps(),
            self.marker_overlaps,
            self.interval_overlaps
        )?;
        writeln!(
            f,
            "fencing       {}; {} stale writes refused",
            if self.tokens_increased {
                "every token increased"
            } else {
                "a token did NOT increase"
            },
            self.stale_writes
        )?;
        if self.counter == self.acquisitions {
            writeln!(f, "counter       {}, equals the acquisitions", self.counter)?;
        } else {
            writeln!(
                f,
                "counter       {}, but {} acquisitions",
                self.counter, self.acquisitions
            )?;
        }
        if self.lost > 0 {
            writeln!(
                f,
                "lost          {} holds were lost before release",
                self.lost
            )?;
        }
        if !self.failed_workers.is_empty() {
            let workers: Vec<String> = self
                .failed_workers
                .iter()
                .map(|w| format!("w{w}"))
                .collect();
            writeln!(f, "workers       failed: {}", workers.join(", "))?;
        }
        let failures = self.failures();
        if failures.is_empty() {
            writeln!(f, "result        ok")
        } else {
            writeln!(f, "result        FAILED: {}", failures.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(worker: u32, acquired: u64, released: u64, token: u64) -> HoldReport {
        HoldReport {
            worker,
            acquired_at_ns: acquired,
            released_at_ns: released,
            token,
            overlap: false,
            stale: false,
            lost: false,
        }
    }

    #[test]
    fn a_clean_run_passes() {
        let holds = vec![hold(1, 30, 40, 3), hold(0, 10, 20, 1), hold(0, 22, 28, 2)];
        let report = Report::new(2, holds, 3, Vec::new());
        assert!(report.passed(), "{report}");
        assert_eq!(report.per_worker, vec![2, 1]);
        assert_eq!(
            report.hand_offs,
            vec![Duration::from_nanos(2), Duration::from_nanos(2)]
        );
        assert!(report.to_string().contains("result        ok"));
    }

    #[test]
    fn overlaps_tokens_and_counter_are_caught() {
        let holds = vec![hold(0, 10, 20, 2), hold(1, 15, 25, 1)];
        let report = Report::new(2, holds, 1, Vec::new());
        assert_eq!(report.interval_overlaps, 1);
        assert!(!report.tokens_increased);
        let shown = report.to_string();
        assert!(shown.contains("FAILED"), "{shown}");
        assert!(shown.contains("counter does not match"), "{shown}");
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut report = Report::new(1, Vec::new(), 0, Vec::new());
        report.hand_offs = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(report.hand_off(0.5), Some(Duration::from_micros(50)));
        assert_eq!(report.hand_off(0.99), Some(Duration::from_micros(99)));
        assert!(!report.passed(), "no acquisitions is a failure");
    }
}

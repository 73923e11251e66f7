//! Waiting for a quiet machine before a sensitive measurement.
//!
//! The uncontended scenario compares rates a few percent apart, so a server
//! still busy with the previous scenario (a database flushing what it was
//! just sent, say) would fall into some rounds and not others. Before it
//! starts, the benchmark waits until the machine's processors are idle.

use std::time::Duration;

use tokio::time::Instant;

/// How busy the processors may be, as a share of all of them.
const QUIET: f64 = 0.10;

/// The window over which busyness is measured.
const WINDOW: Duration = Duration::from_millis(500);

/// What waiting for quiet found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quiet {
    /// How long it waited.
    pub(crate) waited: Duration,
    /// The share of processor time busy in the last window; `None` where
    /// the machine does not say (no `/proc/stat`).
    pub(crate) busy: Option<f64>,
}

impl Quiet {
    /// The busiest the processors may be when the measurement starts.
    pub(crate) const THRESHOLD: f64 = QUIET;
}

/// Waits until the processors are at most [`Quiet::THRESHOLD`] busy over
/// half a second, or `patience` has passed.
pub(crate) async fn until_quiet(patience: Duration) -> Quiet {
    let started = Instant::now();
    loop {
        let Some(before) = cpu_times() else {
            return Quiet {
                waited: started.elapsed(),
                busy: None,
            };
        };
        tokio::time::sleep(WINDOW).await;
        let Some(after) = cpu_times() else {
            return Quiet {
                waited: started.elapsed(),
                busy: None,
            };
        };
        let total = after.total.saturating_sub(before.total);
        let idle = after.idle.saturating_sub(before.idle);
        let share = if total == 0 {
            0.0
        } else {
            (total - idle.min(total)) as f64 / total as f64
        };
        if share <= QUIET || started.elapsed() >= patience {
            return Quiet {
                waited: started.elapsed(),
                busy: Some(share),
            };
        }
    }
}

/// Jiffies since boot, all processors together.
struct CpuTimes {
    total: u64,
    /// Idle and waiting for I/O.
    idle: u64,
}

fn cpu_times() -> Option<CpuTimes> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse(stat.lines().next()?)
}

/// Parses the first line of `/proc/stat`:
/// `cpu  user nice system idle iowait irq softirq steal …`.
fn parse(line: &str) -> Option<CpuTimes> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let values: Vec<u64> = fields.map(|f| f.parse().ok()).collect::<Option<_>>()?;
    // guest and guest_nice (the 9th and 10th) are already in user and nice.
    let total = values.iter().take(8).sum();
    let idle = values.get(3)? + values.get(4).copied().unwrap_or(0);
    Some(CpuTimes { total, idle })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_is_read() {
        let times = parse("cpu  100 5 50 800 20 3 2 10 7 0").unwrap();
        assert_eq!(times.total, 990);
        assert_eq!(times.idle, 820);
        assert!(parse("cpu0 1 2 3 4").is_none());
        assert!(parse("cpu  1 x 3 4").is_none());
    }
}

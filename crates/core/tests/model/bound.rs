//! How far each model check looks.
//!
//! Shuttle's PCT scheduler runs `DISTLOCK_MODEL_ITERATIONS` schedules
//! (200 unless set) of each scenario, each with `DISTLOCK_MODEL_DEPTH`
//! priority changes (3 unless set). PCT finds a bug that needs `d` ordering
//! constraints between `n` tasks in `k` steps with probability at least
//! `1 / (n * k^(d - 1))` per schedule, so the depth is the bound on how
//! intricate a missed bug can be; the iterations make finding one likely.
//! It is random testing with that guarantee, not an enumeration of every
//! schedule. An iteration that takes more than `DISTLOCK_MODEL_MAX_STEPS`
//! scheduling steps (100,000 unless set) fails: a task that spins forever
//! waiting for a name to come free is a leak. A schedule in which no task
//! can run while one has not finished fails as a deadlock. Tokio's clock
//! is frozen (see [`crate::harness`]), so no timer ever fires: any wait that
//! would need its backoff to end, rather than a wake-up, shows as a
//! deadlock.

use std::env;

/// The bound of one run, from the environment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    /// Schedules tried per scenario.
    pub(crate) iterations: usize,
    /// PCT's priority-change points per schedule.
    pub(crate) depth: usize,
    /// Steps after which a schedule fails as a livelock or leak.
    pub(crate) max_steps: usize,
}

impl Bound {
    /// The bound the environment sets, or the defaults CI runs with.
    pub(crate) fn from_env() -> Self {
        Self {
            iterations: read("DISTLOCK_MODEL_ITERATIONS", 200),
            depth: read("DISTLOCK_MODEL_DEPTH", 3),
            max_steps: read("DISTLOCK_MODEL_MAX_STEPS", 100_000),
        }
    }
}

fn read(variable: &str, default: usize) -> usize {
    match env::var(variable) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{variable} must be a whole number, not {value:?}")),
        Err(_) => default,
    }
}

//! Runs a scenario under Shuttle, with Tokio's clock frozen.

use std::env;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};

use shuttle::scheduler::{PctScheduler, ReplayScheduler};
use shuttle::{Config, MaxSteps, Runner};

use crate::bound::Bound;

/// Each task gets this much stack: core's futures, unoptimized, are larger
/// than Shuttle's default allows.
const STACK: usize = 1 << 20;

/// Runs `scenario` under Shuttle as [`Bound::from_env`] says, failing on
/// the first schedule that panics, deadlocks or runs past the step bound.
/// With `DISTLOCK_MODEL_REPLAY` set to the schedule a failure printed,
/// runs that one schedule instead, to debug it.
///
/// Core reads Tokio's clock and sets Tokio timers. A Tokio runtime is
/// entered, never driven, with its clock paused: `Instant::now` stands
/// still, and no sleep or timeout ever ends. Every schedule is then the same
/// function of Shuttle's choices, as replay needs, and progress can only
/// come from the wake-ups core's own code sends.
pub(crate) fn check<F, Fut>(scenario: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()>,
{
    let bound = Bound::from_env();
    let frozen = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a paused Tokio clock");
    // Shuttle runs every task on this thread, so all of them see the clock.
    let clock = frozen.enter();
    let mut config = Config::new();
    config.stack_size = STACK;
    config.max_steps = MaxSteps::FailAfter(bound.max_steps);
    let replayed = env::var("DISTLOCK_MODEL_REPLAY").ok();
    let expected = if replayed.is_some() {
        1
    } else {
        bound.iterations
    };
    let test = move || shuttle::future::block_on(scenario());
    let ran = panic::catch_unwind(AssertUnwindSafe(|| match &replayed {
        Some(schedule) => {
            let scheduler = ReplayScheduler::new_from_encoded(schedule);
            Runner::new(scheduler, config).run(test)
        }
        None => {
            let scheduler = PctScheduler::new(bound.depth, bound.iterations);
            Runner::new(scheduler, config).run(test)
        }
    }));
    match ran {
        Ok(ran) => assert_eq!(ran, expected, "every schedule asked for ran"),
        Err(failure) => {
            // Shuttle keeps the failed schedule's tasks, and with them their
            // timers, which the runtime would wake as it shuts down, outside
            // any Shuttle execution: a second, misleading panic.
            drop(clock);
            std::mem::forget(frozen);
            panic::resume_unwind(failure);
        }
    }
}

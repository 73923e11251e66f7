//! The waiters curve: N processes of one task each, all taking one name
//! over and over, so that every release finds N − 1 waiters; the server
//! commands per acquisition (from one grant to the next: a release, the
//! waiters' tries or wake-ups, and a grant) and the hand-off time.

use std::path::Path;
use std::time::Duration;

use crate::gather;
use crate::mix::Mix;
use crate::names::bench_name;
use crate::ours::our_workers;
use crate::outcome::Outcome;
use crate::target::Target;
use crate::timeline::Contention;
use crate::worker::{Layout, Window, Workload};

/// Time for the first worker process to start and connect, and for each
/// further one: 64 processes starting at once on a small machine need
/// seconds, not the contended runs' one and a half.
const STARTUP: Duration = Duration::from_millis(1500);
const STARTUP_PER_PROCESS: Duration = Duration::from_millis(40);

/// How long the tasks ask before the window opens: time for every worker
/// to make its first attempt, with what it does once (a stream opened, a
/// channel listened to, statements prepared, a place taken), so that the
/// window counts what each release costs, not what each process costs.
pub(crate) const WARM_UP: Duration = Duration::from_secs(1);

/// One point of the waiters curve: what `waiters` processes of one task
/// each did in a tight loop on one name.
#[derive(Debug, Clone)]
pub(crate) struct WaitersPoint {
    pub(crate) waiters: usize,
    pub(crate) contention: Contention,
}

/// Runs `waiters` worker processes of ours (`exe`), one task each, in a
/// tight loop on one fresh name of `target` for `seconds`.
pub(crate) async fn waiters(
    exe: &Path,
    target: &Target,
    waiters: usize,
    seconds: Duration,
) -> Outcome<WaitersPoint> {
    let processes = u32::try_from(waiters).map_err(|_| "too many waiters".to_owned())?;
    let startup = STARTUP + STARTUP_PER_PROCESS * processes;
    let window = Window::after_warm_up(startup, WARM_UP, seconds);
    let layout = Layout {
        processes,
        tasks: 1,
        window,
        workload: Workload::TightLoop,
    };
    let workers = our_workers(exe, target, &bench_name("waiters"), layout, Mix::Exclusive);
    // PostgreSQL's statements, counted as they end: its transactions are
    // published too late for a window this short.
    let contention = gather::contend(&target.counting_statements(), workers, window, false).await?;
    Ok(WaitersPoint {
        waiters,
        contention,
    })
}

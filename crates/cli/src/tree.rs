//! CMD's processes: on Linux, CMD and everything it started, found through
//! `/proc`; elsewhere, CMD alone.
//!
//! On Linux distlock makes itself a child subreaper, so that a process whose
//! parent exits (CMD's own children, once CMD is gone) becomes distlock's
//! child rather than init's. Its pid then stays its own until distlock
//! reaps it, so the whole tree can be found, signalled and waited for: a
//! lost lock stops all of it, and the lock is held until all of it has
//! ended, as `flock(1)`'s lock is held while any process that inherited it
//! lives.
//!
//! macOS and the BSDs have no such `/proc` and no subreaper (FreeBSD's
//! `procctl` reaper is not used), and neither does Linux with
//! [`PORTABLE`](distlock::backend::platform::PORTABLE) set. There distlock knows CMD
//! alone: signals and a lost lock's SIGTERM and SIGKILL reach CMD, which
//! must pass them on to its children, and the lock is released once CMD
//! exits, whatever it left running.

use std::collections::HashSet;

use rustix::process::{Pid, Signal, WaitOptions, kill_process, waitpid};

use crate::platform;

/// How distlock finds CMD's processes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tree {
    /// The whole tree, through `/proc`, rather than CMD alone.
    whole: bool,
}

impl Tree {
    /// Starts keeping track; on Linux, makes distlock the reaper of the
    /// processes CMD leaves behind.
    pub(crate) fn start() -> Self {
        let whole = platform::linux_process_controls();
        #[cfg(target_os = "linux")]
        if whole
            && let Err(error) =
                rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        {
            tracing::warn!(%error, "cannot become a child subreaper; processes CMD leaves behind are not tracked");
        }
        Self { whole }
    }

    /// Every process below distlock that it knows of. On Linux: CMD, what
    /// CMD started, and what was left behind and adopted, with all their
    /// descendants. Elsewhere: `command`, CMD's pid while Tokio has not
    /// reaped it.
    pub(crate) fn all(self, command: Option<Pid>) -> Vec<Pid> {
        if !self.whole {
            return command.into_iter().collect();
        }
        let mut seen = HashSet::new();
        let mut queue = children_of(None);
        let mut found = Vec::new();
        while let Some(pid) = queue.pop() {
            if seen.insert(pid) {
                found.push(pid);
                queue.extend(children_of(Some(pid)));
            }
        }
        found
    }

    /// Reaps distlock's children that have exited; returns how many are
    /// still running. Call it only once Tokio has reaped CMD, or it could
    /// take CMD's exit status from under Tokio. Where distlock knows CMD
    /// alone, nothing was adopted and it returns 0.
    pub(crate) fn reap_adopted(self) -> usize {
        if !self.whole {
            return 0;
        }
        children_of(None)
            .into_iter()
            .filter(|&pid| matches!(waitpid(Some(pid), WaitOptions::NOHANG), Ok(None)))
            .count()
    }
}

/// The children of `pid`, or of distlock for `None`, from the `children`
/// file of each of its threads (Linux only).
fn children_of(pid: Option<Pid>) -> Vec<Pid> {
    let tasks = match pid {
        Some(pid) => format!("/proc/{}/task", pid.as_raw_nonzero()),
        None => "/proc/self/task".to_owned(),
    };
    let Ok(tasks) = std::fs::read_dir(tasks) else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        if let Ok(listed) = std::fs::read_to_string(task.path().join("children")) {
            children.extend(
                listed
                    .split_whitespace()
                    .filter_map(|id| id.parse::<i32>().ok())
                    .filter_map(Pid::from_raw),
            );
        }
    }
    children
}

/// Sends `signal` to each of `pids`; those that are gone are skipped.
pub(crate) fn signal(pids: &[Pid], signal: Signal) {
    for &pid in pids {
        let _ = kill_process(pid, signal);
    }
}

//! CMD's processes: CMD and everything it started, found through `/proc`.
//!
//! distlock makes itself a child subreaper, so that a process whose parent
//! exits (CMD's own children, once CMD is gone) becomes distlock's child
//! rather than init's. Its pid then stays its own until distlock reaps it,
//! so the whole tree can be found, signalled and waited for: a lost lock
//! stops all of it, and the lock is held until all of it has ended, as
//! `flock(1)`'s lock is held while any process that inherited it lives.

use std::collections::HashSet;

use rustix::process::{
    Pid, Signal, WaitOptions, getpid, kill_process, set_child_subreaper, waitpid,
};

/// Makes distlock the reaper of the processes CMD leaves behind.
pub(crate) fn adopt_orphans() {
    if let Err(error) = set_child_subreaper(Some(getpid())) {
        tracing::warn!(%error, "cannot become a child subreaper; processes CMD leaves behind are not tracked");
    }
}

/// The children of `pid`, or of distlock for `None`, from the `children`
/// file of each of its threads.
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

/// Every process below distlock: CMD, what CMD started, and what was left
/// behind and adopted, with all their descendants.
pub(crate) fn all() -> Vec<Pid> {
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

/// Sends `signal` to each of `pids`; those that are gone are skipped.
pub(crate) fn signal(pids: &[Pid], signal: Signal) {
    for &pid in pids {
        let _ = kill_process(pid, signal);
    }
}

/// Reaps distlock's children that have exited; returns how many are still
/// running. Call it only once Tokio has reaped CMD, or it could take CMD's
/// exit status from under Tokio.
pub(crate) fn reap_adopted() -> usize {
    children_of(None)
        .into_iter()
        .filter(|&pid| matches!(waitpid(Some(pid), WaitOptions::NOHANG), Ok(None)))
        .count()
}

//! What every section of the report is stamped with: the commit the run
//! was built from and whether the checkout had changes, when the run
//! started, and on what machine.

use std::path::Path;
use std::process::Command;

/// The start of every stamp line, which the report's merge looks for.
pub(crate) const STAMP_START: &str = "> **Stamp**:";

/// One run's stamp.
#[derive(Debug, Clone)]
pub(crate) struct Stamp {
    /// The commit and whether the checkout had changes, in words.
    pub(crate) commit: String,
    /// When the run started, in UTC (RFC 3339).
    pub(crate) date: String,
    pub(crate) machine: String,
}

impl Stamp {
    /// The stamp of a run starting now, read from the git checkout of the
    /// current directory. The files the run writes (`written`: the report
    /// and its charts' directory) do not count as changes: nothing is
    /// built from them, and an earlier partial run leaves them changed.
    pub(crate) fn now(written: &[&Path]) -> Self {
        Self {
            commit: commit(written),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            machine: machine(),
        }
    }

    /// The stamp line of a section that used `settings`.
    pub(crate) fn line(&self, settings: &str) -> String {
        format!(
            "{STAMP_START} {}; run {} on {}; {settings}.",
            self.commit, self.date, self.machine
        )
    }
}

/// `git` with `args`, its output if it succeeded.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The commit checked out, and whether the work tree differs from it
/// (untracked files count: a new source file changes the build), leaving
/// out the paths in `written`.
fn commit(written: &[&Path]) -> String {
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "commit unknown (not run in a git checkout)".to_owned();
    };
    let exclude: Vec<String> = written.iter().filter_map(|path| excluded(path)).collect();
    let mut args = vec!["status", "--porcelain", "--", ":/"];
    args.extend(exclude.iter().map(String::as_str));
    let changed = git(&args).map(|out| out.lines().count());
    let state = match changed {
        Some(0) => "clean".to_owned(),
        Some(1) => "dirty: 1 path changed or untracked".to_owned(),
        Some(n) => format!("dirty: {n} paths changed or untracked"),
        None => "dirty or not: `git status` failed".to_owned(),
    };
    format!("commit `{}` ({state})", head.trim())
}

/// The pathspec that leaves `path` (a file or a directory) out of `git
/// status`, if it lies in the checkout.
fn excluded(path: &Path) -> Option<String> {
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let path = std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .ok()?;
    let inside = path.strip_prefix(top.trim()).ok()?;
    Some(format!(":(top,exclude){}", inside.display()))
}

/// The machine: cores, processor, memory and kernel.
pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let kib: u64 = info
                .lines()
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some(format!("{:.0} GiB", kib as f64 / 1024.0 / 1024.0))
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| format!(", Linux {}", r.trim()))
        .unwrap_or_default();
    format!("{cores} cores ({cpu}), {memory}{kernel}")
}

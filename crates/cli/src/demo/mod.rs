//! `distlock demo`: worker processes contend for one lock, and the report
//! shows whether the lock kept them apart.
//!
//! The parent opens the backend only to check that it is shared across
//! processes, makes a temporary directory with a counter file, and starts
//! the workers (this binary, `__demo-worker`), which report each hold as one
//! JSON line on stdout. See [`worker`] for what a worker does under the
//! lock and [`report`] for the checks.

mod report;
mod worker;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::LockName;
use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::cli::DemoArgs;
use crate::exit::{Failure, RUNTIME};
use crate::open;
use crate::text;

pub(crate) use worker::work;

/// The counter file in the demo's directory: `VALUE TOKEN`, the counter and
/// the highest fencing token that wrote it.
const COUNTER_FILE: &str = "counter";
/// The marker file that exists while some worker holds the lock.
const MARKER_FILE: &str = "holder.marker";

/// One hold of the lock, as a worker reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HoldReport {
    /// The worker's number.
    pub(crate) worker: u32,
    /// Wall-clock nanoseconds since the epoch, just after the grant.
    pub(crate) acquired_at_ns: u64,
    /// Wall-clock nanoseconds since the epoch, just before the release.
    pub(crate) released_at_ns: u64,
    /// The grant's fencing token.
    pub(crate) token: u64,
    /// The marker file was already there: another worker held the lock too.
    pub(crate) overlap: bool,
    /// The counter refused the write: its stored token was not lower.
    pub(crate) stale: bool,
    /// The release said the lock was no longer ours.
    pub(crate) lost: bool,
}

/// Runs `distlock demo`; returns the exit code.
pub(crate) async fn demo(args: DemoArgs) -> Result<u8, Failure> {
    let name = LockName::new(&args.lock)?;
    if name.as_str().contains('\0') {
        return Err(Failure::usage(format!(
            "the lock name {name} has a NUL byte, which cannot be passed to the workers"
        )));
    }
    let url = open::url_or_default(args.backend.backend);
    let backend = open::open_backend(&url).await?;
    if !backend.capabilities().cross_process {
        return Err(Failure::usage(format!(
            "the backend `{}` keeps its locks inside one process, but the demo's workers are \
             separate processes; use file:// or a server backend",
            distlock::redact(&url)
        )));
    }
    drop(backend);

    let dir = tempfile::Builder::new()
        .prefix("distlock-demo-")
        .tempdir()
        .map_err(|error| Failure::runtime(format!("cannot make a temporary directory: {error}")))?;
    write_counter(&dir.path().join(COUNTER_FILE), 0, 0)
        .map_err(|error| Failure::runtime(format!("cannot write the counter file: {error}")))?;
    text::print(&format!(
        "distlock demo: {} workers contend for lock {name} on {} for {}\n",
        args.workers,
        distlock::redact(&url),
        humantime::format_duration(args.duration)
    ))?;

    let until = SystemTime::now() + args.duration;
    let mut running = Vec::new();
    for worker in 0..args.workers {
        let child = spawn_worker(worker, &url, &name, dir.path(), until)?;
        running.push((worker, tokio::spawn(child.wait_with_output())));
    }
    let mut holds = Vec::new();
    let mut failed_workers = Vec::new();
    for (worker, task) in running {
        let output = task
            .await
            .map_err(|error| Failure::runtime(format!("worker {worker}: {error}")))?
            .map_err(|error| Failure::runtime(format!("worker {worker}: {error}")))?;
        if !output.status.success() {
            failed_workers.push(worker);
        }
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let hold: HoldReport = serde_json::from_str(line).map_err(|error| {
                Failure::runtime(format!("worker {worker} reported `{line}`: {error}"))
            })?;
            holds.push(hold);
        }
    }
    let counter = read_counter(&dir.path().join(COUNTER_FILE))
        .map_err(|error| Failure::runtime(format!("cannot read the counter file: {error}")))?;
    let report = report::Report::new(args.workers, holds, counter.0, failed_workers);
    text::print(&report.to_string())?;
    Ok(if report.passed() { 0 } else { RUNTIME })
}

/// Starts one worker. The backend URL goes in the environment, not the
/// arguments, so that credentials do not show in `ps`.
fn spawn_worker(
    worker: u32,
    url: &str,
    name: &LockName,
    dir: &Path,
    until: SystemTime,
) -> Result<tokio::process::Child, Failure> {
    let exe = std::env::current_exe().map_err(|error| {
        Failure::runtime(format!("cannot find distlock's own executable: {error}"))
    })?;
    let until_ms = until
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis()
        .to_string();
    Command::new(exe)
        .arg("__demo-worker")
        .arg("--parent-pid")
        .arg(std::process::id().to_string())
        .arg("--worker")
        .arg(worker.to_string())
        // `=` keeps a name that starts with `-` a value.
        .arg(format!("--lock={}", name.as_str()))
        .arg("--dir")
        .arg(dir)
        .arg("--until-unix-ms")
        .arg(until_ms)
        .env("DISTLOCK_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| Failure::runtime(format!("cannot start worker {worker}: {error}")))
}

/// Writes the counter file (not atomically: the lock is what protects it).
fn write_counter(path: &Path, value: u64, token: u64) -> std::io::Result<()> {
    std::fs::write(path, format!("{value} {token}\n"))
}

/// Reads the counter file: the counter and the highest token that wrote it.
fn read_counter(path: &Path) -> std::io::Result<(u64, u64)> {
    let text = std::fs::read_to_string(path)?;
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next()) {
        (Some(Ok(value)), Some(Ok(token))) => Ok((value, token)),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("`{}` is not `VALUE TOKEN`", text.trim()),
        )),
    }
}

/// Wall-clock nanoseconds since the epoch.
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
        })
}

//! Peers measured in the same run, against the same servers:
//!
//! - `distributed-lock-mongo` 0.2.0 (Rust, crates.io): one
//!   `findOneAndUpdate` upsert to try, a `deleteOne` to release, and a
//!   fixed sleep (`min_busy_wait_sleep_time`, 10 ms by default) between
//!   tries, without jitter. It keeps its locks in its own collection
//!   (`DistributedLocks`) of the same database.
//! - Python `tooz`'s memcached driver, through `peers/tooz_bench.py`, run
//!   as separate processes that print the same JSON lines as our workers.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distributed_lock_core::error::LockError;
use distributed_lock_core::traits::{DistributedLock, LockHandle};
use distributed_lock_mongo::MongoDistributedLock;
use serde::Deserialize;
use tokio::process::Command;

use crate::commands::Counts;
use crate::outcome::Outcome;
use crate::target::{Server, Target, mongo_client};
use crate::worker::{
    Layout, Take, Taker, WorkerArgs, Workload, count_within, drive, hold_then_release,
    report_worker,
};

/// Uncontended cycles of the Rust peer on `name`, through `target`'s
/// counted client.
pub(crate) async fn mongo_cycles(
    target: &Target,
    name: &distlock::LockName,
    seconds: Duration,
) -> Outcome<u64> {
    let Server::Mongo { database, .. } = &target.server else {
        return Err("distributed-lock-mongo needs a MongoDB target".into());
    };
    let lock = MongoDistributedLock::new(name.as_str().to_owned(), database.clone(), None, None);
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < seconds {
        let handle = lock
            .try_acquire()
            .await
            .map_err(|e| format!("distributed-lock-mongo: {e}"))?
            .ok_or("distributed-lock-mongo: an uncontended lock was held")?;
        handle
            .release()
            .await
            .map_err(|e| format!("distributed-lock-mongo: {e}"))?;
        cycles += 1;
    }
    Ok(cycles)
}

/// The commands that start the Rust peer's contending workers, with its
/// defaults.
pub(crate) fn mongo_workers(
    exe: &Path,
    target: &Target,
    lock: &str,
    layout: Layout,
) -> Vec<Command> {
    layout.commands(exe, "peer-worker", &target.url, lock)
}

/// The Rust peer's lock, shared by the tasks of one process.
#[derive(Clone)]
struct PeerTaker(Arc<MongoDistributedLock>);

impl Taker for PeerTaker {
    async fn take_once(&self, left: Duration, work: Duration) -> Take {
        // The peer checks its timeout only after a try and then sleeps its
        // full period; stop it when the window closes.
        let handle = match tokio::time::timeout(left, self.0.acquire(Some(left))).await {
            Err(_) | Ok(Err(LockError::Timeout(_))) => return Take::TimedOut,
            Ok(Ok(handle)) => handle,
            // A duplicate-key race on the upsert, say, which the peer
            // reports as an error.
            Ok(Err(_)) => return Take::Failed,
        };
        // The peer has no fencing tokens.
        hold_then_release(work, 0, async { handle.release().await.is_err() }).await
    }
}

/// One worker process of the Rust peer: `tasks` tasks, each with the
/// peer's `acquire` on one shared lock value and `mongodb::Client`, with
/// its default options; reports like ours.
pub(crate) async fn mongo_worker(args: &WorkerArgs) -> Outcome<()> {
    let (monitor, database, _collection) = mongo_client(&args.backend).await?;
    let taker = PeerTaker(Arc::new(MongoDistributedLock::new(
        args.lock.clone(),
        database,
        None,
        None,
    )));
    let counted = count_within(args.window(), move || {
        let counts = monitor.snapshot();
        async move { Ok(Some(counts)) }
    });
    let log = drive(taker, args).await?;
    report_worker(log, counted.await.map_err(|e| e.to_string())??)
}

/// How to run the Python peer.
#[derive(Debug, Clone)]
pub(crate) struct Tooz {
    pub(crate) python: String,
    pub(crate) script: String,
}

/// The versions the Python peer reports.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ToozVersions {
    pub(crate) python: String,
    pub(crate) tooz: String,
    pub(crate) pymemcache: String,
}

/// The Python peer's uncontended result.
#[derive(Debug, Clone, Deserialize)]
struct ToozCycles {
    cycles: u64,
    seconds: f64,
}

/// tooz's URL for the first server of a `memcache://` URL.
fn tooz_url(target: &Target) -> Outcome<String> {
    let rest = target
        .url
        .split_once("://")
        .map(|(_, rest)| rest)
        .ok_or("not a memcached URL")?;
    let first = rest
        .split(['/', '?', ','])
        .next()
        .filter(|server| !server.is_empty())
        .ok_or("a memcached URL without a server")?;
    Ok(format!("memcached://{first}"))
}

impl Tooz {
    fn command(&self) -> Command {
        let mut command = Command::new(&self.python);
        command.arg(&self.script);
        command
    }

    /// The versions of Python, tooz and pymemcache the script runs with.
    pub(crate) async fn versions(&self) -> Outcome<ToozVersions> {
        let output = self
            .command()
            .arg("versions")
            .output()
            .await
            .map_err(|e| format!("cannot run {}: {e}", self.python))?;
        if !output.status.success() {
            return Err(format!(
                "{} {} versions failed: {}",
                self.python,
                self.script,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        serde_json::from_slice(&output.stdout).map_err(|e| format!("tooz versions: {e}"))
    }

    /// Uncontended cycles of tooz's memcached lock, with the server's
    /// commands counted around the run (which include tooz's start-up and
    /// shutdown: a handful).
    pub(crate) async fn uncontended(
        &self,
        target: &Target,
        name: &str,
        seconds: Duration,
    ) -> Outcome<ToozUncontended> {
        let before = target.counts().await?;
        let output = self
            .command()
            .args(["uncontended", "--url", &tooz_url(target)?, "--lock", name])
            .args(["--seconds", &seconds.as_secs_f64().to_string()])
            .output()
            .await
            .map_err(|e| format!("cannot run {}: {e}", self.python))?;
        if !output.status.success() {
            return Err(format!(
                "tooz uncontended failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let cycles: ToozCycles =
            serde_json::from_slice(&output.stdout).map_err(|e| format!("tooz uncontended: {e}"))?;
        let commands = match (before, target.counts().await?) {
            (Some(before), Some(after)) => Some(after.since(&before)),
            _ => None,
        };
        Ok(ToozUncontended {
            cycles: cycles.cycles,
            per_second: cycles.cycles as f64 / cycles.seconds,
            commands,
        })
    }

    /// The commands that start tooz's contending processes, as many
    /// threads each as our workers have tasks.
    pub(crate) fn workers(
        &self,
        target: &Target,
        lock: &str,
        layout: Layout,
    ) -> Outcome<Vec<Command>> {
        let url = tooz_url(target)?;
        Ok((0..layout.processes)
            .map(|process| {
                let mut command = self.command();
                command
                    .args(["contended", "--url", &url, "--lock", lock])
                    .args(["--threads", &layout.tasks.to_string()])
                    .args(["--process", &process.to_string()])
                    .args(["--start-ns", &layout.window.start_ns.to_string()])
                    .args(["--until-ns", &layout.window.until_ns.to_string()]);
                if let Workload::Rounds { work } = layout.workload {
                    command.arg("--rounds");
                    if !work.is_zero() {
                        command.args(["--work-seconds", &work.as_secs_f64().to_string()]);
                    }
                }
                command
            })
            .collect())
    }
}

/// The uncontended result of the Python peer, as the report shows it.
#[derive(Debug, Clone)]
pub(crate) struct ToozUncontended {
    pub(crate) cycles: u64,
    pub(crate) per_second: f64,
    pub(crate) commands: Option<Counts>,
}

impl ToozUncontended {
    pub(crate) fn commands_per_cycle(&self) -> Option<f64> {
        let commands = self.commands.as_ref()?;
        (self.cycles > 0).then(|| commands.total() as f64 / self.cycles as f64)
    }
}

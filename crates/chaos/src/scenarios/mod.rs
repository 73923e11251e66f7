//! The scenarios, and what they share: settings, and holder processes.

mod churn;
mod clock_shift;
mod delayed_write;
mod failover;
mod forced;
mod kill;
mod lost_ack;
mod memcached_edges;
mod names;
mod network;
mod pause;
mod secrets;
mod server_clock;
mod slow_renewal;
mod tokens;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

use crate::campaign::Server;
use crate::fenced::FencedStore;
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo};
use crate::worker::{ClaimSpec, Event, Spec, read_events};

/// How a campaign runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The `distlock-chaos` binary, which runs the holders.
    pub(crate) exe: PathBuf,
    /// The `distlock` binary, for the `distlock run` checks, when built.
    pub(crate) cli: Option<PathBuf>,
    /// The short form, for CI: fewer runs and cycles, the same invariants.
    pub(crate) short: bool,
    /// The lease of every holder.
    pub(crate) lease: Duration,
}

impl Settings {
    /// `full`, or `short` in the short form.
    pub(crate) fn pick<T>(&self, full: T, short: T) -> T {
        if self.short { short } else { full }
    }

    /// How often a holder extends its lease (the default, a third).
    pub(crate) fn cadence(&self) -> Duration {
        self.lease / 3
    }
}

/// A scenario: what it is, and how it runs on one backend.
pub(crate) struct Scenario {
    pub(crate) info: ScenarioInfo,
    pub(crate) run: fn(&mut Server, &Settings) -> Outcome<Vec<Row>>,
}

/// Every scenario, in order.
pub(crate) fn all() -> Vec<Scenario> {
    vec![
        churn::SCENARIO,
        pause::SCENARIO,
        delayed_write::SCENARIO,
        kill::SCENARIO,
        lost_ack::SCENARIO,
        failover::SCENARIO,
        tokens::SCENARIO,
        clock_shift::SCENARIO,
        slow_renewal::SCENARIO,
        memcached_edges::SCENARIO,
        names::SCENARIO,
        secrets::SCENARIO,
        server_clock::SCENARIO,
        forced::SCENARIO,
    ]
}

/// The label of the semaphore [`kinds`] runs.
pub(crate) const SEMAPHORE_OF_3: &str = "semaphore of 3";

/// The time a scenario gives an administrative call (a listing, a forced
/// release, a read of the server's clock) it makes on a backend directly,
/// as a client gives its operation timeout.
pub(crate) const ADMIN_LIMIT: Duration = Duration::from_secs(30);

/// The lock kinds `server`'s backend grants, each as a list of the claims
/// its processes take: exclusive; readers with one writing process; a
/// semaphore of 3 ([`without_semaphores`] says why one is missing).
pub(crate) fn kinds(server: &Server) -> Vec<(String, Vec<ClaimSpec>)> {
    let mut kinds = vec![("exclusive".to_owned(), vec![ClaimSpec::Exclusive])];
    if server.kind.has_shared() {
        kinds.push((
            "reader-writer".to_owned(),
            vec![ClaimSpec::Exclusive, ClaimSpec::Shared],
        ));
    }
    if server.kind.semaphores().is_ok() {
        kinds.push((
            SEMAPHORE_OF_3.to_owned(),
            vec![ClaimSpec::Permit { limit: 3 }],
        ));
    }
    kinds
}

/// The row of scenario `id`'s semaphore `label` on a backend that grants
/// none, saying why; `None` on one that does.
pub(crate) fn without_semaphores(id: &'static str, server: &Server, label: &str) -> Option<Row> {
    let why = server.kind.semaphores().err()?;
    Some(not_applicable(id, server, label, why))
}

/// The row of scenario `id`, for lock kind `kind`, on a backend it does
/// not apply to, and why.
pub(crate) fn not_applicable(id: &'static str, server: &Server, kind: &str, why: &str) -> Row {
    Row {
        scenario: id,
        backend: server.kind.name(),
        kind: kind.into(),
        verdict: None,
        detail: format!("does not apply: {why}"),
        passed: true,
        overlaps_allowed: None,
        minimum: None,
        applies: false,
    }
}

/// A lock name of its own for each run.
pub(crate) fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), crate::clock::now_ns())
}

/// A holder process.
pub(crate) struct Worker {
    child: Child,
    pub(crate) events: PathBuf,
    /// How long `finish` waits before it counts the holder as hung.
    patience: Duration,
}

impl Worker {
    /// Starts a holder with `spec`.
    ///
    /// # Errors
    /// The binary cannot be started.
    pub(crate) fn spawn(settings: &Settings, spec: &Spec) -> Outcome<Worker> {
        Worker::spawn_with_env(settings, spec, &[])
    }

    /// Starts a holder with `spec` and these environment variables added
    /// (`LD_PRELOAD` of libfaketime and its settings, say).
    ///
    /// # Errors
    /// The binary cannot be started.
    pub(crate) fn spawn_with_env(
        settings: &Settings,
        spec: &Spec,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Outcome<Worker> {
        let child = Command::new(&settings.exe)
            .arg("worker")
            .arg(serde_json::to_string(spec)?)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| format!("cannot start {}: {error}", settings.exe.display()))?;
        Ok(Worker {
            child,
            events: spec.events.clone(),
            patience: settings.pick(Duration::from_secs(1200), Duration::from_secs(120)),
        })
    }

    /// Sends `signal` to the holder.
    pub(crate) fn signal(&self, signal: Signal) {
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process(pid, signal);
        }
    }

    /// Stops the holder (SIGSTOP) at a moment when it is not inside an
    /// operation on `store`: a holder stopped there would keep its lock on
    /// the counter, and every other holder out of the counter until it is
    /// continued.
    ///
    /// # Errors
    /// The holder did not stop within a second, or never stopped outside
    /// the store, or the store cannot be read.
    pub(crate) fn stop_outside(&self, store: &FencedStore) -> Outcome<()> {
        for _ in 0..1000 {
            self.signal(Signal::STOP);
            self.wait_stopped()?;
            if !store.is_busy()? {
                return Ok(());
            }
            self.signal(Signal::CONT);
            std::thread::sleep(Duration::from_millis(2));
        }
        Err("a holder was inside the fenced counter every time it was stopped".into())
    }

    /// Waits until the holder's process is stopped: `kill` only queues the
    /// signal.
    fn wait_stopped(&self) -> Outcome<()> {
        let stat = format!("/proc/{}/stat", self.child.id());
        let started = Instant::now();
        loop {
            let text = std::fs::read_to_string(&stat)?;
            let state = text.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            if state.is_some_and(|rest| rest.starts_with(['T', 't'])) {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(1) {
                return Err(format!("a holder did not stop within 1 s ({stat})").into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits until the holder's records show an event `wanted` accepts.
    ///
    /// # Errors
    /// None came within `limit`.
    pub(crate) fn wait_for(
        &self,
        limit: Duration,
        wanted: impl Fn(&Event) -> bool,
    ) -> Outcome<Event> {
        let started = Instant::now();
        loop {
            if let Some(event) = read_events(&self.events)?.into_iter().find(&wanted) {
                return Ok(event);
            }
            if started.elapsed() > limit {
                return Err(format!(
                    "no such event in {} within {limit:?}",
                    self.events.display()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for the holder to end. A holder that has not ended in the
    /// worker's patience is killed: a hung scenario becomes a failed row,
    /// never a campaign that waits for ever.
    ///
    /// # Errors
    /// It exited with a failure, or it hung.
    pub(crate) fn finish(mut self) -> Outcome<Vec<Event>> {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if started.elapsed() > self.patience {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(format!(
                    "a holder had not ended after {:?}, so it was killed ({})",
                    self.patience,
                    self.events.display()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if !status.success() {
            return Err(format!("a holder failed: {status}").into());
        }
        read_events(&self.events)
    }

    /// Kills the holder outright and reaps it.
    pub(crate) fn kill(mut self) -> Vec<Event> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        read_events(&self.events).unwrap_or_default()
    }

    /// Whether the holder has ended.
    pub(crate) fn has_ended(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A spec for one holder of `name` on `server`, with its records in
/// `dir`; callers change what they need.
pub(crate) fn spec(
    server: &Server,
    settings: &Settings,
    name: &str,
    dir: &Path,
    id: usize,
) -> Spec {
    Spec {
        url: server.url(),
        name: name.to_owned(),
        claim: ClaimSpec::Exclusive,
        tasks: 1,
        cycles: 1,
        lease_ms: settings.lease.as_millis() as u64,
        hold_ms: 0,
        wait_ms: 30_000,
        store: dir.join("store"),
        events: dir.join(format!("events-{id}.jsonl")),
        write_when_lost: false,
        await_loss_ms: None,
        stop_at_ns: None,
    }
}

/// A directory of its own under the server's scratch space.
///
/// # Errors
/// It cannot be made.
pub(crate) fn run_dir(server: &Server, name: &str) -> Outcome<PathBuf> {
    let dir = server.scratch().join(name);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The `p`-th percentile of `values` (sorted in place), if any.
pub(crate) fn percentile(values: &mut [Duration], p: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let index = ((values.len() as f64 * p / 100.0).ceil() as usize).clamp(1, values.len()) - 1;
    Some(values[index])
}

/// A duration as milliseconds for a report, with a decimal below 10 ms.
pub(crate) fn ms(duration: Duration) -> String {
    let millis = duration.as_secs_f64() * 1000.0;
    if millis < 10.0 {
        format!("{millis:.1} ms")
    } else {
        format!("{millis:.0} ms")
    }
}

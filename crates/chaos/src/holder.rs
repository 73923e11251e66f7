//! A holder process: the `distlock-chaos worker` a scenario starts, signals
//! and waits for, and the spec it runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

use crate::campaign::Server;
use crate::fenced::FencedStore;
use crate::outcome::Outcome;
use crate::settings::Settings;
use crate::worker::{ClaimSpec, Event, Spec, read_events};

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
        resume_file: None,
    }
}

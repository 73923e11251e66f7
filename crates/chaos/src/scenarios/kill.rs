//! R4: a holder is killed outright (SIGKILL); its lock must not be granted
//! again before its lease can have ended, and should be soon after.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Scenario;
use super::kinds::without_semaphores;
use crate::campaign::Kind;
use crate::campaign::Server;
use crate::clock::now_ns;
use crate::fenced::FencedStore;
use crate::figures::{ms, percentile};
use crate::holder::{Worker, spec};
use crate::judge::{Verdict, judge};
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::{run_dir, unique};
use crate::settings::Settings;
use crate::worker::{ClaimSpec, Event};

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R4",
        title: "A holder killed with SIGKILL",
        what: "A holder is killed while a second one waits for the name; 100 runs per kind \
               (short form: 5), 10 at a time. Kinds: exclusive (a writer waits); reader-writer \
               (a reader is killed, a writer waits); a semaphore of 2 (one of two holders is \
               killed, a third waits). Must hold: never granted again before the dead holder's \
               lease can have ended (its last extension may have been up to one cadence, a \
               third of the lease, before the kill), and the re-grant's p99 within the \
               backend's documented bound plus one poll, and 25 ms for the attempt that \
               follows the poll and its record. On the file backend, and in PostgreSQL's \
               advisory mode, a lock ends with its holder's process (its flock; its \
               connection, whose end the server reads at once), so it may be granted again \
               at once after the kill. On every backend a grant before the kill is an \
               overlap. A backend without semaphores says so. Also, per backend, `distlock \
               run` is killed while its command runs: the command must not outlive it.",
        untimed: false,
    },
    run,
};

/// The claims of the holders that are there when one is killed (the first
/// is the one killed), and the waiter's.
fn cases(server: &Server) -> Vec<(&'static str, Vec<ClaimSpec>, ClaimSpec)> {
    let mut cases = vec![(
        "exclusive",
        vec![ClaimSpec::Exclusive],
        ClaimSpec::Exclusive,
    )];
    if server.kind.has_shared() {
        cases.push((
            "reader-writer",
            vec![ClaimSpec::Shared],
            ClaimSpec::Exclusive,
        ));
    }
    if server.kind.semaphores().is_ok() {
        let permit = ClaimSpec::Permit { limit: 2 };
        cases.push((SEMAPHORE_OF_2, vec![permit, permit], permit));
    }
    cases
}

/// The label of the semaphore [`cases`] runs.
const SEMAPHORE_OF_2: &str = "semaphore of 2";

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    let mut rows = Vec::new();
    let (command_ended, child_check) = match &settings.cli {
        Some(cli) => command_outlives_run(server, cli)?,
        None => (
            true,
            "the `distlock` binary was not built, so `distlock run` was not checked".into(),
        ),
    };
    for (label, holders, waiter) in cases(server) {
        let runs: usize = settings.pick(100, 5);
        let batch = settings.pick(10, 5);
        let mut total = Verdict::default();
        let mut latencies = Vec::new();
        let mut early = 0;
        for _ in 0..runs.div_ceil(batch) {
            for (verdict, regrant) in kill_batch(server, settings, batch, &holders, waiter)? {
                total.add(&verdict);
                match regrant {
                    Some(Regrant::AfterKill(latency)) => {
                        early += usize::from(latency < earliest_regrant(server.kind, settings));
                        latencies.push(latency);
                    }
                    Some(Regrant::BeforeKill) => early += 1,
                    None => {}
                }
            }
        }
        let ran = runs.div_ceil(batch) * batch;
        let regranted = latencies.len();
        let min = latencies.iter().min().copied();
        let p50 = percentile(&mut latencies, 50.0);
        let p99 = percentile(&mut latencies, 99.0);
        let bound = documented_bound(server.kind, settings);
        let passed = command_ended
            && early == 0
            && regranted == ran
            && p99.is_some_and(|p99| p99 <= bound)
            && total.overlaps == 0
            && total.token_regressions == 0
            && total.lost_updates == 0;
        rows.push(Row {
            scenario: "R4",
            backend: server.kind.name(),
            kind: label.into(),
            verdict: Some(total),
            detail: format!(
                "re-granted in {regranted} of {ran} runs, {early} before the lease could have \
                 ended (earliest allowed {}); after the kill: min {}, p50 {}, p99 {} (bound {}); {child_check}",
                ms(earliest_regrant(server.kind, settings)),
                min.map_or("—".into(), ms),
                p50.map_or("—".into(), ms),
                p99.map_or("—".into(), ms),
                ms(bound),
            ),
            passed,
            overlaps_allowed: None,
            minimum: minimum(regranted == ran, || {
                format!("the lock was granted again after the kill in {regranted} of {ran} runs")
            }),
            applies: true,
        });
    }
    rows.extend(without_semaphores("R4", server, SEMAPHORE_OF_2));
    Ok(rows)
}

/// When the waiter was granted the name.
enum Regrant {
    /// This long after the kill.
    AfterKill(Duration),
    /// Before the kill, while the holder held it: an overlap.
    BeforeKill,
}

/// What a re-grant may take beyond the poll that found the lock free.
const ATTEMPT_ALLOWANCE: Duration = Duration::from_millis(25);

/// The earliest a dead holder's lock may be granted again after the kill:
/// at once where a lock ends with its holder's process; otherwise its
/// lease less a cadence, since its last extension may have been one
/// cadence before the kill.
pub(super) fn earliest_regrant(kind: Kind, settings: &Settings) -> Duration {
    if kind.ends_with_holder() {
        Duration::ZERO
    } else {
        settings.lease - settings.cadence()
    }
}

/// The documented bound on a re-grant after the kill, plus one poll, and
/// the time of the attempt that follows the poll: the latency runs from
/// the kill to the waiter's record of its grant.
pub(super) fn documented_bound(kind: Kind, settings: &Settings) -> Duration {
    kind.regrant_bound(settings.lease)
        + distlock::LockOptions::DEFAULT_BACKOFF_MAX
        + ATTEMPT_ALLOWANCE
}

fn kill_batch(
    server: &Server,
    settings: &Settings,
    batch: usize,
    holders: &[ClaimSpec],
    waiter: ClaimSpec,
) -> Outcome<Vec<(Verdict, Option<Regrant>)>> {
    let mut runs = Vec::new();
    for _ in 0..batch {
        let name = unique("r4");
        let dir = run_dir(server, &name)?;
        let mut held = Vec::new();
        for (id, claim) in holders.iter().enumerate() {
            let mut holder = spec(server, settings, &name, &dir, id);
            holder.claim = *claim;
            holder.hold_ms = 600_000;
            let worker = Worker::spawn(settings, &holder)?;
            worker.wait_for(Duration::from_secs(60), |event| {
                matches!(event, Event::Acquired { .. })
            })?;
            held.push(worker);
        }
        let mut waiting = spec(server, settings, &name, &dir, holders.len());
        waiting.claim = waiter;
        runs.push((dir, held, Worker::spawn(settings, &waiting)?));
    }
    // The waiters have tried at least once, and found the names held.
    std::thread::sleep(Duration::from_millis(500));
    let mut killed = Vec::new();
    for (dir, mut held, waiter) in runs {
        let victim = held.remove(0);
        let at = now_ns();
        let events = victim.kill();
        killed.push((dir, held, waiter, at, events));
    }
    let mut outcomes = Vec::new();
    for (dir, held, waiter, killed_at, mut events) in killed {
        let waited = waiter.finish()?;
        let regrant = waited.iter().find_map(|event| match event {
            Event::Acquired { at_ns, .. } => Some(match at_ns.checked_sub(killed_at) {
                Some(after) => Regrant::AfterKill(Duration::from_nanos(after)),
                None => Regrant::BeforeKill,
            }),
            _ => None,
        });
        events.extend(waited);
        for other in held {
            events.extend(other.kill());
        }
        let mut verdict = judge(&events, &FencedStore::open(&dir.join("store"))?)?;
        // The killed holder never recorded an end, so the judge cannot see
        // it overlap the waiter.
        verdict.overlaps += usize::from(matches!(regrant, Some(Regrant::BeforeKill)));
        outcomes.push((verdict, regrant));
    }
    Ok(outcomes)
}

/// Kills a `distlock run` whose command is running, and says whether the
/// command outlived it.
fn command_outlives_run(server: &Server, cli: &Path) -> Outcome<(bool, String)> {
    let name = unique("r4-run");
    let dir = run_dir(server, &name)?;
    let pid_file = dir.join("command.pid");
    let script = format!("echo $$ > '{}'; exec sleep 1000", pid_file.display());
    let mut run = Command::new(cli)
        .args([
            "run",
            &name,
            "--backend",
            &server.url(),
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let started = Instant::now();
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
        {
            break pid;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = run.kill();
            let _ = run.wait();
            return Err("`distlock run` never started its command".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = run.kill();
    let _ = run.wait();
    let killed = Instant::now();
    while !has_ended(pid) {
        if killed.elapsed() > Duration::from_secs(10) {
            return Ok((
                false,
                format!(
                    "the command of a killed `distlock run` was still running 10 s later (pid {pid})"
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((
        true,
        "the command of a killed `distlock run` ended with it".into(),
    ))
}

/// Whether `pid` has ended: gone, or a zombie nobody reaps (this
/// container's init does not).
fn has_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

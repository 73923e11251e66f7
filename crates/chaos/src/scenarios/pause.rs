//! R2: a holder is paused (SIGSTOP) for three leases while someone else
//! takes the lock; when it resumes, its write must be turned away.

use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::Scenario;
use crate::campaign::Server;
use crate::clock::now_ns;
use crate::fenced::{FencedStore, Op};
use crate::figures::{ms, percentile};
use crate::holder::{Worker, spec};
use crate::holdings::holdings;
use crate::judge::{Verdict, judge};
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::{run_dir, unique};
use crate::settings::Settings;
use crate::worker::Event;

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R2",
        title: "A holder paused for 3× the lease",
        what: "A holder reads the fenced counter and is SIGSTOPped for three leases; another \
               holder then takes the lock, reads and writes; the first is continued and writes \
               without looking at `lost()`, as a holder that cannot know would. 100 runs (short \
               form: 5), 10 at a time on names of their own. Must hold: the stale write is \
               turned away in every run, `lost()` fires on resume, 0 lost updates. The paused \
               holder's interval overlaps the next one's by construction (it is frozen, not \
               wrong): that is what fencing tokens are for. On the file backend a paused \
               process keeps its lock, so nobody else is granted. In PostgreSQL's advisory \
               mode the lease is the server's `idle_session_timeout`: it ends the paused \
               holder's silent connection, and the lock with it, a lease after its last check.",
        untimed: false,
    },
    run,
};

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    let runs: usize = settings.pick(100, 5);
    let batch = settings.pick(10, 5);
    let mut total = Verdict::default();
    let (mut rejected, mut fired, mut others_granted) = (0, 0, 0);
    let mut detection = Vec::new();
    for _ in 0..runs.div_ceil(batch) {
        let outcome = pause_batch(server, settings, batch)?;
        for run in outcome {
            total.add(&run.verdict);
            rejected += usize::from(run.stale_write_rejected);
            others_granted += usize::from(run.other_granted);
            if let Some(after) = run.lost_after_resume {
                fired += 1;
                detection.push(after);
            }
        }
    }
    let ran = runs.div_ceil(batch) * batch;
    let p50 = percentile(&mut detection, 50.0).map_or("—".into(), ms);
    let p99 = percentile(&mut detection, 99.0).map_or("—".into(), ms);
    let (passed, detail) = if server.kind.process_bound() {
        (
            others_granted == 0 && total.lost_updates == 0,
            format!(
                "process-bound: the paused holder kept its lock, and the other holder was \
                 granted in {others_granted} of {ran} runs"
            ),
        )
    } else {
        (
            rejected == ran && fired == ran && total.lost_updates == 0,
            format!(
                "stale write turned away in {rejected} of {ran} runs; `lost()` fired on resume \
                 in {fired} of {ran}, p50 {p50} and p99 {p99} after SIGCONT (lease {})",
                ms(settings.lease)
            ),
        )
    };
    let minimum = minimum(
        if server.kind.process_bound() {
            total.acquisitions >= ran
        } else {
            fired == ran
        },
        || {
            if server.kind.process_bound() {
                format!("{} grants in {ran} paused runs", total.acquisitions)
            } else {
                format!("`lost()` fired on resume in {fired} of {ran} paused runs")
            }
        },
    );
    Ok(vec![Row {
        scenario: "R2",
        backend: server.kind.name(),
        kind: "exclusive".into(),
        verdict: Some(total),
        detail,
        passed,
        // A paused holder's validity ends at its deadline: the next
        // holder, let in after the lease ran out on the server, never
        // overlaps it.
        overlaps_allowed: None,
        minimum,
        applies: true,
    }])
}

struct PauseRun {
    verdict: Verdict,
    stale_write_rejected: bool,
    other_granted: bool,
    lost_after_resume: Option<Duration>,
}

fn pause_batch(server: &Server, settings: &Settings, batch: usize) -> Outcome<Vec<PauseRun>> {
    let lease_ms = settings.lease.as_millis() as u64;
    let mut paused = Vec::new();
    for _ in 0..batch {
        let name = unique("r2");
        let dir = run_dir(server, &name)?;
        let mut first = spec(server, settings, &name, &dir, 0);
        first.hold_ms = lease_ms;
        first.write_when_lost = true;
        first.await_loss_ms = Some(2 * lease_ms);
        let worker = Worker::spawn(settings, &first)?;
        worker.wait_for(Duration::from_secs(60), |event| {
            matches!(event, Event::Acquired { .. })
        })?;
        // Paused once it has read, outside the counter's own lock.
        let store = FencedStore::open(&dir.join("store"))?;
        let started = Instant::now();
        while !store.log()?.iter().any(|entry| entry.op == Op::Read) {
            if started.elapsed() > Duration::from_secs(60) {
                return Err("the first holder never read the fenced counter".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        worker.stop_outside(&store)?;
        paused.push((name, dir, worker));
    }
    std::thread::sleep(settings.lease * 3);
    let mut others = Vec::new();
    for (name, dir, _) in &paused {
        let mut second = spec(server, settings, name, dir, 1);
        // A process-bound lock is never granted while its holder lives:
        // waiting longer would only slow the run.
        second.wait_ms = if server.kind.process_bound() {
            2 * lease_ms
        } else {
            30_000
        };
        others.push(Worker::spawn(settings, &second)?);
    }
    let mut other_events = Vec::new();
    for other in others {
        other_events.push(other.finish()?);
    }
    let mut runs = Vec::new();
    for ((_, dir, worker), other) in paused.into_iter().zip(other_events) {
        worker.signal(Signal::CONT);
        let resumed = now_ns();
        let mut events = worker.finish()?;
        let first = holdings(&events);
        let stale_write_rejected = first.iter().any(|holding| holding.write_ok == Some(false));
        let lost_after_resume = first
            .iter()
            .find_map(|holding| holding.lost_ns)
            .map(|lost| Duration::from_nanos(lost.saturating_sub(resumed)));
        let other_granted = other
            .iter()
            .any(|event| matches!(event, Event::Acquired { .. }));
        events.extend(other);
        runs.push(PauseRun {
            verdict: judge(&events, &FencedStore::open(&dir.join("store"))?)?,
            stale_write_rejected,
            other_granted,
            lost_after_resume,
        });
    }
    Ok(runs)
}

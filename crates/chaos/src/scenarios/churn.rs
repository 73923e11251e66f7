//! R1: holders churn through one name while the server restarts.

use std::time::{Duration, Instant};

use super::Scenario;
use super::kinds::{SEMAPHORE_OF_3, kinds, without_semaphores};
use crate::answers::OnRestart;
use crate::campaign::Server;
use crate::clock::now_ns;
use crate::fenced::FencedStore;
use crate::holder::{Worker, spec};
use crate::holdings::holdings;
use crate::judge::{OverlapCause, judge, regression_example};
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::{run_dir, unique};
use crate::settings::Settings;
use crate::worker::ClaimSpec;

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R1",
        title: "Churn with server restarts",
        what: "4 processes × 4 tasks take one name 10,000 times in all, or as many times as \
               5 minutes allow where the backend is slower (short form: 2 × 2, 200), each \
               read-incrementing-writing the fenced counter, while the server is \
               killed and restarted on the same data every 5 s (short form: 0.5 s). Every kind \
               the backend grants runs: exclusive; reader-writer (processes alternate between \
               writers and readers); a semaphore of 3. Must hold: 0 overlaps among valid \
               holders, 0 lost updates, 0 token regressions. memcached, Redis without \
               persistence, and the object stores' emulators (Azurite writes its index every \
               5 s, moto keeps nothing) lose their locks when they restart, so their \
               overlaps are \
               reported, not forbidden; the fenced counter must still lose no update (Redis \
               with an append-only file synced on every write keeps them; so does Redis in quorum mode, \
               where the restart reaches one server of three and the other two keep every \
               lock). Redis in cluster mode restarts the master of every slot: it comes \
               back empty, its overlaps are reported, and the next restart is counted from \
               when it serves again, 2 s after it starts. PostgreSQL's advisory mode loses \
               them too, but each \
               holder's `lost()` fires as its connection ends, before the server is back: its \
               overlaps stay forbidden. A backend without semaphores says so.",
        untimed: false,
    },
    run,
};

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    let mut rows = Vec::new();
    for (label, claims) in kinds(server) {
        rows.push(churn(server, settings, label, &claims)?);
    }
    rows.extend(without_semaphores("R1", server, SEMAPHORE_OF_3));
    Ok(rows)
}

/// How long one kind's churn may last in the full form.
const FULL_FORM_LIMIT: Duration = Duration::from_secs(300);

/// How often a churn under way says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// The grants the workers have recorded so far.
fn acquisitions_so_far(workers: &[Worker]) -> usize {
    workers
        .iter()
        .filter_map(|worker| std::fs::read_to_string(&worker.events).ok())
        .map(|events| events.matches(r#""event":"acquired""#).count())
        .sum()
}

fn churn(
    server: &mut Server,
    settings: &Settings,
    label: String,
    claims: &[ClaimSpec],
) -> Outcome<Row> {
    let processes = settings.pick(4, 2);
    let tasks = settings.pick(4, 2);
    let total = settings.pick(10_000, 200);
    // A backend whose contended rate is bound by its disk (etcd fsyncs
    // every write) would take far longer than the others: the full form
    // stops after this long, with the acquisitions made by then.
    let stop_at_ns = (!settings.short).then(|| now_ns() + FULL_FORM_LIMIT.as_nanos() as u64);
    let name = unique("r1");
    let dir = run_dir(server, &name)?;
    let mut workers = Vec::new();
    for process in 0..processes {
        let mut spec = spec(server, settings, &name, &dir, process);
        spec.claim = claims[process % claims.len()];
        spec.tasks = tasks;
        spec.cycles = total / (processes * tasks);
        spec.stop_at_ns = stop_at_ns;
        // Semaphore holders must stay a moment for others to join them.
        spec.hold_ms = match spec.claim {
            ClaimSpec::Permit { .. } => 2,
            _ => 0,
        };
        workers.push(Worker::spawn(settings, &spec)?);
    }
    let every = settings.pick(Duration::from_secs(5), Duration::from_millis(500));
    let mut restarts = 0;
    let mut last = Instant::now();
    let mut told = Instant::now();
    while !workers.iter_mut().all(Worker::has_ended) {
        std::thread::sleep(Duration::from_millis(20));
        if server.kind.has_server() && last.elapsed() >= every {
            server.restart()?;
            restarts += 1;
            last = Instant::now();
        }
        // A churn that stalls shows how far it got before a harness's
        // timeout ends it.
        if told.elapsed() >= PROGRESS_EVERY {
            eprintln!(
                "distlock-chaos: R1 on {}: {} of {total} acquisitions so far, {restarts} restarts",
                server.kind.name(),
                acquisitions_so_far(&workers)
            );
            told = Instant::now();
        }
    }
    let mut events = Vec::new();
    for worker in workers {
        events.extend(worker.finish()?);
    }
    let verdict = judge(&events, &FencedStore::open(&dir.join("store"))?)?;
    let overlaps_tolerated = (restarts > 0 && server.kind.on_restart() == OnRestart::Forgotten)
        .then_some(OverlapCause::ServerForgot);
    let passed = verdict.lost_updates == 0
        && verdict.token_regressions == 0
        && verdict.overlaps_fit(overlaps_tolerated);
    let mut detail = if server.kind.has_server() {
        format!("{restarts} server restarts")
    } else {
        "no server to restart: churn only".to_owned()
    };
    if stop_at_ns.is_some_and(|stop| now_ns() >= stop) && verdict.acquisitions < total {
        detail.push_str(&format!(
            "; stopped after {} s with {} of {total} acquisitions",
            FULL_FORM_LIMIT.as_secs(),
            verdict.acquisitions
        ));
    }
    if let Some(ClaimSpec::Permit { limit }) = claims.first() {
        detail.push_str(&format!(
            "; at most {} of {limit} held at once",
            verdict.most_at_once
        ));
    }
    if server.kind.on_restart() == OnRestart::EndedAndTold {
        detail.push_str(&format!(
            "; holdings whose `lost()` fired as a restart ended their connection: {}",
            verdict.losses
        ));
    }
    if let Some(example) = regression_example(&holdings(&events)) {
        detail.push_str(&format!("; {example}"));
    }
    if overlaps_tolerated.is_some() && verdict.overlaps > 0 {
        detail.push_str("; overlaps follow restarts that lost the locks (reported, not forbidden)");
    }
    // The minimum: a churn that granted too little, or whose waits failed
    // too often, proved little of exclusion. The full form may stop at its
    // time limit (etcd fsyncs every write), so it asks for a tenth.
    let least = settings.pick(total / 10, total / 2);
    let most_failed = total / 10;
    let minimum = minimum(
        verdict.acquisitions >= least && verdict.failed <= most_failed,
        || {
            format!(
                "{} acquisitions and {} failed waits, where at least {least} and at \
                     most {most_failed} were asked for",
                verdict.acquisitions, verdict.failed
            )
        },
    );
    Ok(Row {
        scenario: "R1",
        backend: server.kind.name(),
        kind: label,
        verdict: Some(verdict),
        detail,
        passed,
        overlaps_allowed: overlaps_tolerated,
        minimum,
        applies: true,
    })
}

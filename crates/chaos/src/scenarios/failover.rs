//! R6: the server is killed and restarted on the same data while a holder
//! is in the middle of a long holding.

use std::time::Duration;

use super::Scenario;
use super::kinds::{SEMAPHORE_OF_3, kinds, without_semaphores};
use super::network::does_not_apply;
use crate::answers::OnRestart;
use crate::campaign::Server;
use crate::clock::now_ns;
use crate::fenced::FencedStore;
use crate::holder::{Worker, spec};
use crate::holdings::{Holding, holdings};
use crate::judge::{OverlapCause, judge};
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::{run_dir, unique};
use crate::settings::Settings;
use crate::worker::{ClaimSpec, Event, read_events};

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R6",
        title: "Failover: the server restarted on the same data mid-hold",
        what: "3 processes take one name in turn and hold it 250 ms each time (between their \
               read and their write of the fenced counter), while the server is killed \
               (SIGKILL) and restarted on the same data 10 times (short form: 2, exclusive \
               only), each time within 100 ms of a grant, so that a holder is mid-hold. Every \
               kind the backend grants runs. Must hold: 0 overlaps among valid holders, 0 token \
               regressions, 0 lost updates, and every restart hit a holding. memcached, Redis \
               without persistence, and the object stores' emulators lose their locks on \
               restart: their overlaps are \
               reported (allowed), and the fenced counter must still lose no update. PostgreSQL's advisory mode loses them too, \
               but tells: each holding a restart hit must see its `lost()` fire (as the \
               restart ends its connection), and overlaps stay forbidden. A backend without \
               semaphores says so (full form). Redis in quorum mode restarts one server of \
               three, and the other two keep every lock: its overlaps stay forbidden. Redis in \
               cluster mode restarts the master of every slot, which comes back empty \
               (overlaps reported) and refuses commands for 2 s as it rejoins: each restart \
               is allowed that much more time. The file backend has no server, so this does \
               not apply to it.",
        untimed: false,
    },
    run,
};

/// How long each holding lasts.
const HOLD: Duration = Duration::from_millis(250);
/// A restart is made at most this long after a grant, so that it falls
/// inside the holding.
const FRESH_GRANT: Duration = Duration::from_millis(100);
/// The least time between two restarts, for holders to come back.
const BETWEEN: Duration = Duration::from_millis(800);
/// The time allowed per restart, beyond the backend's own downtime: the
/// holders stop taking the name once the restarts should be over.
const PER_RESTART: Duration = Duration::from_secs(2);

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    if !server.kind.has_server() {
        return Ok(vec![does_not_apply(
            "R6",
            server,
            &format!(
                "{}; there is no server to fail over",
                server.kind.without_server()
            ),
        )]);
    }
    let mut chosen = kinds(server);
    if settings.short {
        chosen.truncate(1);
    }
    let mut rows = Vec::new();
    for (label, claims) in chosen {
        rows.push(failover(server, settings, label, &claims)?);
    }
    if !settings.short {
        rows.extend(without_semaphores("R6", server, SEMAPHORE_OF_3));
    }
    Ok(rows)
}

fn failover(
    server: &mut Server,
    settings: &Settings,
    label: String,
    claims: &[ClaimSpec],
) -> Outcome<Row> {
    let planned = settings.pick(10, 2);
    let processes = 3;
    let name = unique("r6");
    let dir = run_dir(server, &name)?;
    let started = now_ns();
    let per_restart = PER_RESTART + server.kind.restart_downtime();
    let stop_at = started + nanos(Duration::from_secs(1) + per_restart * planned as u32);
    let mut workers = Vec::new();
    for process in 0..processes {
        let mut spec = spec(server, settings, &name, &dir, process);
        spec.claim = claims[process % claims.len()];
        spec.cycles = 100_000;
        spec.hold_ms = HOLD.as_millis() as u64;
        spec.stop_at_ns = Some(stop_at);
        workers.push(Worker::spawn(settings, &spec)?);
    }
    // Restart within FRESH_GRANT of a grant, while there is time left for
    // the holders to come back.
    let mut restarts = Vec::new();
    let mut last = started;
    while restarts.len() < planned && now_ns() + nanos(per_restart / 2) < stop_at {
        std::thread::sleep(Duration::from_millis(5));
        if now_ns() < last + nanos(BETWEEN) {
            continue;
        }
        if latest_open_grant(&workers)?.is_some_and(|at| now_ns() < at + nanos(FRESH_GRANT)) {
            let at = now_ns();
            server.restart()?;
            restarts.push(at);
            last = now_ns();
        }
    }
    let mut events = Vec::new();
    for worker in workers {
        events.extend(worker.finish()?);
    }
    let verdict = judge(&events, &FencedStore::open(&dir.join("store"))?)?;
    let held = holdings(&events);
    let spans = |holding: &Holding, at: u64| {
        holding.start_ns <= at && holding.end_ns.is_none_or(|end| end > at)
    };
    let hit = restarts
        .iter()
        .filter(|&&at| held.iter().any(|holding| spans(holding, at)))
        .count();
    // Holdings a restart hit whose `lost()` never fired.
    let untold = held
        .iter()
        .filter(|holding| {
            holding.lost_ns.is_none() && restarts.iter().any(|&at| spans(holding, at))
        })
        .count();
    let on_restart = server.kind.on_restart();
    let overlaps_allowed =
        (on_restart == OnRestart::Forgotten).then_some(OverlapCause::ServerForgot);
    let safe = verdict.lost_updates == 0
        && verdict.token_regressions == 0
        && verdict.overlaps_fit(overlaps_allowed);
    let told = on_restart != OnRestart::EndedAndTold || untold == 0;
    let mut detail = format!(
        "{} of {planned} restarts made, {hit} of them while a holder held; {} holdings lost",
        restarts.len(),
        verdict.losses
    );
    if on_restart == OnRestart::EndedAndTold {
        detail.push_str(&format!(
            "; {untold} holdings a restart hit without `lost()` firing"
        ));
    }
    if overlaps_allowed.is_some() && verdict.overlaps > 0 {
        detail.push_str(
            "; overlaps follow restarts that lost the locks (the server keeps none: reported, \
             not forbidden)",
        );
    }
    Ok(Row {
        scenario: "R6",
        backend: server.kind.name(),
        kind: label,
        passed: safe && told && restarts.len() == planned && hit == planned,
        verdict: Some(verdict),
        detail,
        overlaps_allowed,
        minimum: minimum(restarts.len() == planned && hit == planned, || {
            format!(
                "{} of {planned} restarts made, {hit} of them while a holder held",
                restarts.len()
            )
        }),
        applies: true,
    })
}

/// The grant time of the latest holding that has not ended yet, among the
/// workers' records.
fn latest_open_grant(workers: &[Worker]) -> Outcome<Option<u64>> {
    let mut latest = None;
    for worker in workers {
        // A holder's holdings follow one another: it holds now when its
        // last record is a grant.
        let events = read_events(&worker.events)?;
        if let Some(Event::Acquired { at_ns, .. }) = events.last() {
            latest = latest.max(Some(*at_ns));
        }
    }
    Ok(latest)
}

fn nanos(duration: Duration) -> u64 {
    duration.as_nanos() as u64
}

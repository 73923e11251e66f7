//! R5: a holder's acquisition loses its answer. The lock client must then
//! release the attempt by its identity, so that the name is either held by
//! exactly one holder or free, and another holder gets it at once when the
//! first gives up or releases, not when a forgotten lease runs out.
//!
//! The holder whose answer is lost is a lock client of the campaign's own
//! process, not a worker: the fault must be set right before its
//! acquisition (a worker's own connection set-up would take the proxy's one
//! shot), and its client must live on after a failed attempt, which is when
//! it releases the attempt in the background. The holder that comes next is
//! a worker, connected directly.

use std::time::Duration;

use distlock::{LockClient, LockName, LockOptions};
use distlock_faultproxy::Fault;
use mongodb::bson::doc;
use tokio::runtime::Runtime;

use super::Scenario;
use super::network::{Proxies, does_not_apply, proxy, runtime};
use crate::answers::LostAnswer as Loss;
use crate::campaign::Server;
use crate::clock::{instant_ns, now_ns};
use crate::fenced::FencedStore;
use crate::figures::{ms, percentile};
use crate::holder::{Worker, spec};
use crate::judge::{Verdict, judge};
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::{run_dir, unique};
use crate::settings::Settings;
use crate::worker::{ClaimSpec, Event, Release};

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R5",
        title: "A lost acknowledgement",
        what: "A lock client tries once for a name, and the answer to its acquisition is lost. \
               MongoDB, two sub-cases: the `failCommand` fail point closes the connection of \
               the client's `findAndModify` (SecantusDB, like mongod, then does not run the \
               command; alternately once, which the driver's retry gets past, and twice, which \
               fails the attempt); and the fault proxy lets the `findAndModify` reach the \
               server, which applies it, and resets the connection before the reply comes back. \
               memcached: the proxy's reset after the request, on the acquisition's add. \
               Object storage: the same, kept for the take's first write (its `PUT`; the \
               `GET` before it passes). \
               PostgreSQL's advisory mode: the same, on the statement that takes the lock, on a \
               name given its key beforehand (its first statement would otherwise only find \
               that it has none); the reset connection was the session to hold the lock. Redis \
               in quorum mode: the same, on two servers of three, so that the attempt cannot \
               count on a majority, and the third server's copy must be rolled back. Redis in \
               cluster mode: the same, on the master of every slot, which announces the proxy \
               as its address while the proxy stands (the cluster client goes where the \
               cluster says), so the second holder passes through the proxy too, once its shot \
               is spent and the fault cleared. If \
               granted, the client reads and writes the fenced counter, holds half a second and \
               releases, while a second holder (a process of its own, connected directly) \
               waits; if not, the second holder comes once the client has given up. The first \
               client's lease is ten leases long, so that a grant left behind could not go \
               unnoticed. 20 runs per sub-case (short form: 3). Must hold: never two grants at \
               once (0 overlaps), 0 lost updates, 0 token regressions, and no leaked lease: \
               the second holder is granted within a quarter of that long lease after the \
               first released or gave up. The file backend has no connection whose answer \
               could be lost, so this does not apply to it.",
        untimed: false,
    },
    run,
};

/// The `appName` of the client whose answers are lost, to which the fail
/// point is confined.
const VICTIM_APP: &str = "distlock-chaos-r5";

/// How long a granted client holds the name, while the second holder
/// starts and waits.
const HOLD: Duration = Duration::from_millis(500);

/// A sub-case's label in the report.
fn label(loss: Loss) -> &'static str {
    match loss {
        Loss::FailPoint => "exclusive, connection closed on `findAndModify` (fail point)",
        Loss::ResetAfterRequest => "exclusive, reply lost after the request (proxy)",
        Loss::ResetAfterWrite => "exclusive, reply lost after the first write (proxy)",
    }
}

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    let losses = server.kind.lost_answers();
    if losses.is_empty() {
        return Ok(vec![does_not_apply(
            "R5",
            server,
            &format!(
                "{}; no network answer can be lost",
                server.kind.without_server()
            ),
        )]);
    }
    let runtime = runtime()?;
    let mut rows = Vec::new();
    for &loss in losses {
        rows.push(lost_acks(&runtime, server, settings, loss)?);
    }
    Ok(rows)
}

/// How the attempt whose answer was lost came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Granted after all: the driver's retry, or the backend, recovered it.
    Granted,
    /// The name was found held.
    FoundHeld,
    /// The attempt failed, and the client gave up.
    GaveUp,
}

struct LostAckRun {
    verdict: Verdict,
    answer: Answer,
    /// Whether the proxy's reset was spent (`None` for the fail point).
    shot_taken: Option<bool>,
    /// From the first client's release, or its giving up, to the second
    /// holder's grant.
    next_grant: Option<Duration>,
}

/// The first client, and what makes its answers get lost.
struct Victim {
    client: LockClient,
    proxy: Option<Proxies>,
    /// The fault its proxy is given before each attempt.
    shot: Fault,
    admin: Option<mongodb::Client>,
}

fn lost_acks(runtime: &Runtime, server: &Server, settings: &Settings, loss: Loss) -> Outcome<Row> {
    let runs: usize = settings.pick(20, 3);
    let long_lease = 10 * settings.lease;
    let victim = victim(runtime, server, long_lease, loss)?;
    let mut total = Verdict::default();
    let mut answers = Vec::new();
    let mut latencies = Vec::new();
    let (mut shots, mut regranted) = (0, 0);
    for run in 0..runs {
        // The fail point fires once (the driver's retry gets past it) or
        // twice (the attempt fails), in turn.
        let times = if run % 2 == 0 { 1 } else { 2 };
        let outcome = lost_ack(runtime, server, settings, &victim, long_lease, times)?;
        total.add(&outcome.verdict);
        answers.push(outcome.answer);
        shots += usize::from(outcome.shot_taken.unwrap_or(true));
        if let Some(latency) = outcome.next_grant {
            regranted += 1;
            latencies.push(latency);
        }
    }
    let count = |answer| answers.iter().filter(|found| **found == answer).count();
    let max = latencies.iter().max().copied();
    let p50 = percentile(&mut latencies, 50.0);
    let bound = long_lease / 4;
    let passed = shots == runs
        && regranted == runs
        && max.is_some_and(|max| max <= bound)
        && total.overlaps == 0
        && total.lost_updates == 0
        && total.token_regressions == 0;
    let shot = match loss {
        Loss::FailPoint => String::new(),
        Loss::ResetAfterRequest | Loss::ResetAfterWrite => {
            format!("the proxy's reset was spent in {shots} of {runs}; ")
        }
    };
    Ok(Row {
        scenario: "R5",
        backend: server.kind.name(),
        kind: label(loss).into(),
        verdict: Some(total),
        detail: format!(
            "{shot}the attempt was granted after all in {}, found the name held in {}, and gave \
             up in {} of {runs} runs; the second holder was granted in {regranted} of {runs}, \
             after the first client released or gave up by p50 {} and max {} (bound {}, the \
             first client's lease {}; the second holder's start included when it came after \
             the first gave up)",
            count(Answer::Granted),
            count(Answer::FoundHeld),
            count(Answer::GaveUp),
            p50.map_or("—".into(), ms),
            max.map_or("—".into(), ms),
            ms(bound),
            ms(long_lease),
        ),
        passed,
        overlaps_allowed: None,
        minimum: minimum(shots == runs, || {
            format!("the answer was lost in {shots} of {runs} runs")
        }),
        applies: true,
    })
}

/// The first client: through a proxy of its own, or named for the fail
/// point.
fn victim(runtime: &Runtime, server: &Server, lease: Duration, loss: Loss) -> Outcome<Victim> {
    let (proxy, url) = match loss {
        Loss::FailPoint => (
            None,
            with_query(&server.url(), &format!("appName={VICTIM_APP}")),
        ),
        Loss::ResetAfterRequest | Loss::ResetAfterWrite => {
            let (proxy, url) = proxy(runtime, server)?;
            (Some(proxy), url)
        }
    };
    let client = runtime.block_on(async {
        let backend = server.kind.open_quiet(&url, lease).await?;
        let options = LockOptions::builder()
            .lease(lease)
            .label("distlock-chaos")
            .build()?;
        Outcome::Ok(LockClient::new(backend, options))
    })?;
    let admin = match loss {
        Loss::FailPoint => {
            // The driver's URL: without distlock's own options (`fair`).
            let (driver_url, _) = distlock::mongodb::split_collection_option(&server.url())?;
            Some(runtime.block_on(mongodb::Client::with_uri_str(driver_url))?)
        }
        Loss::ResetAfterRequest | Loss::ResetAfterWrite => None,
    };
    let shot = match loss {
        Loss::ResetAfterWrite => Fault::ResetAfterRequestStarting(b"PUT "),
        Loss::FailPoint | Loss::ResetAfterRequest => Fault::ResetAfterRequest,
    };
    Ok(Victim {
        client,
        proxy,
        shot,
        admin,
    })
}

/// One run: the first client's attempt loses its answer, and a second
/// holder comes for the name.
fn lost_ack(
    runtime: &Runtime,
    server: &Server,
    settings: &Settings,
    victim: &Victim,
    long_lease: Duration,
    times: i32,
) -> Outcome<LostAckRun> {
    let name = unique("r5");
    let dir = run_dir(server, &name)?;
    let store = FencedStore::open(&dir.join("store"))?;
    let lock = LockName::new(&name)?;
    runtime.block_on(server.kind.prepare_name(server, &lock))?;
    if let Some(admin) = &victim.admin {
        runtime.block_on(close_find_and_modify(admin, times))?;
    }
    if let Some(proxy) = &victim.proxy {
        proxy.set_fault(victim.shot);
    }
    let attempt = runtime.block_on(victim.client.try_acquire(&lock));
    if let Some(admin) = &victim.admin {
        runtime.block_on(fail_point_off(admin))?;
    }
    let shot_taken = victim.proxy.as_ref().map(|proxy| {
        let spent = proxy.all_spent();
        proxy.clear();
        spent
    });

    let mut second = spec(server, settings, &name, &dir, 1);
    second.wait_ms = (long_lease / 2).as_millis() as u64;
    let pid = std::process::id();
    let mut events = Vec::new();
    let (answer, freed_at, second) = match attempt {
        Ok(Some(guard)) => {
            let token = guard.fencing_token();
            events.push(Event::Acquired {
                pid,
                task: 0,
                claim: ClaimSpec::Exclusive,
                token,
                at_ns: now_ns(),
                resumed: false,
            });
            let read = store.read(token)?;
            let second = Worker::spawn(settings, &second)?;
            std::thread::sleep(HOLD);
            let write_ok = match read {
                Some(value) => Some(store.write(token, value + 1)?),
                None => None,
            };
            let at_ns = now_ns();
            let lost_ns = guard.is_lost().then_some(at_ns);
            let valid_until_ns = guard.valid_until().map(instant_ns);
            let release = match runtime.block_on(guard.release()) {
                Ok(true) => Release::Released,
                Ok(false) | Err(distlock::Error::Lost { .. }) => Release::NotOurs,
                Err(_) => Release::Failed,
            };
            let released_ns = Some(now_ns());
            events.push(Event::Ended {
                pid,
                task: 0,
                token,
                at_ns,
                lost_ns,
                read_ok: read.is_some(),
                write_ok,
                release,
                released_ns,
                lost_reason: None,
                valid_until_ns,
                witnessed: false,
                warned_ns: None,
            });
            (Answer::Granted, at_ns, second)
        }
        Ok(None) => {
            let at_ns = now_ns();
            events.push(Event::TimedOut {
                pid,
                task: 0,
                at_ns,
            });
            (Answer::FoundHeld, at_ns, Worker::spawn(settings, &second)?)
        }
        Err(error) => {
            let at_ns = now_ns();
            events.push(Event::Failed {
                pid,
                task: 0,
                at_ns,
                error: error.to_string(),
            });
            (Answer::GaveUp, at_ns, Worker::spawn(settings, &second)?)
        }
    };
    let theirs = second.finish()?;
    let next_grant = theirs.iter().find_map(|event| match event {
        Event::Acquired { at_ns, .. } => Some(Duration::from_nanos(at_ns.saturating_sub(freed_at))),
        _ => None,
    });
    events.extend(theirs);
    Ok(LostAckRun {
        verdict: judge(&events, &store)?,
        answer,
        shot_taken,
        next_grant,
    })
}

/// Makes the server close the connection of the first client's next
/// `times` `findAndModify` commands, without running them.
async fn close_find_and_modify(admin: &mongodb::Client, times: i32) -> Outcome<()> {
    admin
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": times },
            "data": {
                "failCommands": ["findAndModify"],
                "closeConnection": true,
                "appName": VICTIM_APP,
            },
        })
        .await?;
    Ok(())
}

/// Turns the `failCommand` fail point off.
async fn fail_point_off(admin: &mongodb::Client) -> Outcome<()> {
    admin
        .database("admin")
        .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await?;
    Ok(())
}

/// `url` with `option` added to its query.
fn with_query(url: &str, option: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{option}")
}

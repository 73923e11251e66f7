//! R3: a holder's traffic is delayed by twice the lease, through the fault
//! proxy, just after it read the fenced counter. Its extensions stall and
//! its lease ends on the server; another holder takes the lock, reads and
//! writes; the first one's late write must be turned away.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use distlock_faultproxy::Fault;
use tokio::runtime::Runtime;

use super::Scenario;
use super::network::{Proxies, does_not_apply, proxy, runtime};
use crate::campaign::Server;
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
        id: "R3",
        title: "A write delayed 2× the lease by the proxy",
        what: "A holder reaches the server through the fault proxy. As soon as it has read the \
               fenced counter, the proxy delays all of its traffic by twice the lease, so its \
               extensions stall and its lease ends on the server; a second holder, connected \
               directly, takes the lock, reads and writes; the first holder writes five leases \
               after its read without looking at `lost()`. 20 runs (short form: 3), 10 at a \
               time on names of their own. Must hold: the late write is turned away in every \
               run; the first holder's `lost()` fires before the second is granted (otherwise \
               the two overlap); 0 lost updates; 0 token regressions. In PostgreSQL's advisory \
               mode the server ends the holder's silent connection, and the lock with it, a \
               lease after its last check. Redis in quorum mode is delayed on two servers of \
               three, a majority, and reached directly on the third. In Redis's cluster mode \
               no second holder can reach the master directly while a proxy delays the first \
               (the master announces one address to every client), so this does not apply \
               there. The file backend has no \
               connection to delay, so \
               this does not apply to it.",
        untimed: false,
    },
    run,
};

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    if !server.kind.has_server() {
        return Ok(vec![does_not_apply(
            "R3",
            server,
            &format!(
                "{}; there is no connection to delay",
                server.kind.without_server()
            ),
        )]);
    }
    if let Err(why) = server.kind.one_client_faulted() {
        return Ok(vec![does_not_apply("R3", server, why)]);
    }
    let runtime = runtime()?;
    let runs: usize = settings.pick(20, 3);
    let batch = settings.pick(10, 3);
    let mut total = Verdict::default();
    let (mut ran, mut rejected, mut fired) = (0, 0, 0);
    // How long before the second holder's grant the first one's `lost()`
    // fired.
    let mut ahead = Vec::new();
    for _ in 0..runs.div_ceil(batch) {
        for run in delay_batch(&runtime, server, settings, batch)? {
            ran += 1;
            total.add(&run.verdict);
            rejected += usize::from(run.late_write_rejected);
            fired += usize::from(run.lost_fired);
            ahead.extend(run.lost_ahead_of_regrant);
        }
    }
    let min = ahead.iter().min().copied();
    let p50 = percentile(&mut ahead, 50.0);
    let passed = rejected == ran
        && fired == ran
        && total.overlaps == 0
        && total.lost_updates == 0
        && total.token_regressions == 0;
    Ok(vec![Row {
        scenario: "R3",
        backend: server.kind.name(),
        kind: "exclusive".into(),
        verdict: Some(total),
        detail: format!(
            "late write turned away in {rejected} of {ran} runs; `lost()` fired in {fired} of \
             {ran}, before the second holder's grant by p50 {} and min {} (delay {}, lease {})",
            p50.map_or("—".into(), ms),
            min.map_or("—".into(), ms),
            ms(2 * settings.lease),
            ms(settings.lease),
        ),
        passed,
        overlaps_allowed: None,
        minimum: minimum(rejected == ran, || {
            format!("the late write was turned away in {rejected} of {ran} runs")
        }),
        applies: true,
    }])
}

struct DelayRun {
    verdict: Verdict,
    late_write_rejected: bool,
    lost_fired: bool,
    lost_ahead_of_regrant: Option<Duration>,
}

/// One run under way: its proxy, its first holder, and once the delay is
/// on, its second holder.
struct Pending {
    dir: PathBuf,
    name: String,
    proxy: Proxies,
    first: Worker,
    second: Option<Worker>,
}

fn delay_batch(
    runtime: &Runtime,
    server: &Server,
    settings: &Settings,
    batch: usize,
) -> Outcome<Vec<DelayRun>> {
    let lease_ms = settings.lease.as_millis() as u64;
    let mut pending = Vec::new();
    for _ in 0..batch {
        let name = unique("r3");
        let dir = run_dir(server, &name)?;
        let (proxy, url) = proxy(runtime, server)?;
        let mut first = spec(server, settings, &name, &dir, 0);
        first.url = url;
        // Long enough for the lease to end on the server and the second
        // holder to start, be granted and write: the late write must come
        // after it.
        first.hold_ms = 5 * lease_ms;
        first.write_when_lost = true;
        let first = Worker::spawn(settings, &first)?;
        pending.push(Pending {
            dir,
            name,
            proxy,
            first,
            second: None,
        });
    }
    // Each first holder gets its delay as soon as its read is in the
    // counter's log, and a second holder then comes for the name.
    let started = Instant::now();
    while pending.iter().any(|run| run.second.is_none()) {
        for run in pending.iter_mut().filter(|run| run.second.is_none()) {
            let store = FencedStore::open(&run.dir.join("store"))?;
            if store.log()?.iter().any(|entry| entry.op == Op::Read) {
                run.proxy.set_fault(Fault::Delay(2 * settings.lease));
                let second = spec(server, settings, &run.name, &run.dir, 1);
                run.second = Some(Worker::spawn(settings, &second)?);
            }
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err("a first holder did not read the counter within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut runs = Vec::new();
    for run in pending {
        let second = run.second.ok_or("a run without its second holder")?;
        let theirs = second.finish()?;
        let mut events = run.first.finish()?;
        // Only now: the first holder's release went through the delay too.
        drop(run.proxy);
        let first = holdings(&events);
        let late_write_rejected = first.iter().any(|holding| holding.write_ok == Some(false));
        let lost_ns = first.iter().find_map(|holding| holding.lost_ns);
        let regranted_ns = theirs.iter().find_map(|event| match event {
            Event::Acquired { at_ns, .. } => Some(*at_ns),
            _ => None,
        });
        let lost_ahead_of_regrant = match (lost_ns, regranted_ns) {
            (Some(lost), Some(granted)) if lost <= granted => {
                Some(Duration::from_nanos(granted - lost))
            }
            _ => None,
        };
        events.extend(theirs);
        runs.push(DelayRun {
            verdict: judge(&events, &FencedStore::open(&run.dir.join("store"))?)?,
            late_write_rejected,
            lost_fired: lost_ns.is_some(),
            lost_ahead_of_regrant,
        });
    }
    Ok(runs)
}

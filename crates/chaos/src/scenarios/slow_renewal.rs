//! R9: a holder's renewals slow down to three leases, or vanish into a
//! blackhole, through the fault proxy, while another holder waits for the
//! name. The first holder must learn that it lost the lock (`lost()`)
//! before the second one is granted it.

use std::time::Duration;

use distlock_faultproxy::Fault;
use tokio::runtime::Runtime;

use super::Scenario;
use super::network::{does_not_apply, proxy, runtime};
use crate::campaign::Server;
use crate::fenced::FencedStore;
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
        id: "R9",
        title: "Renewal latency rising to 3× the lease, or a blackhole",
        what: "A holder reaches the server through the fault proxy, does its read-increment-\
               write and keeps the name, waiting for `lost()`; a second holder, connected \
               directly, waits for the name; then the proxy delays the first holder's traffic \
               by three leases (one sub-case) or swallows it (the other). 20 runs per sub-case \
               (short form: 3), 10 at a time on names of their own. Must hold, in every run: \
               the first holder's `lost()` fires before the second holder is granted (a grant \
               before it counts as an overlap), 0 lost updates, 0 token regressions, and a \
               first holder that finds the loss by its own clock (`Expired`) was warned \
               (`at_risk()`: a failed extension, or little of the lease left) before it. The margin \
               is the second holder's grant less the first one's loss. In PostgreSQL's advisory \
               mode the server ends the silent connection, and the lock with it, a lease after \
               the holder's last check: the holder must have given the lock up by then. Redis in \
               quorum mode is slowed or blackholed on two servers of three, a majority. In \
               Redis's cluster mode no second holder can reach the master directly while a \
               proxy slows the first (the master announces one address to every client), so \
               this does not apply there. The \
               file backend has no connection to slow down, so this does not apply to it.",
        untimed: false,
    },
    run,
};

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    if !server.kind.has_server() {
        return Ok(vec![does_not_apply(
            "R9",
            server,
            &format!(
                "{}; there are no renewals to slow down",
                server.kind.without_server()
            ),
        )]);
    }
    if let Err(why) = server.kind.one_client_faulted() {
        return Ok(vec![does_not_apply("R9", server, why)]);
    }
    let runtime = runtime()?;
    let cases = [
        (
            "exclusive, delay 3× the lease",
            Fault::Delay(3 * settings.lease),
        ),
        ("exclusive, blackhole", Fault::Blackhole),
    ];
    let mut rows = Vec::new();
    for (label, fault) in cases {
        rows.push(slow_renewals(&runtime, server, settings, label, fault)?);
    }
    Ok(rows)
}

fn slow_renewals(
    runtime: &Runtime,
    server: &Server,
    settings: &Settings,
    label: &str,
    fault: Fault,
) -> Outcome<Row> {
    let runs: usize = settings.pick(20, 3);
    let batch = settings.pick(10, 3);
    let mut total = Verdict::default();
    let (mut ran, mut regranted, mut lost_first) = (0, 0, 0);
    let (mut expired, mut warned_first) = (0, 0);
    let mut margins = Vec::new();
    for _ in 0..runs.div_ceil(batch) {
        for run in renewal_batch(runtime, server, settings, batch, fault)? {
            ran += 1;
            total.add(&run.verdict);
            regranted += usize::from(run.regranted_ns.is_some());
            if run.expired {
                expired += 1;
                warned_first += usize::from(run.warned_before_loss);
            }
            if let (Some(lost), Some(granted)) = (run.lost_ns, run.regranted_ns)
                && lost < granted
            {
                lost_first += 1;
                margins.push(Duration::from_nanos(granted - lost));
            }
        }
    }
    let min = margins.iter().min().copied();
    let p50 = percentile(&mut margins, 50.0);
    let passed = lost_first == ran
        && warned_first == expired
        && regranted == ran
        && total.overlaps == 0
        && total.lost_updates == 0
        && total.token_regressions == 0;
    Ok(Row {
        scenario: "R9",
        backend: server.kind.name(),
        kind: label.into(),
        verdict: Some(total),
        detail: format!(
            "the second holder was granted in {regranted} of {ran} runs, after the first \
             holder's `lost()` in {lost_first}; margin p50 {}, min {} (lease {}); warned by \
             `at_risk()` before `lost()` in {warned_first} of the {expired} runs lost by the \
             holder's clock",
            p50.map_or("—".into(), ms),
            min.map_or("—".into(), ms),
            ms(settings.lease),
        ),
        passed,
        overlaps_allowed: None,
        minimum: minimum(lost_first == ran, || {
            format!(
                "the first holder's `lost()` came before the next grant in {lost_first} of {ran} runs"
            )
        }),
        applies: true,
    })
}

struct RenewalRun {
    verdict: Verdict,
    /// When the first holder's `lost()` fired.
    lost_ns: Option<u64>,
    /// Whether the first holder found the loss by its own clock.
    expired: bool,
    /// Whether `at_risk()` warned the first holder before its `lost()`.
    warned_before_loss: bool,
    /// When the second holder was granted.
    regranted_ns: Option<u64>,
}

fn renewal_batch(
    runtime: &Runtime,
    server: &Server,
    settings: &Settings,
    batch: usize,
    fault: Fault,
) -> Outcome<Vec<RenewalRun>> {
    let lease_ms = settings.lease.as_millis() as u64;
    let mut holding = Vec::new();
    for _ in 0..batch {
        let name = unique("r9");
        let dir = run_dir(server, &name)?;
        let (proxy, url) = proxy(runtime, server)?;
        let mut first = spec(server, settings, &name, &dir, 0);
        first.url = url;
        // It keeps the name until `lost()` fires: that is its long hold.
        first.await_loss_ms = Some(10 * lease_ms);
        holding.push((name, dir, proxy, Worker::spawn(settings, &first)?));
    }
    let mut waiting = Vec::new();
    for (name, dir, proxy, first) in holding {
        first.wait_for(Duration::from_secs(60), |event| {
            matches!(event, Event::Acquired { .. })
        })?;
        let second = Worker::spawn(settings, &spec(server, settings, &name, &dir, 1))?;
        waiting.push((dir, proxy, first, second));
    }
    // The second holders have started, and found the names held.
    std::thread::sleep(Duration::from_millis(500));
    for (_, proxy, ..) in &waiting {
        proxy.set_fault(fault);
    }
    let mut runs = Vec::new();
    for (dir, proxy, first, second) in waiting {
        let theirs = second.finish()?;
        let mut events = first.finish()?;
        drop(proxy);
        let lost_ns = holdings(&events).iter().find_map(|holding| holding.lost_ns);
        let (expired, warned_before_loss) = warning(&events);
        let regranted_ns = theirs.iter().find_map(|event| match event {
            Event::Acquired { at_ns, .. } => Some(*at_ns),
            _ => None,
        });
        events.extend(theirs);
        runs.push(RenewalRun {
            verdict: judge(&events, &FencedStore::open(&dir.join("store"))?)?,
            lost_ns,
            expired,
            warned_before_loss,
            regranted_ns,
        });
    }
    Ok(runs)
}

/// Whether the first holder, whose `events` these are, found its loss by
/// its own clock (`Expired`), and whether `at_risk()` warned it first.
fn warning(events: &[Event]) -> (bool, bool) {
    events
        .iter()
        .find_map(|event| match event {
            Event::Ended {
                lost_ns: Some(lost),
                lost_reason: Some(reason),
                warned_ns,
                ..
            } if reason == "Expired" => {
                Some((true, warned_ns.is_some_and(|warned| warned <= *lost)))
            }
            _ => None,
        })
        .unwrap_or((false, false))
}

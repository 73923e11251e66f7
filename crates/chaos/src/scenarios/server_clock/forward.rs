//! R13's step forward: the server's clock jumps two leases ahead while a
//! holder holds and another waits.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::stepped::SteppedServer;
use super::{movements, step_and_check};
use crate::answers::ClockStep;
use crate::campaign::Server;
use crate::fenced::{FencedStore, Op};
use crate::figures::{ms, percentile};
use crate::holder::{Worker, spec};
use crate::holdings::{Holding, holdings};
use crate::judge::{OverlapCause, Verdict, judge};
use crate::outcome::Outcome;
use crate::report::{Row, minimum};
use crate::scratch::{run_dir, unique};
use crate::settings::Settings;
use crate::worker::Event;

/// How long the old holder holds between its read and its write, in
/// leases: past the step, the next holder's grant and its write.
const HOLD_LEASES: u32 = 6;

/// One name's run.
pub(super) struct Run {
    verdict: Verdict,
    /// When the second holder was granted, if it was.
    granted_ns: Option<u64>,
    /// The old holder's holding.
    old: Holding,
    /// Why the old holder's `lost()` fired, if it did.
    reason: Option<String>,
    /// Whether the old holder's write came after the second grant, and
    /// whether the counter accepted it.
    write_after_grant: Option<(bool, bool)>,
}

/// What the forward batches saw, together.
#[derive(Default)]
pub(super) struct Tally {
    verdict: Verdict,
    runs: usize,
    regranted: usize,
    /// How long after the step each old holder's `lost()` fired.
    detection: Vec<Duration>,
    reasons: BTreeMap<String, usize>,
    /// Overlaps of a second grant with the old holder's validity.
    windows: Vec<Duration>,
    stale_writes: usize,
    stale_rejected: usize,
    writes_accepted: usize,
    moved: Vec<i64>,
}

impl Tally {
    pub(super) fn add(&mut self, (step_ns, moved, runs): (u64, i64, Vec<Run>)) {
        self.moved.push(moved);
        for run in runs {
            self.runs += 1;
            self.verdict.add(&run.verdict);
            self.regranted += usize::from(run.granted_ns.is_some());
            if let Some(lost) = run.old.lost_ns {
                self.detection
                    .push(Duration::from_nanos(lost.saturating_sub(step_ns)));
            }
            if let Some(reason) = run.reason {
                *self.reasons.entry(reason).or_default() += 1;
            }
            if let (Some(granted), Some(end)) = (run.granted_ns, run.old.end_ns)
                && granted < end
            {
                self.windows.push(Duration::from_nanos(end - granted));
            }
            if let Some((stale, accepted)) = run.write_after_grant {
                self.stale_writes += usize::from(stale);
                self.stale_rejected += usize::from(stale && !accepted);
                self.writes_accepted += usize::from(accepted);
            }
        }
    }

    pub(super) fn row(mut self, server: &Server, clock: ClockStep, settings: &Settings) -> Row {
        let runs = self.runs;
        let step = ms(2 * settings.lease);
        let seen = format!("the server's clock read moved {}", movements(&self.moved));
        let (passed, detail) = if clock.leases_follow {
            // The next contact: the next extension, one cadence after the
            // step at most, and its answer, within the operation timeout.
            let bound = settings.cadence()
                + distlock::LockOptions::default_operation_timeout(settings.lease);
            let lost = self.detection.len();
            let slowest = self.detection.iter().max().copied();
            let p50 = percentile(&mut self.detection, 50.0);
            let overlapped = self.windows.len();
            let widest = self.windows.iter().max().copied();
            let window_p50 = percentile(&mut self.windows, 50.0);
            let reasons: Vec<String> = self
                .reasons
                .iter()
                .map(|(reason, count)| format!("{reason} {count}"))
                .collect();
            (
                self.regranted == runs
                    && lost == runs
                    && slowest.is_some_and(|slowest| slowest <= bound)
                    && self.stale_writes == runs
                    && self.stale_rejected == runs
                    && self.verdict.lost_updates == 0
                    && self.verdict.token_regressions == 0,
                format!(
                    "step +{step}: {seen}; the second holder was granted in {} of {runs} runs; \
                     the old holder's `lost()` fired in {lost} ({}), p50 {} and max {} after \
                     the step (bound {}: one extension period and one operation timeout); \
                     window (second grant before that `lost()`) in {overlapped} of {runs}, p50 \
                     {} and max {}; stale write made after the second grant in {} of {runs}, \
                     turned away in {}",
                    self.regranted,
                    if reasons.is_empty() {
                        "no reason".to_owned()
                    } else {
                        reasons.join(", ")
                    },
                    p50.map_or("—".into(), ms),
                    slowest.map_or("—".into(), ms),
                    ms(bound),
                    window_p50.map_or("—".into(), ms),
                    widest.map_or("—".into(), ms),
                    self.stale_writes,
                    self.stale_rejected,
                ),
            )
        } else {
            (
                self.regranted == runs
                    && self.verdict.losses == 0
                    && self.verdict.overlaps == 0
                    && self.writes_accepted == runs
                    && self.verdict.lost_updates == 0
                    && self.verdict.token_regressions == 0,
                format!(
                    "step +{step}: {seen}; {}; the old holder kept its lock ({} losses) and its \
                     write was accepted in {} of {runs} runs; the second holder was granted in \
                     {} of {runs}, after the old one released",
                    clock.why, self.verdict.losses, self.writes_accepted, self.regranted,
                ),
            )
        };
        Row {
            scenario: "R13",
            backend: server.kind.name(),
            kind: "exclusive, stepped forward".into(),
            verdict: Some(self.verdict),
            detail,
            passed,
            // The documented limit, where leases follow the clock.
            overlaps_allowed: clock
                .leases_follow
                .then_some(OverlapCause::ServerClockStepped),
            // The step itself is checked as it is made (the server's clock
            // read must move by it); each run must then have a second
            // holder, granted after it.
            minimum: minimum(
                !self.moved.is_empty() && runs > 0 && self.regranted == runs,
                || {
                    format!(
                        "{} steps made; the second holder was granted in {} of {runs} runs",
                        self.moved.len(),
                        self.regranted
                    )
                },
            ),
            applies: true,
        }
    }
}

/// `batch` names, each held by an old holder and waited for by a second
/// one, through one step of `by_ms`. Returns when the step was made, how
/// far the server's clock read moved, and each name's run.
pub(super) fn batch(
    stepped: &mut SteppedServer,
    clock: ClockStep,
    settings: &Settings,
    batch: usize,
    by_ms: i64,
) -> Outcome<(u64, i64, Vec<Run>)> {
    let server = &stepped.server;
    let mut olds = Vec::new();
    for _ in 0..batch {
        let name = unique("r13f");
        let dir = run_dir(server, &name)?;
        let mut old = spec(server, settings, &name, &dir, 0);
        old.hold_ms = (HOLD_LEASES * settings.lease).as_millis() as u64;
        old.write_when_lost = true;
        olds.push((dir, Worker::spawn(settings, &old)?, name));
    }
    let mut waiting = Vec::new();
    for (dir, old, name) in &olds {
        wait_for_read(old, &FencedStore::open(&dir.join("store"))?)?;
        waiting.push(Worker::spawn(
            settings,
            &spec(server, settings, name, dir, 1),
        )?);
    }
    // The waiters have tried at least once, and found the names held.
    std::thread::sleep(Duration::from_millis(500));
    let (step_ns, moved, ()) = step_and_check(stepped, clock, by_ms, || ())?;
    let mut runs = Vec::new();
    for ((dir, old, _), second) in olds.into_iter().zip(waiting) {
        let mut events = second.finish()?;
        let granted_ns = events.iter().find_map(|event| match event {
            Event::Acquired { at_ns, .. } => Some(*at_ns),
            _ => None,
        });
        let old_events = old.finish()?;
        let reason = old_events.iter().find_map(|event| match event {
            Event::Ended { lost_reason, .. } => lost_reason.clone(),
            _ => None,
        });
        let old = *holdings(&old_events)
            .first()
            .ok_or("the old holder recorded no grant")?;
        events.extend(old_events);
        let store = FencedStore::open(&dir.join("store"))?;
        let write_after_grant = store
            .log()?
            .iter()
            .find(|entry| entry.op == Op::Write && entry.token == old.token)
            .map(|write| {
                (
                    granted_ns.is_some_and(|granted| write.at_ns > granted),
                    write.accepted,
                )
            });
        runs.push(Run {
            verdict: judge(&events, &store)?,
            granted_ns,
            old,
            reason,
            write_after_grant,
        });
    }
    Ok((step_ns, moved, runs))
}

/// Waits until `worker` has read the fenced counter in `store`.
fn wait_for_read(worker: &Worker, store: &FencedStore) -> Outcome<()> {
    worker.wait_for(Duration::from_secs(60), |event| {
        matches!(event, Event::Acquired { .. })
    })?;
    let started = Instant::now();
    while !store.log()?.iter().any(|entry| entry.op == Op::Read) {
        if started.elapsed() > Duration::from_secs(60) {
            return Err("the old holder never read the fenced counter".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

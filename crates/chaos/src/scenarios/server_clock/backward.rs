//! R13's step back: the server's clock jumps two leases back just after a
//! holder is killed, while another holds through the step.

use std::collections::BTreeMap;
use std::time::Duration;

use super::stepped::SteppedServer;
use super::{movements, step_and_check};
use crate::answers::ClockStep;
use crate::campaign::Server;
use crate::clock::now_ns;
use crate::fenced::FencedStore;
use crate::figures::{ms, percentile};
use crate::holder::{Worker, spec};
use crate::holdings::holdings;
use crate::judge::{Verdict, judge};
use crate::outcome::Outcome;
use crate::report::{Row, minimum};
use crate::scenarios::kill::{documented_bound, earliest_regrant};
use crate::scratch::{run_dir, unique};
use crate::settings::Settings;
use crate::worker::Event;

/// How long the live holder holds, in leases: from before the step to
/// well after it.
const LIVE_HOLD_LEASES: u32 = 6;

/// A token this much above the one before, or less, came from the name's
/// kept counter; more, from the server's clock (in µs) once its record
/// was deleted.
const KEPT_COUNTER_STEP: u64 = 1_000;

/// One batch's runs, each judged on its three names.
pub(super) struct Run {
    verdict: Verdict,
    /// When the dead holder's name was granted again, after the kill; or
    /// `Err(())` when it was granted before the kill.
    regrant: Option<Result<Duration, ()>>,
    /// Whether the live holder held from before the step to after it,
    /// whether its `lost()` fired, and whether its write was accepted.
    live_through_step: bool,
    /// When the live holder's `lost()` fired, before the step or after
    /// it, and why.
    live_lost: Option<(Side, Option<String>)>,
    live_written: bool,
    /// The released name's token before the step and after it.
    tokens: Option<(u64, u64)>,
}

/// What the backward batches saw, together.
#[derive(Default)]
pub(super) struct Tally {
    verdict: Verdict,
    runs: usize,
    latencies: Vec<Duration>,
    /// Re-grants before the kill, while the victim should have held.
    before_kill: usize,
    early: usize,
    live_through_step: usize,
    /// The live holders' losses, by side of the step and reason.
    live_lost: BTreeMap<(Side, String), usize>,
    live_written: usize,
    /// Released names whose counter was kept, and those whose next token
    /// came from the server's clock.
    kept: usize,
    recreated: usize,
    moved: Vec<i64>,
    /// The longest from a batch's first kill to its step.
    step_after_kill: Duration,
}

impl Tally {
    pub(super) fn add(&mut self, (moved, after_kill, runs): (i64, Duration, Vec<Run>)) {
        self.moved.push(moved);
        self.step_after_kill = self.step_after_kill.max(after_kill);
        for run in runs {
            self.runs += 1;
            self.verdict.add(&run.verdict);
            match run.regrant {
                Some(Ok(latency)) => self.latencies.push(latency),
                Some(Err(())) => self.before_kill += 1,
                None => {}
            }
            self.live_through_step += usize::from(run.live_through_step);
            if let Some((side, reason)) = run.live_lost {
                *self
                    .live_lost
                    .entry((side, reason.unwrap_or_else(|| "no reason".into())))
                    .or_default() += 1;
            }
            self.live_written += usize::from(run.live_written);
            if let Some((before, after)) = run.tokens {
                if after > before && after - before <= KEPT_COUNTER_STEP {
                    self.kept += 1;
                } else {
                    self.recreated += 1;
                }
            }
        }
    }

    pub(super) fn row(mut self, server: &Server, clock: ClockStep, settings: &Settings) -> Row {
        let runs = self.runs;
        let step = 2 * settings.lease;
        let earliest = earliest_regrant(server.kind, settings);
        let bound = documented_bound(server.kind, settings)
            + if clock.leases_follow {
                step
            } else {
                Duration::ZERO
            };
        self.early += self
            .latencies
            .iter()
            .filter(|latency| **latency < earliest)
            .count();
        let regranted = self.latencies.len();
        let min = self.latencies.iter().min().copied();
        let p50 = percentile(&mut self.latencies, 50.0);
        let p99 = percentile(&mut self.latencies, 99.0);
        let passed = self.early == 0
            && self.before_kill == 0
            && regranted == runs
            && p99.is_some_and(|p99| p99 <= bound)
            && self.live_through_step == runs
            && self.live_lost.is_empty()
            && self.live_written == runs
            && self.verdict.overlaps == 0
            && self.verdict.token_regressions == 0
            && self.verdict.lost_updates == 0;
        let detail = format!(
            "step −{}, at most {} after the first kill: the server's clock read moved {}; the killed holder's name granted \
             again in {regranted} of {runs} runs after the kill and in {} before it, {} after \
             the kill but before its lease could have ended (earliest allowed {}); after the kill: min {}, p50 {}, p99 {} (bound {}{}); the \
             live holder held through the step in {} of {runs} runs, lost its lock in {} \
             and wrote in {}; a name released \
             longer than the step before it and granted after it kept its counter in {} runs \
             and took its token from the server's clock in {} (its record deleted)",
            ms(step),
            ms(self.step_after_kill),
            movements(&self.moved),
            self.before_kill,
            self.early,
            ms(earliest),
            min.map_or("—".into(), ms),
            p50.map_or("—".into(), ms),
            p99.map_or("—".into(), ms),
            ms(bound),
            if clock.leases_follow {
                ": R4's and the step"
            } else {
                ": R4's; the step reaches no lease"
            },
            self.live_through_step,
            losses(&self.live_lost),
            self.live_written,
            self.kept,
            self.recreated,
        );
        Row {
            scenario: "R13",
            backend: server.kind.name(),
            kind: "exclusive, stepped back".into(),
            verdict: Some(self.verdict),
            detail,
            passed,
            overlaps_allowed: None,
            // The step is checked as it is made; each run's killed holder's
            // name must then be granted again.
            minimum: minimum(
                !self.moved.is_empty() && runs > 0 && regranted == runs,
                || {
                    format!(
                        "{} steps made; the killed holder's name was granted again in \
                     {regranted} of {runs} runs",
                        self.moved.len()
                    )
                },
            ),
            applies: true,
        }
    }
}

/// The names of one run: the killed holder's, the live holder's, and the
/// one released before the step.
struct Names {
    killed: (String, std::path::PathBuf),
    live: (String, std::path::PathBuf),
    released: (String, std::path::PathBuf),
}

impl Names {
    fn new(server: &Server) -> Outcome<Names> {
        let named = |prefix: &str| -> Outcome<(String, std::path::PathBuf)> {
            let name = unique(prefix);
            let dir = run_dir(server, &name)?;
            Ok((name, dir))
        };
        Ok(Names {
            killed: named("r13k")?,
            live: named("r13l")?,
            released: named("r13r")?,
        })
    }
}

/// `batch` runs through one step of `by_ms` (negative). Returns how far
/// the server's clock read moved, how long after the first kill the step
/// came, and each run.
pub(super) fn batch(
    stepped: &mut SteppedServer,
    clock: ClockStep,
    settings: &Settings,
    batch: usize,
    by_ms: i64,
) -> Outcome<(i64, Duration, Vec<Run>)> {
    let server = &stepped.server;
    let names: Vec<Names> = (0..batch)
        .map(|_| Names::new(server))
        .collect::<Outcome<_>>()?;
    // Each released name is taken and given back before the step.
    let mut released = Vec::new();
    for run in &names {
        let (name, dir) = &run.released;
        released.push(Worker::spawn(
            settings,
            &spec(server, settings, name, dir, 0),
        )?);
    }
    let mut before = Vec::new();
    for worker in released {
        before.push(worker.finish()?);
    }
    let last_grant = before
        .iter()
        .flat_map(|events| holdings(events))
        .map(|holding| holding.start_ns)
        .max()
        .ok_or("no name was granted before the step")?;
    let mut held = Vec::new();
    for run in &names {
        let (name, dir) = &run.killed;
        let mut holder = spec(server, settings, name, dir, 0);
        holder.hold_ms = 600_000;
        let victim = Worker::spawn(settings, &holder)?;
        victim.wait_for(Duration::from_secs(60), |event| {
            matches!(event, Event::Acquired { .. })
        })?;
        let waiter = Worker::spawn(settings, &spec(server, settings, name, dir, 1))?;
        held.push((victim, waiter));
    }
    // The live holders start together, so that each holds through the
    // step.
    let mut lives = Vec::new();
    for run in &names {
        let (name, dir) = &run.live;
        let mut live = spec(server, settings, name, dir, 0);
        live.hold_ms = (LIVE_HOLD_LEASES * settings.lease).as_millis() as u64;
        lives.push(Worker::spawn(settings, &live)?);
    }
    for live in &lives {
        live.wait_for(Duration::from_secs(60), |event| {
            matches!(event, Event::Acquired { .. })
        })?;
    }
    // The waiters have tried at least once; and the released names were
    // last granted longer than the step before it, as the README's
    // guarantee on tokens asks.
    std::thread::sleep(Duration::from_millis(500));
    let step = Duration::from_millis(by_ms.unsigned_abs());
    let since = Duration::from_nanos(now_ns().saturating_sub(last_grant));
    std::thread::sleep((step + settings.lease / 2).saturating_sub(since));
    let kill_all = || {
        held.into_iter()
            .zip(lives)
            .map(|((victim, waiter), live)| {
                let at = now_ns();
                (at, victim.kill(), waiter, live)
            })
            .collect::<Vec<_>>()
    };
    let (step_ns, moved, killed) = step_and_check(stepped, clock, by_ms, kill_all)?;
    let first_kill = killed.first().map_or(step_ns, |(at, ..)| *at);
    let server = &stepped.server;
    let mut after = Vec::new();
    for run in &names {
        let (name, dir) = &run.released;
        after.push(Worker::spawn(
            settings,
            &spec(server, settings, name, dir, 1),
        )?);
    }
    let mut runs = Vec::new();
    for (((killed_at, killed, waiter, live), again), (names, before)) in
        killed.into_iter().zip(after).zip(names.iter().zip(before))
    {
        let holders = Holders {
            killed_at,
            killed,
            waiter,
            live,
            before,
            again,
        };
        runs.push(judge_run(names, holders, step_ns)?);
    }
    Ok((
        moved,
        Duration::from_nanos(step_ns.saturating_sub(first_kill)),
        runs,
    ))
}

/// One run's holders, once the step is made.
struct Holders {
    /// When the killed holder was killed, and its records.
    killed_at: u64,
    killed: Vec<Event>,
    /// The one waiting for the killed holder's name.
    waiter: Worker,
    live: Worker,
    /// The records of the released name's holder before the step, and
    /// the one that takes it after.
    before: Vec<Event>,
    again: Worker,
}

/// Waits for `holders` to end, and judges their run.
///
/// # Errors
/// A holder failed or hung, or a store cannot be read.
fn judge_run(names: &Names, holders: Holders, step_ns: u64) -> Outcome<Run> {
    let Holders {
        killed_at,
        mut killed,
        waiter,
        live,
        before,
        again,
    } = holders;
    let waited = waiter.finish()?;
    let regrant = waited.iter().find_map(|event| match event {
        Event::Acquired { at_ns, .. } => Some(
            at_ns
                .checked_sub(killed_at)
                .map(Duration::from_nanos)
                .ok_or(()),
        ),
        _ => None,
    });
    killed.extend(waited);
    let mut verdict = judge(&killed, &FencedStore::open(&names.killed.1.join("store"))?)?;
    // The killed holder never recorded an end, so the judge cannot see it
    // overlap the waiter.
    verdict.overlaps += usize::from(matches!(regrant, Some(Err(()))));
    let live_events = live.finish()?;
    let live_holding = holdings(&live_events);
    verdict.add(&judge(
        &live_events,
        &FencedStore::open(&names.live.1.join("store"))?,
    )?);
    let mut probe = before;
    let again = again.finish()?;
    let tokens = token_of(&probe).zip(token_of(&again));
    probe.extend(again);
    verdict.add(&judge(
        &probe,
        &FencedStore::open(&names.released.1.join("store"))?,
    )?);
    Ok(Run {
        verdict,
        regrant,
        live_through_step: live_holding.iter().any(|holding| {
            holding.start_ns < step_ns && holding.end_ns.is_some_and(|end| end > step_ns)
        }),
        live_lost: live_holding.first().and_then(|holding| {
            let side = if holding.lost_ns? < step_ns {
                Side::Before
            } else {
                Side::After
            };
            Some((side, lost_reason(&live_events)))
        }),
        live_written: live_holding
            .iter()
            .any(|holding| holding.write_ok == Some(true)),
        tokens,
    })
}

/// Which side of the step something happened on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    Before,
    After,
}

/// Why the first `lost()` in `events` fired.
fn lost_reason(events: &[Event]) -> Option<String> {
    events.iter().find_map(|event| match event {
        Event::Ended { lost_reason, .. } => lost_reason.clone(),
        _ => None,
    })
}

/// The live holders' losses, for a report: none, or how many, on which
/// side of the step, and why.
fn losses(lost: &BTreeMap<(Side, String), usize>) -> String {
    if lost.is_empty() {
        return "none".into();
    }
    let each: Vec<String> = lost
        .iter()
        .map(|((side, reason), count)| {
            let side = match side {
                Side::Before => "before the step",
                Side::After => "after it",
            };
            format!("{count} {side} ({reason})")
        })
        .collect();
    each.join(", ")
}

/// The token of the first grant in `events`.
fn token_of(events: &[Event]) -> Option<u64> {
    holdings(events).first().map(|holding| holding.token)
}

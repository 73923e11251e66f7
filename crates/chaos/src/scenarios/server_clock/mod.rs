//! R13: the server's wall clock steps forward by two leases, and back by
//! two leases, while holders hold (issue 24, finding 1).

mod backward;
mod forward;
mod stepped;

use crate::answers::ClockStep;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo};

use super::Scenario;
use super::clock_shift::faketime_lib;
use super::kinds::not_applicable;
use crate::settings::Settings;
use stepped::SteppedServer;

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R13",
        title: "A server clock that steps",
        what: "The backend's server runs under libfaketime's thread-safe build with a \
               timestamp file (`FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE=1`, \
               `FAKETIME_DONT_FAKE_MONOTONIC=1`: an NTP step moves the wall clock only), and \
               its clock is stepped by writing an offset there; each step must show in the \
               clock the backend reads from the server (`server_info`, as `distlock check` \
               does), or the run fails. Forward: a holder reads the fenced counter and holds \
               for six leases before it writes, without looking at `lost()`; a second holder \
               waits for the name; the clock steps forward by two leases. Must hold: 0 lost \
               updates, 0 token regressions, the stale write turned away in every run, and \
               `lost()` fired for the old holder at its next contact with the server (within \
               one extension period and one operation timeout of the step). The window, from \
               the second grant to the old holder's `lost()`, is the documented limit: such \
               overlaps are counted and reported, not forbidden. Back: a holder is SIGKILLed \
               while a second one waits, then the clock steps back by two leases, while a live \
               holder holds another name through the step. Must hold: the dead holder's lock \
               comes back no later than R4's bound plus the step, and never before its lease \
               can have ended; the live holder keeps its lock; tokens keep increasing, also on \
               a name released (its record deleted where the backend deletes idle records) \
               longer than the step before it, then granted again after it. 20 runs per \
               direction (short form: 3), 10 at a time, a forward batch then a backward one. \
               Where leases do not follow the clock that moves (memcached counts expiry on \
               its monotonic clock, PostgreSQL's advisory locks live with their connections), \
               the step must change nothing: no loss, no overlap. etcd is left out: Go reads \
               the clock through the vDSO, not libc, so libfaketime cannot move it. The packaged \
               Redis is left out too: its jemalloc hangs at start under libfaketime.",
        untimed: false,
    },
    run,
};

/// How many runs each direction has, and how many at a time.
fn runs(settings: &Settings) -> (usize, usize) {
    (settings.pick(20, 3), settings.pick(10, 3))
}

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    let clock = match server.kind.server_clock() {
        Ok(clock) => clock,
        Err(why) => return Ok(vec![not_applicable("R13", server, "exclusive", why)]),
    };
    let mut stepped = SteppedServer::start(server.kind, &faketime_lib()?)?;
    let step_ms = 2 * settings.lease.as_millis() as i64;
    let (runs, batch) = runs(settings);
    let mut ahead = forward::Tally::default();
    let mut back = backward::Tally::default();
    for _ in 0..runs.div_ceil(batch) {
        ahead.add(forward::batch(
            &mut stepped,
            clock,
            settings,
            batch,
            step_ms,
        )?);
        back.add(backward::batch(
            &mut stepped,
            clock,
            settings,
            batch,
            -step_ms,
        )?);
    }
    Ok(vec![
        ahead.row(server, clock, settings),
        back.row(server, clock, settings),
    ])
}

/// Steps `stepped`'s clock by `by_ms`, with `just_before` done right
/// before the step (the kills of the step back, which the step must
/// follow at once), and checks that the step shows in the clock the
/// backend reads where `clock` says it must (and nowhere else). Returns
/// when the step was made, how far the clock read moved, in milliseconds,
/// and what `just_before` returned.
///
/// # Errors
/// The clock cannot be read, or did not move as it should: the step is
/// not in effect, and nothing the run saw could be put down to it.
fn step_and_check<T>(
    stepped: &mut SteppedServer,
    clock: ClockStep,
    by_ms: i64,
    just_before: impl FnOnce() -> T,
) -> Outcome<(u64, i64, T)> {
    let before = stepped.clock_ahead_ms()?;
    let done = just_before();
    let at = stepped.step(by_ms)?;
    let moved = stepped.clock_ahead_ms()? - before;
    let expected = if clock.clock_moves { by_ms } else { 0 };
    // Half the step apart: whole-second clocks (memcached's) still tell
    // a step of two leases from none.
    if (moved - expected).abs() * 2 >= by_ms.abs() {
        return Err(format!(
            "the server's clock moved by {} when stepped by {}, where it should have moved by \
             {} ({})",
            seconds(moved),
            seconds(by_ms),
            seconds(expected),
            clock.why
        )
        .into());
    }
    Ok((at, moved, done))
}

/// Milliseconds as signed seconds, to a tenth (no sign for zero).
fn seconds(ms: i64) -> String {
    let tenths = (ms as f64 / 100.0).round() as i64;
    if tenths == 0 {
        "0.0 s".into()
    } else {
        format!("{:+.1} s", tenths as f64 / 10.0)
    }
}

/// The clock movements seen, for a report: the least and the most, or
/// one of them where they read the same.
fn movements(moved: &[i64]) -> String {
    let (min, max) = (
        moved.iter().min().copied().unwrap_or(0),
        moved.iter().max().copied().unwrap_or(0),
    );
    let (min, max) = (seconds(min), seconds(max));
    if min == max {
        min
    } else {
        format!("{min} to {max}")
    }
}

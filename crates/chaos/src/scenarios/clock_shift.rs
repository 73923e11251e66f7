//! R8: holders whose wall clocks are an hour ahead and an hour behind
//! (Debian's libfaketime) share a name with one whose clock is right.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::Scenario;
use super::kinds::{SEMAPHORE_OF_3, kinds, without_semaphores};
use crate::campaign::Server;
use crate::clock::now_ns;
use crate::fenced::FencedStore;
use crate::holder::{Worker, spec};
use crate::holdings::holdings;
use crate::judge::{Verdict, judge, regression_example};
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::{run_dir, unique};
use crate::settings::Settings;
use crate::worker::{ClaimSpec, Event, wall_ms};

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R8",
        title: "Client clocks ±1 h",
        what: "Holders run under libfaketime (`LD_PRELOAD`, `FAKETIME=+1h` or `-1h`, \
               `FAKETIME_DONT_FAKE_MONOTONIC=1`): for each kind the backend grants, one process \
               per clock (+1 h, −1 h, right) and claim churns through one name, 2 tasks × 150 \
               holdings each (short form: 1 × 25), read-incrementing-writing the fenced counter; \
               then one process per clock holds another name 1.2 s at a time, 5 times each \
               (short form: once), so that its lease (1 s) is extended under the shifted clock. \
               Each holder records its wall clock when it starts, and the shifts must be seen \
               (±1 h within 5 s), or the run fails. Must hold: 0 overlaps among valid holders, \
               0 lost updates, 0 token regressions, and no spurious loss (no `lost()` fired, no \
               extension refused) nor failed wait, since nothing else goes wrong.",
        untimed: false,
    },
    run,
};

/// The clocks the holders run with: libfaketime's `FAKETIME` (none for the
/// right clock), and the shift it must show, in milliseconds.
const CLOCKS: [(Option<&str>, i64); 3] = [
    (Some("+1h"), 3_600_000),
    (Some("-1h"), -3_600_000),
    (None, 0),
];

/// How far a holder's wall clock may be from the shift it was given.
const SHIFT_TOLERANCE_MS: i64 = 5_000;

/// How long each holding of the name whose leases are extended lasts.
const LONG_HOLD: Duration = Duration::from_millis(1200);

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    let faketime = faketime_lib()?;
    let mut rows = Vec::new();
    for (label, claims) in kinds(server) {
        rows.push(shifted(
            server, settings, &faketime, &label, &claims, false,
        )?);
    }
    rows.extend(without_semaphores("R8", server, SEMAPHORE_OF_3));
    rows.push(shifted(
        server,
        settings,
        &faketime,
        "exclusive, held 1.2 s (extended)",
        &[ClaimSpec::Exclusive],
        true,
    )?);
    Ok(rows)
}

/// libfaketime's library, as `scripts/servers/faketime.sh` exports it.
pub(super) fn faketime_lib() -> Outcome<PathBuf> {
    let lib = std::env::var_os("FAKETIME_LIB").map(PathBuf::from).ok_or(
        "FAKETIME_LIB is not set: run through scripts/test or scripts/chaos, whose \
         scripts/servers/faketime.sh installs libfaketime and names it",
    )?;
    if !lib.is_file() {
        return Err(format!("FAKETIME_LIB names {}, which is not a file", lib.display()).into());
    }
    Ok(lib)
}

/// One run: a process per clock and claim on one name; `long` holds for
/// [`LONG_HOLD`] a few times instead of churning.
fn shifted(
    server: &Server,
    settings: &Settings,
    faketime: &Path,
    label: &str,
    claims: &[ClaimSpec],
    long: bool,
) -> Outcome<Row> {
    let name = unique("r8");
    let dir = run_dir(server, &name)?;
    // The harness's wall clock against the shared monotonic clock, to tell
    // each holder's shift.
    let (here_wall, here_ns) = (wall_ms(SystemTime::now()), now_ns());
    let mut workers = Vec::new();
    for (index, (clock, shift)) in CLOCKS.iter().enumerate() {
        for (at, claim) in claims.iter().enumerate() {
            let id = index * claims.len() + at;
            let mut spec = spec(server, settings, &name, &dir, id);
            spec.claim = *claim;
            if long {
                spec.cycles = settings.pick(5, 1);
                spec.hold_ms = LONG_HOLD.as_millis() as u64;
            } else {
                spec.tasks = settings.pick(2, 1);
                spec.cycles = settings.pick(150, 25);
                // Semaphore holders must stay a moment for others to join them.
                spec.hold_ms = match claim {
                    ClaimSpec::Permit { .. } => 2,
                    _ => 0,
                };
            }
            let mut env: Vec<(&str, &OsStr)> = Vec::new();
            if let Some(clock) = clock {
                env.push(("LD_PRELOAD", faketime.as_os_str()));
                env.push(("FAKETIME", OsStr::new(clock)));
                env.push(("FAKETIME_DONT_FAKE_MONOTONIC", OsStr::new("1")));
            }
            workers.push((*shift, Worker::spawn_with_env(settings, &spec, &env)?));
        }
    }
    let mut events = Vec::new();
    let mut seen = Vec::new();
    for (expected, worker) in workers {
        let theirs = worker.finish()?;
        let Some(shift) = theirs.iter().find_map(|event| match event {
            Event::Started { wall_ms, at_ns, .. } => {
                let elapsed = (*at_ns as i64 - here_ns as i64) / 1_000_000;
                Some(wall_ms - (here_wall + elapsed))
            }
            _ => None,
        }) else {
            return Err("a holder recorded no start, so its clock is unknown".into());
        };
        if (shift - expected).abs() > SHIFT_TOLERANCE_MS {
            return Err(format!(
                "a holder's wall clock was {} off where libfaketime should have set it {}: \
                 the shift is not in effect",
                seconds(shift),
                seconds(expected)
            )
            .into());
        }
        seen.push(shift);
        events.extend(theirs);
    }
    let verdict: Verdict = judge(&events, &FencedStore::open(&dir.join("store"))?)?;
    let extended = if long {
        format!(
            "; {} holdings of {} under a {} lease, so extended",
            verdict.acquisitions,
            crate::figures::ms(LONG_HOLD),
            crate::figures::ms(settings.lease)
        )
    } else {
        String::new()
    };
    let clocks: Vec<String> = seen.iter().map(|shift| seconds(*shift)).collect();
    let regression = regression_example(&holdings(&events));
    let passed = verdict.overlaps == 0
        && verdict.lost_updates == 0
        && verdict.token_regressions == 0
        && verdict.losses == 0
        && verdict.failed == 0;
    let minimum = minimum(verdict.acquisitions > 0 && seen.len() > 1, || {
        format!(
            "{} acquisitions by holders with {} clocks",
            verdict.acquisitions,
            seen.len()
        )
    });
    Ok(Row {
        scenario: "R8",
        backend: server.kind.name(),
        kind: label.to_owned(),
        detail: format!(
            "holders' wall clocks seen at {}{extended}; {} spurious losses, {} failed waits{}",
            clocks.join(", "),
            verdict.losses,
            verdict.failed,
            regression.map_or(String::new(), |example| format!("; {example}")),
        ),
        verdict: Some(verdict),
        passed,
        overlaps_allowed: None,
        minimum,
        applies: true,
    })
}

/// A shift in milliseconds as signed seconds.
fn seconds(ms: i64) -> String {
    format!("{:+.1} s", ms as f64 / 1000.0)
}

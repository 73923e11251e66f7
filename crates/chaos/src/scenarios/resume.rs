//! R15: a holder killed outright and started again takes its own grant up
//! again from its handle (`LockClient::resume`), with its token, while
//! another process waits; the waiter must be granted only after the
//! resumed holder released.

use std::time::Duration;

use distlock::backend::Resuming;

use super::Scenario;
use super::kinds::not_applicable;
use crate::campaign::Server;
use crate::clock::now_ns;
use crate::fenced::FencedStore;
use crate::holder::{Worker, spec};
use crate::judge::{Verdict, judge};
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::{run_dir, unique};
use crate::settings::Settings;
use crate::worker::Event;

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R15",
        title: "A holder killed and resumed",
        what: "A holder that keeps its grant's handle in a file is killed with SIGKILL while \
               another process waits for the name, and is started again at once with the \
               same file; 50 runs (short form: 5), 5 at a time, on an exclusive lock with a \
               lease of at least 5 s (object storage judges a resume by its stamps in whole \
               seconds). Must \
               hold: every restart took its grant up again (`resume`), with the killed \
               holder's token, and wrote through the fenced counter with it; the waiter was \
               granted in every run, never before the kill, with a greater token; and the \
               history of the restarted holder and the waiter (the killed holder's grant \
               goes on as the restarted one's) passes the checker. A backend whose locks \
               end with their process cannot resume, and says why.",
        untimed: false,
    },
    run,
};

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let url = server.url();
    let refused = runtime.block_on(async {
        let backend = crate::worker::open_patiently(&url).await?;
        Outcome::Ok(match backend.abilities().resumes {
            Resuming::By(_) => None,
            Resuming::Never(why) => Some(why.to_owned()),
        })
    })?;
    if let Some(why) = refused {
        return Ok(vec![not_applicable(
            "R15",
            server,
            "exclusive",
            &format!("it cannot resume a lock: {why}"),
        )]);
    }
    let runs: usize = settings.pick(50, 5);
    let batch = 5;
    let mut total = Verdict::default();
    let mut tally = Tally::default();
    for _ in 0..runs.div_ceil(batch) {
        for (verdict, run) in resume_batch(server, settings, batch)? {
            total.add(&verdict);
            tally.add(run);
        }
    }
    let ran = runs.div_ceil(batch) * batch;
    let Tally {
        resumed,
        same_token,
        written,
        waiter_granted,
        early,
        higher_token,
    } = tally;
    let passed = resumed == ran
        && same_token == ran
        && written == ran
        && waiter_granted == ran
        && higher_token == ran
        && early == 0
        && total.overlaps == 0
        && total.token_regressions == 0
        && total.lost_updates == 0;
    Ok(vec![Row {
        scenario: "R15",
        backend: server.kind.name(),
        kind: "exclusive".into(),
        verdict: Some(total),
        detail: format!(
            "the restart took the grant up in {resumed} of {ran} runs, with the killed \
             holder's token in {same_token}, and wrote with it in {written}; the waiter was \
             granted in {waiter_granted}, {early} before the kill, with a greater token in \
             {higher_token}"
        ),
        passed,
        overlaps_allowed: None,
        minimum: minimum(resumed == ran, || {
            format!(
                "the killed holder was started again and took its grant up in {resumed} of {ran} runs"
            )
        }),
        applies: true,
    }])
}

/// What one run showed, beside its verdict.
#[derive(Default)]
struct Tally {
    resumed: usize,
    same_token: usize,
    written: usize,
    waiter_granted: usize,
    early: usize,
    higher_token: usize,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.resumed += other.resumed;
        self.same_token += other.same_token;
        self.written += other.written;
        self.waiter_granted += other.waiter_granted;
        self.early += other.early;
        self.higher_token += other.higher_token;
    }
}

/// The token of the first grant in `events`, and whether it was resumed.
fn first_grant(events: &[Event]) -> Option<(u64, bool, u64)> {
    events.iter().find_map(|event| match event {
        Event::Acquired {
            token,
            resumed,
            at_ns,
            ..
        } => Some((*token, *resumed, *at_ns)),
        _ => None,
    })
}

/// The shortest lease R15's holders take: object storage judges whether a
/// grant is still within its lease by the store's stamps, in whole
/// seconds, so a restart must come well within the lease there, however
/// slow the machine.
const RESUME_LEASE: Duration = Duration::from_secs(5);

fn resume_batch(
    server: &Server,
    settings: &Settings,
    batch: usize,
) -> Outcome<Vec<(Verdict, Tally)>> {
    let mut runs = Vec::new();
    for _ in 0..batch {
        let name = unique("r15");
        let dir = run_dir(server, &name)?;
        let mut holder = spec(server, settings, &name, &dir, 0);
        holder.lease_ms = holder.lease_ms.max(RESUME_LEASE.as_millis() as u64);
        holder.hold_ms = 600_000;
        holder.resume_file = Some(dir.join("lock.handle"));
        let first = Worker::spawn(settings, &holder)?;
        first.wait_for(Duration::from_secs(60), |event| {
            matches!(event, Event::Acquired { .. })
        })?;
        let waiting = spec(server, settings, &name, &dir, 1);
        let waiter = Worker::spawn(settings, &waiting)?;
        runs.push((dir, holder, first, waiter));
    }
    // The waiters have tried at least once, and found the names held.
    std::thread::sleep(Duration::from_millis(500));
    let mut restarted = Vec::new();
    for (dir, mut holder, first, waiter) in runs {
        let killed_at = now_ns();
        let killed = first.kill();
        // The restart holds for a third of the lease, long enough for the
        // keeper to extend the grant it took up.
        holder.hold_ms = holder.lease_ms / 3;
        holder.events = dir.join("events-restarted.jsonl");
        let again = Worker::spawn(settings, &holder)?;
        restarted.push((dir, again, waiter, killed_at, killed));
    }
    let mut outcomes = Vec::new();
    for (dir, again, waiter, killed_at, killed) in restarted {
        let resumed_events = again.finish()?;
        let waited = waiter.finish()?;
        let mut tally = Tally::default();
        let killed_token = first_grant(&killed).map(|(token, ..)| token);
        if let Some((token, resumed, _)) = first_grant(&resumed_events) {
            tally.resumed = usize::from(resumed);
            tally.same_token = usize::from(resumed && Some(token) == killed_token);
        }
        tally.written = resumed_events
            .iter()
            .filter(|event| {
                matches!(
                    event,
                    Event::Ended {
                        write_ok: Some(true),
                        ..
                    }
                )
            })
            .count()
            .min(1);
        if let Some((token, _, at_ns)) = first_grant(&waited) {
            tally.waiter_granted = 1;
            tally.early = usize::from(at_ns < killed_at);
            tally.higher_token = usize::from(killed_token.is_some_and(|killed| token > killed));
        }
        // The killed holder's grant goes on as the restarted one's: the
        // history is the restart's and the waiter's.
        let mut events = resumed_events;
        events.extend(waited);
        let mut verdict = judge(&events, &FencedStore::open(&dir.join("store"))?)?;
        verdict.overlaps += tally.early;
        outcomes.push((verdict, tally));
    }
    Ok(outcomes)
}

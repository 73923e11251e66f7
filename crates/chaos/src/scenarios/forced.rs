//! R14: an administrator releases a held lock by force; its holder must be
//! told, and nothing it does after may keep the lock from the next.

use std::time::Duration;

use distlock::{LockClient, LockGuard, LockName, LockOptions};
use distlock_history::{Acquired, Call, Done, History, Op, Share};

use super::Scenario;
use super::kinds::not_applicable;
use crate::campaign::Server;
use crate::clock::{instant_ns, now_ns};
use crate::extensions::Extensions;
use crate::judge::{Verdict, history_note};
use crate::outcome::Outcome;
use crate::report::{Row, ScenarioInfo, minimum};
use crate::scratch::unique;
use crate::settings::{ADMIN_LIMIT, Settings};
use crate::worker::{Loss, still_valid, watch_loss};

pub(super) const SCENARIO: Scenario = Scenario {
    info: ScenarioInfo {
        id: "R14",
        title: "A lock released by force",
        what: "A client holds a lock while another releases it by force (`force_release`, \
               an administrator's `distlock release --force`), 10 times (short form: 3). \
               Once the holder was told, or its own deadline passed, a second client takes \
               the lock and holds it for two leases; the first releases in between. Must \
               hold: every forced release found the lock held, every holder's `lost()` \
               fired, the second client was granted every time, and the history (grants, \
               the forced release, every extension, losses, releases, both validities) \
               passes the checker: no extension of the forced lease succeeds after the \
               forced release, the first holder's release ends nothing of the second's, \
               and no two validities overlap. A lock bound to its process has no \
               extension to learn a forced release at.",
        untimed: true,
    },
    run,
};

/// The processes of the history: the two holders' clients and the
/// administrator.
const HOLDER: u64 = 1;
const NEXT: u64 = 2;
const ADMIN: u64 = 3;

fn run(server: &mut Server, settings: &Settings) -> Outcome<Vec<Row>> {
    if server.kind.process_bound() {
        return Ok(vec![not_applicable(
            "R14",
            server,
            "exclusive",
            "its locks are bound to their process, which no extension keeps, so a forced \
             release cannot be learned at one",
        )]);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    Ok(vec![runtime.block_on(forced_releases(server, settings))?])
}

/// What the runs came to.
#[derive(Default)]
struct Tally {
    forced: usize,
    told: usize,
    next_granted: usize,
    ops: Vec<Op>,
}

async fn forced_releases(server: &Server, settings: &Settings) -> Outcome<Row> {
    let runs = settings.pick(10, 3);
    let url = server.url();
    let options = LockOptions::builder().lease(settings.lease).build()?;
    let (holder_backend, holder_extensions) =
        Extensions::record(crate::worker::open_patiently(&url).await?, HOLDER);
    let (next_backend, next_extensions) =
        Extensions::record(crate::worker::open_patiently(&url).await?, NEXT);
    let holder = LockClient::new(holder_backend, options.clone());
    let next = LockClient::new(next_backend, options);
    let admin = crate::worker::open_patiently(&url).await?;
    let mut tally = Tally::default();
    for _ in 0..runs {
        let name = LockName::new(unique("r14"))?;
        one_run(&name, &holder, &next, &*admin, settings.lease, &mut tally).await?;
    }
    tally.ops.extend(holder_extensions.ops());
    tally.ops.extend(next_extensions.ops());
    let history = History::from_ops(std::mem::take(&mut tally.ops))?;
    let report = distlock_history::check(&history);
    let Tally {
        forced,
        told,
        next_granted,
        ..
    } = tally;
    Ok(Row {
        scenario: "R14",
        backend: server.kind.name(),
        kind: "exclusive".into(),
        verdict: Some(Verdict {
            acquisitions: runs + next_granted,
            overlaps: report.overlaps.len(),
            losses: told,
            histories_checked: report.checked - report.undecided.len(),
            history_violations: report.violations.len(),
            undecided: report.undecided.len(),
            history_note: history_note(&report),
            ..Verdict::default()
        }),
        detail: format!(
            "{forced} of {runs} forced releases found the lock held; the holder was told in \
             {told} of {runs}; the next client was granted in {next_granted} of {runs}"
        ),
        passed: forced == runs && told == runs && report.passed(),
        overlaps_allowed: None,
        minimum: minimum(forced == runs && next_granted == runs, || {
            format!(
                "{forced} of {runs} forced releases found the lock held, and the next \
                 client was granted in {next_granted} of {runs}"
            )
        }),
        applies: true,
    })
}

/// One forced release of `name`, recorded into `tally`.
async fn one_run(
    name: &LockName,
    holder: &LockClient,
    next: &LockClient,
    admin: &dyn distlock::backend::Backend,
    lease: Duration,
    tally: &mut Tally,
) -> Outcome<()> {
    let lock = name.to_string();
    let asked = now_ns();
    let first = holder.acquire_with(name, Duration::from_secs(30)).await?;
    let first_granted = now_ns();
    tally
        .ops
        .push(granted(HOLDER, asked, first_granted, &lock, &first));
    let first_loss = watch_loss(&first);

    let sent = now_ns();
    let forced = admin.force_release(name, ADMIN_LIMIT).await;
    tally
        .ops
        .push(force_release(sent, now_ns(), &lock, &forced));
    tally.forced += usize::from(matches!(forced, Ok(true)));

    // An honest holder learns of it at its next extension, a third of a
    // lease away; its deadline passes within a lease in any case. A
    // holder still valid after two is one that nothing told.
    let patience = tokio::time::Instant::now() + lease * 2;
    while still_valid(&first) && tokio::time::Instant::now() < patience {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let asked = now_ns();
    let second = match next.acquire_with(name, lease * 2).await {
        Ok(guard) => {
            let granted_ns = now_ns();
            tally
                .ops
                .push(granted(NEXT, asked, granted_ns, &lock, &guard));
            tally.next_granted += 1;
            let loss = watch_loss(&guard);
            Some((guard, granted_ns, loss))
        }
        Err(_) => {
            let call = Call::Acquire {
                name: lock.clone(),
                outcome: Acquired::NotGranted,
            };
            tally.ops.push(Op::new(NEXT, asked, now_ns(), call));
            None
        }
    };

    // The first holder releases while the second holds: an owner-checked
    // release ends nothing.
    tokio::time::sleep(lease).await;
    tally.told += usize::from(first.is_lost());
    let holding = Holding {
        process: HOLDER,
        guard: first,
        granted_ns: first_granted,
        loss: first_loss,
    };
    tally.ops.extend(holding.end(&lock).await);
    tokio::time::sleep(lease).await;
    if let Some((guard, granted_ns, loss)) = second {
        let holding = Holding {
            process: NEXT,
            guard,
            granted_ns,
            loss,
        };
        tally.ops.extend(holding.end(&lock).await);
    }
    Ok(())
}

/// A guard, as the history needs it.
struct Holding {
    process: u64,
    guard: LockGuard,
    /// When its grant's answer came.
    granted_ns: u64,
    loss: Loss,
}

/// An acquire that was granted `guard`.
fn granted(process: u64, asked: u64, answered: u64, lock: &str, guard: &LockGuard) -> Op {
    let call = Call::Acquire {
        name: lock.into(),
        outcome: Acquired::Granted {
            token: guard.fencing_token(),
        },
    };
    Op::new(process, asked, answered, call)
}

/// The administrator's forced release, as it answered.
fn force_release(sent: u64, answered: u64, lock: &str, outcome: &distlock::Result<bool>) -> Op {
    let outcome = match outcome {
        Ok(true) => Done::Ok,
        Ok(false) => Done::Refused,
        Err(_) => Done::Unknown,
    };
    let call = Call::ForceRelease {
        name: lock.into(),
        outcome,
    };
    match outcome {
        Done::Unknown => Op::pending(ADMIN, sent, call),
        _ => Op::new(ADMIN, sent, answered, call),
    }
}

impl Holding {
    /// Releases it: its loss, its release and its validity, from its
    /// grant's answer to the earliest of `lost()`, its deadline and the
    /// release being sent.
    async fn end(self, lock: &str) -> Vec<Op> {
        let Holding {
            process,
            guard,
            granted_ns,
            loss,
        } = self;
        // Lost before its watcher task had its turn, if not yet seen.
        let lost_ns = loss.at().or_else(|| guard.is_lost().then(now_ns));
        ended(process, lock, guard, granted_ns, lost_ns).await
    }
}

async fn ended(
    process: u64,
    lock: &str,
    guard: LockGuard,
    granted_ns: u64,
    lost_ns: Option<u64>,
) -> Vec<Op> {
    let token = guard.fencing_token();
    let deadline_ns = guard.valid_until().map(instant_ns);
    let sent = now_ns();
    let released = guard.release().await;
    let answered = now_ns();
    let mut ops = Vec::new();
    if let Some(lost_ns) = lost_ns {
        ops.push(Op::lost(process, lost_ns, lock, token));
    }
    let call = |outcome| Call::Release {
        name: lock.into(),
        token,
        outcome,
    };
    ops.push(match released {
        Ok(true) => Op::new(process, sent, answered, call(Done::Ok)),
        Ok(false) | Err(distlock::Error::Lost { .. }) => {
            Op::new(process, sent, answered, call(Done::Refused))
        }
        Err(_) => Op::pending(process, sent, call(Done::Unknown)),
    });
    let end = [Some(sent), lost_ns, deadline_ns]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(sent);
    if end > granted_ns {
        ops.push(Op::held(
            process,
            granted_ns,
            end,
            lock,
            token,
            Share::Exclusive,
        ));
    }
    ops
}

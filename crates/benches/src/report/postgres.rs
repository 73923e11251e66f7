//! The report's lines on PostgreSQL: how its transactions are counted, and
//! the goals and findings that set distlock's lease mode beside sqlx's
//! advisory lock.

use std::fmt::Write;

use super::{BackendResults, Contestant, find, spread};
use crate::markdown::{goal, opt, short};
use crate::scenarios::{Contender, Workload};
use crate::timeline::Contention;

/// sqlx's advisory lock in the uncontended table.
pub(super) const ADVISORY: &str = "sqlx's `PgAdvisoryLock`: `acquire` + `release_now` \
    (`SELECT pg_advisory_lock($1)`, `SELECT pg_advisory_unlock($1)`) on one connection";

/// sqlx's advisory lock as a contender.
pub(super) const ADVISORY_PER_TASK: &str =
    "sqlx's `PgAdvisoryLock` (`pg_advisory_lock` waits in the server, a connection per task)";

/// How PostgreSQL's transactions are counted, for the report's header.
pub(super) const COUNTING: &str = "- **PostgreSQL**: *server commands* are transactions: \
    deltas of `xact_commit + xact_rollback` in `pg_stat_database` for the bench's database. \
    Every statement distlock's backend sends is a transaction of its own, and so is each of \
    the advisory lock's. The counters also count what is not a statement of either: the \
    start-up of a connection (one transaction), the first use of a statement that sqlx \
    prepares (once per connection), the `LISTEN` and `UNLISTEN` of the backend's wake-up \
    listener, and the server's autovacuum. A connection publishes its counts when it \
    closes, and otherwise at most once a second, or, once idle, ten or more seconds later; \
    so they are read only around worker processes: when a contended run's window opens, \
    and again once every worker has exited (and the server has had half a second to \
    publish what their connections did). They therefore include the releases and the \
    ends of waits that follow the window's close, and any start-up transaction of a worker \
    that had not been published when the window opened: a few per worker process. Each \
    reading is made on a connection of its own, and its own two transactions are taken \
    off. Rounds of the uncontended scenario last a fraction of a second on long-lived \
    connections, so they are not counted, and neither is the many-locks scenario, whose \
    acquisitions would be published while the locks are held; its extension calls are \
    its statements (one per call).";

/// The uncontended goal: the client against the same statements issued
/// directly.
pub(super) fn uncontended_goals(b: &BackendResults) -> Vec<String> {
    let u = &b.uncontended;
    let (Some(client), Some(calls)) = (u.side(Contender::Client), u.baseline()) else {
        return Vec::new();
    };
    let ratio = client.per_second() / calls.per_second();
    vec![goal(
        ratio >= 0.9,
        format!(
            "PostgreSQL: the client reaches at least 0.9 of the same statements issued \
             directly (the backend's `try_acquire` + `release`): {ratio:.2} ({:.0} against \
             {:.0} cycles/s){}.",
            client.per_second(),
            calls.per_second(),
            spread(client, calls),
        ),
    )]
}

/// What the uncontended rows on PostgreSQL show.
pub(super) fn uncontended_findings(b: &BackendResults) -> Option<String> {
    let u = &b.uncontended;
    let client = u.side(Contender::Client)?;
    let calls = u.side(Contender::BackendCalls)?;
    let mut t = format!(
        "**PostgreSQL.** A cycle of ours is two statements, each its own transaction: the \
         acquire, one `INSERT … ON CONFLICT (name) DO UPDATE … WHERE` on the name's row \
         judged by the server's clock, and the release, one `UPDATE` that ends our grant \
         and notifies the name's wake-up channel in the same statement. The baseline sends \
         the same two; the client made {:.2} of its cycles. ",
        client.per_second() / calls.per_second(),
    );
    if let Some(advisory) = u.side(Contender::PgAdvisoryLock) {
        let _ = write!(
            t,
            "sqlx's advisory lock is also two statements, `pg_advisory_lock` and \
             `pg_advisory_unlock`, which write no row and keep the lock in the server's \
             memory for the connection's session: {:.0} cycles/s, {:.2} of the baseline's. \
             It has no fencing token and no lease: the lock lasts as long as the \
             connection, and is lost with it. ",
            advisory.per_second(),
            advisory.per_second() / calls.per_second(),
        );
    }
    t.push_str(advisory_mode());
    Some(t)
}

/// The contention goals on PostgreSQL in `workload`.
pub(super) fn contention_goals(b: &BackendResults, workload: Workload) -> Vec<String> {
    let scenario = workload.label();
    let Some(ours) = find(b, Contestant::Ours, workload) else {
        return Vec::new();
    };
    let mut goals = Vec::new();
    if let Some(advisory) = find(b, Contestant::PgAdvisoryLock, workload) {
        let factor = super::ratio(ours.hand_off_p50, advisory.hand_off_p50);
        goals.push(goal(
            factor <= 2.0,
            format!(
                "PostgreSQL, {scenario}: lease mode's hand-off p50 within 2x sqlx's advisory \
                 lock's: {} against {} ({factor:.2}x; p99 {} against {}).",
                short(ours.hand_off_p50),
                short(advisory.hand_off_p50),
                short(ours.hand_off_p99),
                short(advisory.hand_off_p99),
            ),
        ));
    }
    if let Some(per) = ours.commands_per_acquisition() {
        goals.push(goal(
            per <= 3.0,
            format!(
                "PostgreSQL, {scenario}: at most 3 statements per acquisition in lease mode, \
                 counted as transactions: {per:.2} ({}).",
                ours.commands
                    .as_ref()
                    .map_or("—".into(), |c| c.per(ours.acquisitions.max(1) as f64)),
            ),
        ));
    }
    goals
}

/// Transactions per acquisition of one run, and its hand-offs, as prose.
fn acquisition_cost(r: &Contention) -> String {
    format!(
        "{} transactions per acquisition, hand-off p50 {} and p99 {}, {:.0} acquisitions/s",
        opt(r.commands_per_acquisition()),
        short(r.hand_off_p50),
        short(r.hand_off_p99),
        r.per_second,
    )
}

/// What the contended runs on PostgreSQL show, over `workloads`.
pub(super) fn contention_findings(b: &BackendResults, workloads: &[Workload]) -> Vec<String> {
    let mut costs = Vec::new();
    for &workload in workloads {
        if let (Some(ours), Some(advisory)) = (
            find(b, Contestant::Ours, workload),
            find(b, Contestant::PgAdvisoryLock, workload),
        ) {
            costs.push(format!(
                "{}: ours {}; the advisory lock {}",
                workload.label(),
                acquisition_cost(ours),
                acquisition_cost(advisory),
            ));
        }
    }
    if costs.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "**PostgreSQL, waiting.** sqlx's waiters wait inside the server: each task's \
         `pg_advisory_lock` blocks on its own connection, and the server grants the lock to \
         the next of them as soon as the holder's `pg_advisory_unlock` runs, with no round \
         trip between, in two statements per acquisition. Ours wait in the process: within a \
         process, a release hands the lock to the next waiting task in one statement (the \
         hand-over's `UPDATE`); across processes, a waiter's failed `INSERT` is followed by \
         a statement that reads why the name is held and until when, and the waiter then \
         sleeps until the release's notification reaches its process's listening \
         connection (which `LISTEN`s on the name's channel) or the holder's lease ends, \
         and tries again. Transactions, hand-offs and rates by workload: {}. {}",
        costs.join("; "),
        advisory_mode(),
    )]
}

/// What the report says of distlock's own advisory mode, which this run
/// does not measure: whether the backend built here has one at all.
fn advisory_mode() -> &'static str {
    let url = "postgres://host/db?mode=advisory";
    if distlock::postgres::PostgresConfig::parse(url).is_ok() {
        "distlock's own advisory mode (`mode=advisory`) is not measured in this run: every \
         PostgreSQL figure here is lease mode's."
    } else {
        "distlock's own advisory mode (`mode=advisory`) does not exist yet: the backend \
         refuses it as not supported, so it has no figures here."
    }
}

//! The report's lines on PostgreSQL: how its transactions are counted, and
//! the goals and findings that set distlock's lease mode and its advisory
//! mode, each a target of its own, beside sqlx's advisory lock, which is
//! measured beside each of them in that target's own rounds and runs.

use std::fmt::Write;
use std::time::Duration;

use super::{BackendResults, Contestant, cross_hand_off_goal, find, pg_steps, share_goal, spread};
use crate::markdown::{goal, opt, short};
use crate::pg_steps::Step;
use crate::scenario::Scenario;
use crate::timeline::Contention;
use crate::uncontended::Contender;
use crate::worker::Workload;

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
    listener, the server's autovacuum, and the reading of notifications: when a statement \
    that notifies commits (a release, in either mode), every connection of the database \
    that listens, on any channel (the wake-up listener of each process that waits, or \
    waited in the last few seconds), reads the notification queue in a transaction of its \
    own, so one release can add a transaction per listening process, fewer when releases \
    come close together. A connection publishes its counts when it closes, and otherwise \
    at most once a second, or, once idle, ten or more seconds later; so they are read only \
    around worker processes: when a contended run's window opens, and again once every \
    worker has exited (and the server has had half a second to publish what their \
    connections did). They therefore include the releases and the \
    ends of waits that follow the window's close, and any start-up transaction of a worker \
    that had not been published when the window opened: a few per worker process. Each \
    reading is made on a connection of its own, and its own two transactions are taken \
    off. Rounds of the uncontended scenario last a fraction of a second on long-lived \
    connections, so they are not counted; instead, after the rounds, each contender \
    (but the client on a server beside) runs a pass of its own for half a second, on \
    connections opened for it and closed after it, and its count, less that of a pass \
    with no cycle (opening and closing the same), is divided by the pass's cycles. It \
    includes the start-up of any connection opened only once a lock is taken, spread \
    over those cycles. The many-locks scenario is not counted: its acquisitions would \
    be published while the locks are held; its extension calls are its statements (one \
    per call). In advisory mode, each connection the backend opens for \
    its grants and waiting writers (one per lock held or writer waiting; released ones are \
    kept for later attempts, eight at most, and one is opened ahead) adds its start-up \
    transaction, and the first use of a name adds the `INSERT` that gives it its key, and \
    an acquire that found none. Section 4's waiters curve, whose windows are short and \
    whose processes many, counts statements instead, as they end: the `calls` of \
    `pg_stat_statements` (`BEGIN` and `COMMIT` among them), read when the window opens and \
    when it closes (see there).";

// The header says each counting pass lasts half a second.
const _: () = assert!(crate::pg_counts::PASS.as_millis() == 500);

/// Each measured-only step of advisory mode's uncontended cycle, in the
/// uncontended table.
pub(super) fn step_label(step: Step) -> &'static str {
    match step {
        Step::BarePair => {
            "measured only: `pg_try_advisory_lock(class, objid)` + `pg_advisory_unlock`, \
             prepared once and sent directly on one connection (sqlx's pair as a try, on \
             advisory mode's kind of key; no row)"
        }
        Step::KeyRead => "measured only: the same, the key read from the name's row in the acquire",
        Step::TokenBumped => {
            "measured only: the same, and the fencing token bumped in the row when granted"
        }
        Step::RowKept => {
            "measured only: the backend's statements with the name's row kept on release \
             (adding the holder's record, the idle timeout and keepalives, the release's \
             `pg_notify`)"
        }
    }
}

/// Why the held-locks curve leaves advisory mode out.
pub(crate) const MANY_LEFT_OUT_ADVISORY: &str = "since each lock advisory mode holds is a \
    session advisory lock on a server connection of its own, pinned to the grant: the \
    scenario's locks, held at once, would need as many of the server's connections \
    (`max_connections`)";

/// What the findings say when advisory mode was not given to the run.
const ADVISORY_NOT_MEASURED: &str = "distlock's own advisory mode (`mode=advisory`) was not \
    given to this run: every PostgreSQL figure here is lease mode's.";

/// The uncontended goal of one PostgreSQL target, lease mode or advisory
/// mode: its client against the same statements issued directly.
pub(super) fn uncontended_goals(b: &BackendResults) -> Vec<String> {
    let u = &b.uncontended;
    let (Some(client), Some(calls)) = (u.side(Contender::Client), u.baseline()) else {
        return Vec::new();
    };
    let mut goals = vec![share_goal(
        &b.label,
        0.9,
        "the same statements issued directly (the backend's `try_acquire` + `release`)",
        client,
        calls,
    )];
    if b.advisory_mode
        && let Some(sqlx) = u.side(Contender::PgAdvisoryLock)
    {
        let share = client.per_second() / sqlx.per_second();
        goals.push(goal(
            share >= 0.5,
            format!(
                "{}: the client makes at least 0.5 of the cycles of sqlx's advisory lock \
                 in the same rounds: {share:.2} ({:.0} against {:.0} cycles/s){}.",
                b.label,
                client.per_second(),
                sqlx.per_second(),
                spread(client, sqlx),
            ),
        ));
    }
    goals
}

/// What the uncontended rows on PostgreSQL show: lease mode's and
/// advisory mode's, each beside the sqlx rows of its own rounds.
pub(super) fn uncontended_findings(
    lease: Option<&BackendResults>,
    advisory: Option<&BackendResults>,
) -> Vec<String> {
    let mut text = Vec::new();
    if let Some(b) = lease {
        text.extend(lease_uncontended(b, advisory.is_none()));
    }
    if let Some(b) = advisory {
        text.extend(advisory_uncontended(b, lease));
        text.extend(pg_steps::steps_findings(&b.uncontended));
    }
    text
}

/// Lease mode's uncontended rows, and whether to say that advisory mode
/// was not measured.
fn lease_uncontended(b: &BackendResults, alone: bool) -> Option<String> {
    let u = &b.uncontended;
    let client = u.side(Contender::Client)?;
    let calls = u.side(Contender::BackendCalls)?;
    let mut t = format!(
        "**PostgreSQL, lease mode.** A cycle of ours is two statements, each its own \
         transaction: the acquire, one `INSERT … ON CONFLICT (name) DO UPDATE … WHERE` on \
         the name's row judged by the server's clock, and the release, one `UPDATE` that \
         ends our grant and notifies the name's wake-up channel in the same statement. The \
         baseline sends the same two; the client made {:.2} of its cycles. ",
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
    if alone {
        t.push_str(ADVISORY_NOT_MEASURED);
    }
    Some(t.trim_end().to_owned())
}

/// Advisory mode's uncontended rows, with lease mode's (measured in rounds
/// of its own) for the comparison of each with its sqlx rows.
fn advisory_uncontended(b: &BackendResults, lease: Option<&BackendResults>) -> Option<String> {
    let u = &b.uncontended;
    let client = u.side(Contender::Client)?;
    let calls = u.side(Contender::BackendCalls)?;
    let mut t = format!(
        "**PostgreSQL, advisory mode.** A grant is two statements, each its own \
         transaction, sent on a connection the backend keeps outside its pool for the \
         grant (one of its spare connections, given back by the release): the acquire, one \
         statement that reads the name's key from the token table, tries \
         `pg_try_advisory_lock` on it, which never waits, and, only when granted, bumps the \
         name's fencing token and records the grant in the same row with an `UPDATE`, and \
         sets the connection's `idle_session_timeout` to the lease; the release, one \
         `SELECT` of `pg_advisory_unlock`, that timeout's reset and `pg_notify` on the \
         name's wake-up channel. But the release also deletes the row of a name nobody \
         holds any more (unused names cost nothing), so in this loop every acquire first \
         finds no key, then inserts one (a third statement) and asks again (a fourth): four \
         round trips a cycle, where sqlx's lock makes two. Only a token ahead of the \
         server's clock waits for the WAL flush; the rest commit without waiting (see the \
         header). As lease mode's, the statements are prepared once per connection, \
         then only bound and run, since no transaction pooler is in the way here. The \
         backend's direct calls made {:.0} cycles/s and the \
         client {:.2} of them. ",
        calls.per_second(),
        client.per_second() / calls.per_second(),
    );
    if let Some(sqlx) = u.side(Contender::PgAdvisoryLock) {
        let _ = write!(
            t,
            "sqlx's advisory lock, in the same rounds, made {:.0} cycles/s, {:.2} of the \
             direct calls': it takes and gives back the same kind of lock (on a one-`bigint` \
             key, where advisory mode uses two `int4`s), with statements it prepares once \
             per connection too, but it updates no row, sets no timeout and notifies nobody, so \
             it has no fencing token, and its waiters wait in the server. ",
            sqlx.per_second(),
            sqlx.per_second() / calls.per_second(),
        );
        let lease_share = lease.and_then(|l| {
            let ours = l.uncontended.side(Contender::Client)?;
            let theirs = l.uncontended.side(Contender::PgAdvisoryLock)?;
            Some(ours.per_second() / theirs.per_second())
        });
        if let Some(lease_share) = lease_share {
            let _ = write!(
                t,
                "Each mode ran its own rounds, with sqlx's lock in them: against sqlx's \
                 cycles of the same rounds, advisory mode's client made {:.2} and lease \
                 mode's {lease_share:.2}.",
                client.per_second() / sqlx.per_second(),
            );
        }
    }
    Some(t.trim_end().to_owned())
}

/// The contention goals on PostgreSQL in `scenario`.
pub(super) fn contention_goals(b: &BackendResults, scenario: Scenario) -> Vec<String> {
    let label = scenario.label();
    let Some(ours) = find(b, Contestant::Ours, scenario) else {
        return Vec::new();
    };
    let mut goals = Vec::new();
    if let Some(advisory) = find(b, Contestant::PgAdvisoryLock, scenario) {
        goals.push(cross_hand_off_goal(
            &format!("PostgreSQL, lease mode, {label}"),
            ours,
            "sqlx's advisory lock",
            advisory,
            2.0,
        ));
    }
    if let Some(per) = ours.commands_per_acquisition() {
        goals.push(goal(
            per <= 3.0,
            format!(
                "PostgreSQL, {label}: at most 3 statements per acquisition in lease mode, \
                 counted as transactions: {per:.2} ({}).",
                ours.commands
                    .as_ref()
                    .map_or("—".into(), |c| c.per(ours.acquisitions.max(1) as f64)),
            ),
        ));
    }
    goals
}

/// The contention goal of advisory mode in `scenario`: its hand-off beside
/// that of sqlx's advisory lock, measured in the same pass.
pub(super) fn advisory_contention_goals(b: &BackendResults, scenario: Scenario) -> Vec<String> {
    let (Some(ours), Some(advisory)) = (
        find(b, Contestant::Ours, scenario),
        find(b, Contestant::PgAdvisoryLock, scenario),
    ) else {
        return Vec::new();
    };
    vec![cross_hand_off_goal(
        &format!("{}, {}", b.label, scenario.label()),
        ours,
        "sqlx's advisory lock, measured beside it",
        advisory,
        1.5,
    )]
}

/// Transactions per acquisition of one run, and its hand-offs, as prose.
fn acquisition_cost(r: &Contention) -> String {
    let share = if r.hand_offs == 0 {
        0.0
    } else {
        r.cross_process as f64 / r.hand_offs as f64 * 100.0
    };
    format!(
        "{} transactions per acquisition, hand-off p50 {} and p99 {} ({share:.0} % to \
         another process), {:.0} acquisitions/s",
        opt(r.commands_per_acquisition()),
        short(r.hand_off_p50),
        short(r.hand_off_p99),
        r.per_second,
    )
}

/// Each workload's costs on `b`, ours beside sqlx's advisory lock.
fn costs(b: &BackendResults, workloads: &[Workload]) -> Vec<String> {
    workloads
        .iter()
        .filter_map(|&workload| {
            let ours = find(b, Contestant::Ours, workload)?;
            let advisory = find(b, Contestant::PgAdvisoryLock, workload)?;
            Some(format!(
                "{}: ours {}; sqlx's advisory lock {}",
                workload.label(),
                acquisition_cost(ours),
                acquisition_cost(advisory),
            ))
        })
        .collect()
}

/// What the contended runs on PostgreSQL show, over `workloads`: lease
/// mode's and advisory mode's, each beside sqlx's runs of its own pass.
pub(super) fn contention_findings(
    lease: Option<&BackendResults>,
    advisory: Option<&BackendResults>,
    workloads: &[Workload],
) -> Vec<String> {
    let mut text = Vec::new();
    if let Some(b) = lease {
        let costs = costs(b, workloads);
        if !costs.is_empty() {
            let mut t = format!(
                "**PostgreSQL, lease mode, waiting.** sqlx's waiters wait inside the server: \
                 each task's `pg_advisory_lock` blocks on its own connection, and the server \
                 grants the lock to the next of them as soon as the holder's \
                 `pg_advisory_unlock` runs, with no round trip between, in two statements per \
                 acquisition. Ours wait in the process: within a process, a release hands the \
                 lock to the next waiting task in one statement (the hand-over's `UPDATE`); \
                 across processes, a waiter's failed `INSERT` is followed by a statement that \
                 reads why the name is held and until when, and the waiter then sleeps until \
                 the release's notification reaches its process's listening connection (which \
                 `LISTEN`s on the name's channel) or the holder's lease ends, and tries again. \
                 Transactions, hand-offs and rates by workload: {}. ",
                costs.join("; "),
            );
            if advisory.is_none() {
                t.push_str(ADVISORY_NOT_MEASURED);
            }
            text.push(t.trim_end().to_owned());
        }
    }
    if let Some(b) = advisory {
        text.extend(advisory_contention(b, workloads));
    }
    text
}

/// What advisory mode's contended runs show.
fn advisory_contention(b: &BackendResults, workloads: &[Workload]) -> Option<String> {
    let costs = costs(b, workloads);
    if costs.is_empty() {
        return None;
    }
    let mut t = String::from(
        "**PostgreSQL, advisory mode, waiting.** Its waiters wait in the process, as lease \
         mode's do, but on the advisory lock: a try is the same acquire statement as in the \
         uncontended scenario, whose `pg_try_advisory_lock` answers at once. A writer that \
         is refused keeps its connection and, in the same statement, takes the name's intent \
         key shared on it (which keeps later readers back); it then sleeps until the \
         release's `pg_notify` reaches its process's listening connection, or for a second \
         at most (a holder whose connection ended frees the lock without a notification), \
         tries again on the same connection, and gives the intent up in the statement that \
         grants it, or in one more statement when it stops waiting. Within a process one \
         task at a time tries for a name (the client's in-process queue), and as this mode \
         offers no hand-over, the lock passes to the next task of the same process by a \
         release and a new acquire, two statements, without waiting for a notification. So \
         every grant ends in a release that notifies, and each release wakes the waiting \
         task of every process that waits, which tries once, as the releasing process's \
         next task does; only one of these tries wins. Its transactions per acquisition \
         count those tries that lose, and the listening connection of each waiting process \
         reading every release's notification (see the header), beside the grant and the \
         release. sqlx's waiters, as above, block in the server, which grants them the lock \
         itself. ",
    );
    if let Some(calls) = b
        .uncontended
        .side(Contender::BackendCalls)
        .filter(|calls| calls.cycles > 0)
    {
        let _ = write!(
            t,
            "A hand-off here includes at least the winning try, a whole statement; in the \
             uncontended rounds, a cycle of one acquire and one release took {} on average. ",
            short(Duration::from_secs_f64(1.0 / calls.per_second())),
        );
    }
    let _ = write!(
        t,
        "sqlx's lock ran in this mode's own pass, each of its runs right after ours in the \
         same workload, so each comparison here is between runs made one after the other. \
         Transactions, hand-offs and rates by workload: {}. ",
        costs.join("; "),
    );
    // Overlaps and failed calls, said either way.
    let troubles: Vec<String> = workloads
        .iter()
        .filter_map(|&workload| {
            let ours = find(b, Contestant::Ours, workload)?;
            (ours.overlaps > 0 || ours.errors > 0).then(|| {
                format!(
                    "{}: {} overlapping holds, {} failed calls",
                    workload.label(),
                    ours.overlaps,
                    ours.errors
                )
            })
        })
        .collect();
    if troubles.is_empty() {
        t.push_str("No two of its holds overlapped, and no call failed, in any workload.");
    } else {
        let _ = write!(
            t,
            "Not every run was clean: {}; see the tables.",
            troubles.join("; ")
        );
    }
    Some(t)
}

//! The SQL of advisory mode, built once per table.
//!
//! Locks are session advisory locks on the two-`int4` key
//! `(class, objid)`; the table gives each name its `objid` and keeps its
//! latest fencing token, and, under the server process id of each grant's
//! session, that grant's token and holder (for `list`). Only the table's
//! quoted name is put into the text; every value goes as a bind parameter.

use crate::clock::CLOCK;
use crate::table::TableName;
use crate::terms;

/// The most holder entries a name's row keeps: entries of sessions that
/// ended pile up while readers come and go, until a writer's grant resets
/// them.
const MAX_HOLDER_ENTRIES: u32 = 1000;

/// How long a row that was given its key and never granted is kept, in
/// µs: the attempt that gave it the key asks for the lock at once, and
/// must find it.
const KEYING_GRACE_US: i64 = 60_000_000;

/// The `pg_locks` rows of our class's two-`int4` advisory locks in this
/// database, as `p`, with the class as `$1`.
const OURS: &str = "p.locktype = 'advisory'
    AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND p.classid = $1::oid AND p.objsubid = 2";

/// Lets the statement's transaction commit without waiting for its WAL to
/// reach the disk. Only for writes a crash may lose: a release's deletion,
/// a key given to a name, and a token floored by the server's clock, which
/// the next token after a restart passes anyway (see `docs/postgres.md`,
/// *Tokens across a crash*).
const NO_FLUSH_WAIT: &str = "set_config('synchronous_commit', 'off', true)";

/// In the final `SELECT` of a statement whose `bumped` expression answers
/// `floored` (the new token is the server's clock): only such a bump
/// commits without waiting for the flush. A campaign's bump waits anyway,
/// so that no term anyone read is lost in a crash.
pub(crate) fn flush_wait_unless_floored(terms: Option<&TableName>) -> String {
    match terms {
        None => format!("CASE WHEN (SELECT floored FROM bumped) THEN {NO_FLUSH_WAIT} END"),
        Some(_) => "NULL".to_owned(),
    }
}

/// A grant's new token on the name's row `t`, beside the server's clock
/// `c` ([`CLOCK`]): `greatest(previous + 1, the clock in µs)`. Every grant
/// of the name raises it so, of either kind, in advisory mode and as a
/// transaction lock ([`crate::xact`]).
pub(crate) const NEXT_TOKEN: &str = "greatest(t.fencing_token + 1, c.now_us)";

/// The name's `holders` after a grant made on server process `pid` (SQL
/// text of a `text` value) to `holder` (SQL text of a JSON text value):
/// a writer's entry alone, since earlier entries are of sessions that no
/// longer hold the name; a reader's beside the others', which are reset
/// once they reach [`MAX_HOLDER_ENTRIES`]. The entry records the grant's
/// token, [`NEXT_TOKEN`].
pub(crate) fn holders_after_grant(shared: bool, pid: &str, holder: &str) -> String {
    let entry = format!(
        "jsonb_build_object({pid},
             jsonb_build_object('token', {NEXT_TOKEN}, 'holder', {holder}::jsonb))"
    );
    if shared {
        format!(
            "CASE WHEN (SELECT count(*) FROM jsonb_object_keys(t.holders)) >= {MAX_HOLDER_ENTRIES}
                  THEN '{{}}'::jsonb ELSE t.holders END || {entry}"
        )
    } else {
        entry
    }
}

/// Gives a name its `objid` unless it has one: `$1` name, `$2` objid; the
/// token starts at the server's clock, which tells the sweep how long ago
/// a row that was never granted got its key.
pub(crate) fn insert_key(t: &str) -> String {
    format!(
        "INSERT INTO {t} (name, objid, fencing_token) SELECT $1, $2, c.now_us FROM {CLOCK}
         WHERE {NO_FLUSH_WAIT} IS NOT NULL
         ON CONFLICT (name) DO NOTHING"
    )
}

/// Every statement of advisory mode, for one table.
#[derive(Debug)]
pub(crate) struct Statements {
    acquire_exclusive: String,
    acquire_shared: String,
    /// A campaign's exclusive acquire, which records the term it grants.
    pub(crate) campaign: String,
    /// Fair mode's wait in the server's queue, and a campaign's, which
    /// records the term it grants (see [`wait_in_line`]).
    pub(crate) wait_in_line: String,
    pub(crate) campaign_in_line: String,
    /// Whether server process `$3` waits in line for the key `($1, $2)`
    /// or was granted it (see [`place_taken`]).
    pub(crate) place_taken: String,
    /// Gives a name its `objid` unless it has one: `$1` name, `$2` objid;
    /// the token starts at the server's clock, which tells the sweep how
    /// long ago a row that was never granted got its key.
    pub(crate) insert_key: String,
    pub(crate) release_exclusive: String,
    pub(crate) release_shared: String,
    /// Checks the session: answers its server process id.
    pub(crate) check: String,
    pub(crate) end_wait: String,
    pub(crate) force_release: String,
    pub(crate) list: String,
    /// Fair mode's waits in the server's queues (see [`waiters`]).
    pub(crate) waiters: String,
    /// Deletes at most `$2` rows no session uses in class `$1`.
    pub(crate) sweep: String,
}

impl Statements {
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.quoted();
        Self {
            acquire_exclusive: acquire(t, false, None),
            acquire_shared: acquire(t, true, None),
            campaign: acquire(t, false, Some(&table.terms())),
            wait_in_line: wait_in_line(t, None),
            campaign_in_line: wait_in_line(t, Some(&table.terms())),
            place_taken: place_taken(),
            insert_key: insert_key(t),
            release_exclusive: release(t, "pg_advisory_unlock"),
            release_shared: release(t, "pg_advisory_unlock_shared"),
            check: "SELECT pg_backend_pid()".to_owned(),
            end_wait: "SELECT pg_advisory_unlock_shared($1, $2 + 1),
                              set_config('idle_session_timeout', '0', false),
                              pg_notify($3, $4)"
                .to_owned(),
            force_release: force_release(t),
            list: list(t),
            waiters: waiters(t),
            sweep: sweep(t),
        }
    }

    pub(crate) fn acquire(&self, shared: bool) -> &str {
        if shared {
            &self.acquire_shared
        } else {
            &self.acquire_exclusive
        }
    }

    pub(crate) fn release(&self, shared: bool) -> &str {
        if shared {
            &self.release_shared
        } else {
            &self.release_exclusive
        }
    }
}

/// One attempt, as one statement on the session that is to hold the lock:
/// the name's key is read from the table, the lock tried without waiting,
/// and, only when granted, the name's token bumped to
/// `greatest(previous + 1, the server's clock in µs)` and this grant
/// recorded under the session's process id.
///
/// A reader first looks for waiting writers' intent (`objid + 1`, held
/// shared by each waiting writer) and does not try while one waits. A
/// writer that will wait (`$6`) takes the intent when not granted, unless
/// it holds it already (`$5`, the `objid` whose intent it holds), and
/// gives it up when granted. A name whose row was deleted and made again
/// may have another `objid`: the old intent is given up for the new.
///
/// The session gets an idle timeout of `$3` ms while it holds the lock or
/// an intent, so that the server ends a session whose holder stopped
/// checking it; a session going back to the spares gets none. The server
/// also probes the holder's TCP connection once it has been silent that
/// long, three times a second apart: a holder cut off in the middle of
/// sending a statement is not idle, yet its connection ends, and the
/// lock with it, no sooner than the idle timeout would have ended it.
///
/// A campaign's attempt (`terms` given) also appends the term to the
/// election's record when granted (see [`terms::appended_after`]), in the
/// same statement as the token's bump, so that both commit or neither
/// does. The advisory lock itself is not undone with a statement that
/// fails; but the attempt then fails, and its session, dropped, ends the
/// lock: a grant counts only with its token bumped, and then with its
/// term recorded. Only the session holding the lock bumps and records, so
/// the appends come in the order of the grants.
///
/// `$1` class, `$2` name, `$3` idle timeout, `$4` holder as JSON text,
/// `$5` the `objid` whose intent is held, if any, `$6` waits as a writer,
/// and for a campaign `$7` the holder as JSON text with its label whole.
/// No row when the name has no key yet; otherwise its `objid`, whether
/// granted, the token, whether a writer waits (for readers), and the
/// session's process id.
///
/// A bump to the server's clock commits without waiting for the WAL
/// flush, one ahead of the clock waits (see [`flush_wait_unless_floored`]).
fn acquire(t: &str, shared: bool, terms: Option<&TableName>) -> String {
    let token = NEXT_TOKEN;
    let holders = holders_after_grant(shared, "pg_backend_pid()::text", "$4::text");
    let tried = if shared {
        format!(
            "w AS MATERIALIZED (
                 SELECT k.objid, EXISTS (
                     SELECT FROM pg_locks AS p
                     WHERE {OURS} AND p.objid = (k.objid + 1)::oid AND p.granted
                 ) AS writer_waits
                 FROM k
             ), l AS MATERIALIZED (
                 SELECT w.objid, w.writer_waits,
                        CASE WHEN w.writer_waits THEN false
                             ELSE pg_try_advisory_lock_shared($1, w.objid) END AS granted
                 FROM w
             )"
        )
    } else {
        "l AS MATERIALIZED (
             SELECT k.objid, false AS writer_waits,
                    pg_try_advisory_lock($1, k.objid) AS granted
             FROM k
         )"
        .to_owned()
    };
    let recorded = terms.map_or_else(String::new, |terms| {
        format!(",\n{}", terms::appended_after("bumped", terms, "$2", "$7"))
    });
    let flush = flush_wait_unless_floored(terms);
    format!(
        "WITH k AS (SELECT objid FROM {t} WHERE name = $2),
         {tried},
         bumped AS (
             UPDATE {t} AS t SET fencing_token = {token}, holders = {holders}
             FROM l, {CLOCK}
             WHERE t.name = $2 AND l.granted
             RETURNING t.fencing_token, t.fencing_token = c.now_us AS floored
         ){recorded}
         SELECT l.objid, l.granted, (SELECT fencing_token FROM bumped), l.writer_waits,
                pg_backend_pid(),
                CASE WHEN l.granted AND $5 IS NOT NULL
                         THEN pg_advisory_unlock_shared($1, $5 + 1)
                     WHEN NOT l.granted AND $6 AND $5 IS DISTINCT FROM l.objid
                         THEN CASE WHEN $5 IS NULL
                                        OR pg_advisory_unlock_shared($1, $5 + 1) IS NOT NULL
                                   THEN pg_try_advisory_lock_shared($1, l.objid + 1) END
                END,
                set_config('idle_session_timeout',
                           CASE WHEN l.granted OR $6 THEN $3 ELSE '0' END, false),
                set_config('tcp_keepalives_idle',
                           CASE WHEN l.granted OR $6 THEN ceil($3::numeric / 1000)::text
                                ELSE '0' END, false),
                set_config('tcp_keepalives_interval',
                           CASE WHEN l.granted OR $6 THEN '1' ELSE '0' END, false),
                set_config('tcp_keepalives_count',
                           CASE WHEN l.granted OR $6 THEN '3' ELSE '0' END, false),
                {flush}
         FROM l"
    )
}

/// Has the server check, every second while a statement runs, that the
/// session's client is still connected: a waiter in line whose process
/// died, or that dropped its wait, leaves the line within a second, not
/// only when its turn comes. The server arms the check as a statement
/// starts, so it is set by a statement of its own, sent just before the
/// wait's; a session keeps it.
pub(crate) const CHECK_CONNECTION: &str = "SET client_connection_check_interval = 1000";

/// Fair mode's wait, on a session that holds the name's writers' intent
/// (`objid + 1`, shared): `pg_advisory_lock` waits in the server's queue
/// for the name's key, under a `lock_timeout` of `$3` ms, and once granted
/// the same statement bumps the token and records the grant as
/// [`acquire`] does, gives the intent up, and takes the `lock_timeout`
/// off. While it waits, the server checks the client's connection (see
/// [`CHECK_CONNECTION`]), and the session's `application_name` names the
/// waiter (`$6`, see [`super::waiters`]), for the statement's transaction
/// only, so that the listing can tell who waits; it is back to the
/// session's own once the statement ends, granted or not. Until then the
/// intent keeps the name's row, and so its key, from being deleted.
///
/// The lock waits in a `MATERIALIZED` expression that the update reads,
/// so the token is bumped after the grant, from the latest committed row
/// (an update in `READ COMMITTED` reads the row's newest version, not the
/// statement's snapshot, where `REPEATABLE READ` fails with 40001: every
/// session is set to `READ COMMITTED` when it opens, whatever the
/// server's default). The lock itself is not undone should the rest
/// fail; the waiter then drops the session, which ends it.
///
/// `$1` class, `$2` objid, `$3` lock timeout, `$4` holder as JSON text,
/// `$5` name, `$6` the waiter's application name, and for a campaign `$7`
/// the holder as JSON text with its label whole. Answers the token (`NULL` if the name's row went, which
/// the intent prevents) and the session's process id.
fn wait_in_line(t: &str, terms: Option<&TableName>) -> String {
    let token = NEXT_TOKEN;
    let holders = holders_after_grant(false, "pg_backend_pid()::text", "$4::text");
    let recorded = terms.map_or_else(String::new, |terms| {
        format!(",\n{}", terms::appended_after("bumped", terms, "$5", "$7"))
    });
    let flush = flush_wait_unless_floored(terms);
    format!(
        "WITH s AS MATERIALIZED (
             SELECT set_config('lock_timeout', $3, false),
                    set_config('application_name', $6, true)
         ), l AS MATERIALIZED (
             SELECT pg_advisory_lock($1, $2) FROM s
         ), bumped AS (
             UPDATE {t} AS t SET fencing_token = {token}, holders = {holders}
             FROM l, {CLOCK}
             WHERE t.name = $5 AND t.objid = $2
             RETURNING t.fencing_token, t.fencing_token = c.now_us AS floored
         ){recorded}
         SELECT (SELECT fencing_token FROM bumped), pg_backend_pid(),
                pg_advisory_unlock_shared($1, $2 + 1), set_config('lock_timeout', '0', false),
                {flush}"
    )
}

/// Whether server process `$3` has a place in the queue of the key
/// `($1, $2)`, waiting there or granted: asked from another connection,
/// while the process's own session waits. That session tried the key and
/// was refused before, so any entry of its for the key is its place.
fn place_taken() -> String {
    format!(
        "SELECT EXISTS (
             SELECT FROM pg_locks AS p
             WHERE {OURS} AND p.objid = $2::oid AND p.pid = $3
         )"
    )
}

/// Unlocks `($1, $2)` with `unlock`, takes the idle timeout off, and
/// announces the release on channel `$3` with payload `$4` (sent at
/// commit, so after the unlock). Answers whether the lock was held.
///
/// The name's row goes too when, after the unlock, no session holds its
/// key or its writers' intent and its token is behind the server's clock.
fn release(t: &str, unlock: &str) -> String {
    // A `CASE` evaluates in order: `pg_locks` is read after the unlock.
    format!(
        "WITH u AS MATERIALIZED (SELECT {unlock}($1, $2) AS held),
         gone AS (
             DELETE FROM {t} AS t USING {CLOCK}
             WHERE t.objid = $2
               AND CASE WHEN NOT (SELECT held FROM u) THEN false
                        WHEN t.fencing_token >= c.now_us THEN false
                        ELSE NOT EXISTS (
                            SELECT FROM pg_locks AS p
                            WHERE {OURS} AND p.granted AND p.objid IN ($2::oid, ($2 + 1)::oid)
                        ) END
         )
         SELECT (SELECT held FROM u), set_config('idle_session_timeout', '0', false),
                pg_notify($3, $4), {NO_FLUSH_WAIT}"
    )
}

/// Terminates every session holding `$2`'s key in class `$1`, waiting up
/// to 2 s for each to end, and announces it on `$3` with payload `$4`.
/// Answers how many ended.
fn force_release(t: &str) -> String {
    format!(
        "WITH k AS (SELECT objid FROM {t} WHERE name = $2),
         ended AS MATERIALIZED (
             SELECT pg_terminate_backend(p.pid, 2000) AS done
             FROM pg_locks AS p JOIN k ON p.objid = k.objid::oid
             WHERE {OURS} AND p.granted
         )
         SELECT (count(*) FILTER (WHERE done))::integer, pg_notify($3, $4) FROM ended"
    )
}

/// Every holder of a name's key in class `$1`: name, lock mode, and the
/// grant's token and holder as JSON text where its session recorded them.
fn list(t: &str) -> String {
    format!(
        "SELECT t.name, p.mode, (t.holders -> p.pid::text ->> 'token')::bigint,
                (t.holders -> p.pid::text -> 'holder')::text
         FROM pg_locks AS p JOIN {t} AS t ON p.objid = t.objid::oid
         WHERE {OURS} AND p.granted
         ORDER BY t.name, p.pid"
    )
}

/// Fair mode's waiters: every request for a name's key in class `$1`
/// that the server's lock manager holds back, a writer's
/// (`ExclusiveLock`; a reader's share never waits there in advisory
/// mode), with the name, the waiting session's `application_name` (see
/// [`super::waiters`]), and how long it has waited, in µs by the server's
/// clock (`waitstart`, PostgreSQL 14; `NULL` for the moment before the
/// server records it). A transaction lock's writer waiting for the name
/// is among them, named by its session's own application name.
///
/// In the order the server will grant them: each behind as many of the
/// key's waiting requests as block it (`pg_blocking_pids`: those ahead
/// of it in the queue that conflict, which for a writer is every one
/// ahead), then by when it began to wait. `pg_blocking_pids` is asked
/// once per waiter, each call a brief look at the whole lock table.
fn waiters(t: &str) -> String {
    format!(
        "WITH w AS MATERIALIZED (
             SELECT p.objid, p.pid, p.mode, p.waitstart
             FROM pg_locks AS p
             WHERE {OURS} AND NOT p.granted
         ), b AS MATERIALIZED (
             SELECT w.objid, w.pid, w.waitstart, pg_blocking_pids(w.pid) AS blockers
             FROM w WHERE w.mode = 'ExclusiveLock'
         )
         SELECT t.name, a.application_name,
                greatest(c.now_us - (extract(epoch FROM b.waitstart) * 1000000)::bigint, 0)
         FROM b JOIN {t} AS t ON b.objid = t.objid::oid
              LEFT JOIN pg_stat_activity AS a ON a.pid = b.pid
              CROSS JOIN {CLOCK}
         ORDER BY t.name,
                  (SELECT count(*) FROM w AS o
                   WHERE o.objid = b.objid AND o.pid = ANY (b.blockers)),
                  b.waitstart, b.pid"
    )
}

/// Deletes at most `$2` rows of class `$1` whose key and writers' intent
/// no session holds, and whose token is behind the server's clock (by
/// [`KEYING_GRACE_US`] for a row never granted); answers how many went. Candidates are picked against one reading of
/// `pg_locks`, locked, and checked again against a reading made after the
/// lock, row by row (a correlated subquery runs for each).
fn sweep(t: &str) -> String {
    format!(
        "WITH held AS MATERIALIZED (
             SELECT p.objid FROM pg_locks AS p WHERE {OURS} AND p.granted
         ), idle AS MATERIALIZED (
             SELECT t.name, t.objid FROM {t} AS t, {CLOCK}
             WHERE t.fencing_token
                       < c.now_us - CASE WHEN t.holders = '{{}}' THEN {KEYING_GRACE_US} ELSE 0 END
               AND t.objid::oid NOT IN (SELECT objid FROM held)
               AND (t.objid + 1)::oid NOT IN (SELECT objid FROM held)
             LIMIT $2
             FOR UPDATE OF t SKIP LOCKED
         ), gone AS (
             DELETE FROM {t} AS t USING idle
             WHERE t.name = idle.name AND NOT EXISTS (
                 SELECT FROM pg_locks AS p
                 WHERE {OURS} AND p.granted
                   AND p.objid IN (idle.objid::oid, (idle.objid + 1)::oid)
             )
             RETURNING 1
         )
         SELECT count(*) FROM gone"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_quoted_table_name_is_interpolated() {
        let table = TableName::new("s", "a \"b\"; --").unwrap();
        let statements = Statements::new(&table);
        for sql in [
            statements.acquire(false),
            statements.acquire(true),
            &statements.campaign,
            &statements.wait_in_line,
            &statements.campaign_in_line,
            &statements.insert_key,
            &statements.force_release,
            &statements.list,
            &statements.waiters,
            &statements.sweep,
            statements.release(false),
        ] {
            assert!(sql.contains(r#""s"."a ""b""; --""#), "{sql}");
        }
    }

    #[test]
    fn only_a_campaign_writes_the_record_of_terms() {
        let statements = Statements::new(&TableName::new("s", "t").unwrap());
        assert!(statements.campaign.contains(r#""s"."t_terms""#));
        assert!(statements.campaign.contains("FROM bumped AS g"));
        assert!(statements.campaign_in_line.contains("FROM bumped AS g"));
        assert!(!statements.acquire(false).contains("_terms"));
        assert!(!statements.wait_in_line.contains("_terms"));
        assert!(!statements.acquire(true).contains("_terms"));
    }

    #[test]
    fn only_writes_a_crash_may_lose_skip_the_flush() {
        let statements = Statements::new(&TableName::new("s", "t").unwrap());
        for sql in [
            statements.acquire(false),
            statements.acquire(true),
            &statements.wait_in_line,
            &statements.insert_key,
            statements.release(false),
            statements.release(true),
        ] {
            assert!(sql.contains(NO_FLUSH_WAIT), "{sql}");
        }
        for sql in [
            &statements.campaign,
            &statements.campaign_in_line,
            &statements.sweep,
        ] {
            assert!(!sql.contains(NO_FLUSH_WAIT), "{sql}");
        }
        // Only a bump to the clock's reading.
        assert!(
            statements
                .acquire(false)
                .contains("WHEN (SELECT floored FROM bumped) THEN")
        );
    }

    #[test]
    fn readers_look_for_waiting_writers_and_writers_do_not() {
        let statements = Statements::new(&TableName::new("s", "t").unwrap());
        assert!(statements.acquire(true).contains("writer_waits THEN false"));
        assert!(!statements.acquire(false).contains("pg_locks"));
        for sql in [
            statements.release(false),
            statements.release(true),
            &statements.end_wait,
            &statements.force_release,
        ] {
            assert!(sql.contains("pg_notify("), "{sql}");
        }
    }
}

//! The SQL of every operation, one statement each, built once per table.
//!
//! A row holds one name: `holders` is a JSON array of grants,
//! `{id, token, at, exp, holder}` with times in the server's microseconds
//! since the epoch, and `waiting` an array of writers' marks,
//! `{id, exp, holder, since}`: who waits, and since when by the server's
//! clock (a mark written by an older version has only `id` and `exp`).
//! A grant or mark lives while its `exp` is after the server's clock
//! (`clock_timestamp()`, read once per statement); `kind` and
//! `permit_limit` say what the live holders hold, and mean nothing once
//! none lives. Expired entries stay until the next grant or release of the
//! name drops them. A row that no live grant or mark is left in is
//! deleted: by the release that leaves it so, or by a later [`sweep`],
//! through the name's [`gate`](super::gate), which keeps its tokens
//! increasing. Only the table's quoted name is put into the text; every
//! value goes as a bind parameter.

use distlock_core::Claim;

use super::gate;
use crate::clock::{CLOCK, NOW_US};
use crate::table::TableName;
use crate::terms;

/// The most readers that hold one name at once, as in the other backends;
/// it bounds the row's size and the work of each statement on it.
pub(crate) const MAX_READERS: u32 = distlock_core::MAX_PERMITS;

/// The JSON path of the live entries of an array, given `$now`.
const LIVE: &str = "'$[*] ? (@.exp > $now)'";

/// The JSON path of the live entries other than `$id`.
const LIVE_OTHERS: &str = "'$[*] ? (@.exp > $now && @.id != $id)'";

/// The JSON path of the live entry `$id`.
const LIVE_ONE: &str = "'$[*] ? (@.exp > $now && @.id == $id)'";

/// What an acquire asks for, which decides who it may join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimKind {
    Exclusive,
    Shared,
    Permit,
}

impl ClaimKind {
    /// What `claim` asks for.
    pub(crate) fn of(claim: Claim) -> Self {
        match claim {
            Claim::Exclusive => Self::Exclusive,
            Claim::Shared => Self::Shared,
            Claim::Permit { .. } => Self::Permit,
        }
    }

    /// The `kind` column's value for this claim.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Shared => "shared",
            Self::Permit => "semaphore",
        }
    }
}

/// Every statement the backend sends, for one table.
#[derive(Debug)]
pub(crate) struct Statements {
    acquire_exclusive: String,
    acquire_shared: String,
    acquire_permit: String,
    /// A campaign's exclusive acquire, which records the term it grants.
    pub(crate) campaign: String,
    /// After an acquire found the name held: why, until when, and, for a
    /// waiting writer, its mark.
    pub(crate) held: String,
    pub(crate) extend: String,
    pub(crate) release: String,
    pub(crate) hand_over: String,
    /// Takes a live grant up under a new identity; see [`resume`].
    pub(crate) resume: String,
    pub(crate) force_release: String,
    pub(crate) end_wait: String,
    pub(crate) list: String,
    /// Every live writer's mark; see [`waiters`].
    pub(crate) waiters: String,
    /// Deletes at most `$1` rows that nothing holds or waits for.
    pub(crate) sweep: String,
}

impl Statements {
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.quoted();
        Self {
            acquire_exclusive: acquire(t, ClaimKind::Exclusive),
            acquire_shared: acquire(t, ClaimKind::Shared),
            acquire_permit: acquire(t, ClaimKind::Permit),
            campaign: campaign(t, &table.terms()),
            held: held(t),
            extend: extend(t),
            release: release(t),
            hand_over: hand_over(t),
            resume: resume(t),
            force_release: force_release(t),
            end_wait: end_wait(t),
            list: list(t),
            waiters: waiters(t),
            sweep: sweep(t),
        }
    }

    pub(crate) fn acquire(&self, asked: ClaimKind) -> &str {
        match asked {
            ClaimKind::Exclusive => &self.acquire_exclusive,
            ClaimKind::Shared => &self.acquire_shared,
            ClaimKind::Permit => &self.acquire_permit,
        }
    }
}

/// Whether the existing row `t` admits `asked`, judged at the proposed
/// row's token, which is the server's clock (`excluded.fencing_token`).
fn admits(asked: ClaimKind) -> String {
    let vars = "jsonb_build_object('now', excluded.fencing_token)";
    let any_live = format!("jsonb_path_exists(t.holders, {LIVE}, {vars})");
    let live_count =
        format!("jsonb_array_length(jsonb_path_query_array(t.holders, {LIVE}, {vars}))");
    match asked {
        ClaimKind::Exclusive => format!("NOT {any_live}"),
        // Readers also wait while a writer waits, so writers are not starved.
        ClaimKind::Shared => format!(
            "(NOT {any_live} OR t.kind = 'shared')
             AND NOT jsonb_path_exists(t.waiting, {LIVE}, {vars})
             AND {live_count} < {MAX_READERS}"
        ),
        ClaimKind::Permit => format!(
            "NOT {any_live}
             OR (t.kind = 'semaphore' AND t.permit_limit = $4 AND {live_count} < $4)"
        ),
    }
}

/// One attempt, as one statement: the row is created holding our grant,
/// or, where it exists, our grant joins its live holders when it admits
/// us; otherwise nothing changes and no row comes back. The token is
/// `greatest(previous + 1, the server's clock in µs)`, the clock read
/// behind the name's gate, so it keeps increasing across every kind and
/// even after the row was deleted (see [`gate`]).
///
/// `$1` name, `$2` grant id, `$3` kind, `$4` permit limit, `$5` lease in
/// µs, `$6` holder as JSON text, `$7` the writer's own mark, which goes
/// with the grant (other live marks stay).
fn acquire(t: &str, asked: ClaimKind) -> String {
    let now = "excluded.fencing_token";
    let token = format!("greatest(t.fencing_token + 1, {now})");
    let clock = gate::gated_clock("$1");
    format!(
        "INSERT INTO {t} AS t (name, kind, permit_limit, fencing_token, holders)
         SELECT $1, $3, $4, c.now_us, jsonb_build_array(jsonb_build_object(
             'id', $2::text, 'token', c.now_us, 'at', c.now_us,
             'exp', c.now_us + $5, 'holder', $6::text::jsonb))
         FROM {clock}
         ON CONFLICT (name) DO UPDATE SET
             kind = excluded.kind,
             permit_limit = excluded.permit_limit,
             fencing_token = {token},
             holders = jsonb_path_query_array(t.holders, {LIVE}, jsonb_build_object('now', {now}))
                 || jsonb_build_array(jsonb_set(excluded.holders -> 0, '{{token}}', to_jsonb({token}))),
             waiting = jsonb_path_query_array(t.waiting, {LIVE_OTHERS},
                 jsonb_build_object('now', {now}, 'id', $7::text))
         WHERE {admits}
         RETURNING t.fencing_token",
        admits = admits(asked),
    )
}

/// A campaign's attempt: the exclusive acquire, and, only when it grants,
/// the term appended to the election's record in the same statement (see
/// [`terms::appended_after`]), so the record holds a term exactly when it
/// was granted. The lock row's lock, which the grant holds, also orders
/// the appends. Parameters as the acquire's, and `$8` the holder as JSON
/// text with its label whole. A separate statement, so that plain
/// acquires cost no more.
fn campaign(t: &str, terms: &TableName) -> String {
    format!(
        "WITH granted AS ({acquire}),
         {recorded}
         SELECT fencing_token FROM granted",
        acquire = acquire(t, ClaimKind::Exclusive),
        recorded = terms::appended_after("granted", terms, "$1", "$8"),
    )
}

/// Why an attempt found the name held, read after it: the holders' kind
/// and limit, how many live, how long until the first of them expires,
/// how long until the first other writer's mark expires, and whether a
/// waiting writer's mark (`$2`, when given) is stored, added or refreshed
/// here to last a lease (`$3`, µs) from now. A writer marks where readers
/// or another writer hold the name, or other writers' marks live, so that
/// new readers wait behind it (also those that come once the writer
/// inside has left, before this one asks again); never beside permits,
/// which is a conflict.
///
/// The mark records who waits (`$4`, the holder as JSON text) and since
/// when by the server's clock (`since`, µs): the first marking of a wait
/// sets it, a refresh keeps it (a mark of an older version, without it,
/// gets the refresh's now).
fn held(t: &str) -> String {
    let vars = "jsonb_build_object('now', c.now_us, 'id', $2::text)";
    let any_live = format!("jsonb_path_exists(t.holders, {LIVE}, {vars})");
    let since = format!(
        "coalesce((jsonb_path_query_first(t.waiting, '$[*] ? (@.id == $id)', {vars})
                   ->> 'since')::bigint, c.now_us)"
    );
    format!(
        "WITH marked AS (
             UPDATE {t} AS t SET waiting = jsonb_path_query_array(t.waiting, {LIVE_OTHERS}, {vars})
                 || jsonb_build_array(jsonb_build_object('id', $2::text, 'exp', c.now_us + $3,
                        'holder', $4::text::jsonb, 'since', {since}))
             FROM {CLOCK}
             WHERE t.name = $1 AND $2::text IS NOT NULL
               AND (({any_live} AND t.kind IN ('shared', 'exclusive'))
                    OR (NOT ({any_live} AND t.kind = 'semaphore')
                        AND jsonb_path_exists(t.waiting, {LIVE_OTHERS}, {vars})))
             RETURNING 1
         )
         SELECT t.kind, t.permit_limit,
                jsonb_array_length(jsonb_path_query_array(t.holders, {LIVE}, {vars}))::integer,
                (SELECT min((h ->> 'exp')::bigint) FROM jsonb_array_elements(t.holders) AS h
                  WHERE (h ->> 'exp')::bigint > c.now_us) - c.now_us,
                (SELECT min((m ->> 'exp')::bigint) FROM jsonb_array_elements(t.waiting) AS m
                  WHERE (m ->> 'exp')::bigint > c.now_us
                    AND (m ->> 'id') IS DISTINCT FROM $2::text) - c.now_us,
                EXISTS (SELECT FROM marked)
                    OR t.waiting @> jsonb_build_array(jsonb_build_object('id', $2::text))
         FROM {t} AS t, {CLOCK}
         WHERE t.name = $1"
    )
}

/// Extends any number of leases in one statement: `$1` names, `$2` grant
/// ids and `$3` leases in µs, one element per lease. Each live grant among
/// them runs its lease from the server's now. Rows are locked in name
/// order first, so that two processes extending overlapping sets never
/// deadlock. Returns each row's extended ids, and the server's clock
/// they were extended by.
fn extend(t: &str) -> String {
    let live_asked = "a.leases ? (h ->> 'id') AND (h ->> 'exp')::bigint > c.now_us";
    format!(
        "WITH asked AS (
             SELECT n AS name, jsonb_object_agg(i, us) AS leases
             FROM unnest($1::bytea[], $2::text[], $3::bigint[]) AS u(n, i, us)
             GROUP BY n
         ), locked AS MATERIALIZED (
             SELECT t.name FROM {t} AS t JOIN asked USING (name) ORDER BY t.name FOR UPDATE OF t
         )
         UPDATE {t} AS t SET holders = (
             SELECT jsonb_agg(CASE WHEN {live_asked}
                 THEN jsonb_set(h, '{{exp}}', to_jsonb(c.now_us + (a.leases ->> (h ->> 'id'))::bigint))
                 ELSE h END ORDER BY n)
             FROM jsonb_array_elements(t.holders) WITH ORDINALITY AS x(h, n)
         )
         FROM asked AS a, locked AS l, {CLOCK}
         WHERE t.name = a.name AND l.name = a.name
           AND EXISTS (SELECT FROM jsonb_array_elements(t.holders) AS h WHERE {live_asked})
         RETURNING t.name, ARRAY(SELECT h ->> 'id' FROM jsonb_array_elements(t.holders) AS h
                                 WHERE {live_asked}), c.now_us"
    )
}

/// Ends the live grant `$2` of `$1`, dropping expired entries with it,
/// and announces the release on channel `$3` with payload `$4`. Returns a
/// row when there was a grant to end.
///
/// When ours is the last live grant and no writer's mark lives, the row
/// is deleted instead, if the name's gate is free and the row's token is
/// behind the server's clock (see [`gate`]); otherwise it stays, for a
/// later [`sweep`]. The update runs only when the deletion did not.
fn release(t: &str) -> String {
    let vars = "jsonb_build_object('now', c.now_us, 'id', $2::text)";
    // In this order: a `CASE` tries the gate only once the row is idle.
    let idle_once_ours_ends = format!(
        "CASE WHEN NOT jsonb_path_exists(t.holders, {LIVE_ONE}, {vars}) THEN false
              WHEN jsonb_path_exists(t.holders, {LIVE_OTHERS}, {vars}) THEN false
              WHEN jsonb_path_exists(t.waiting, {LIVE}, {vars}) THEN false
              WHEN t.fencing_token >= c.now_us THEN false
              ELSE {gate} END",
        gate = gate::try_exclusive("t.name"),
    );
    announcing(
        &format!(
            "gone AS (
                 DELETE FROM {t} AS t USING {CLOCK}
                 WHERE t.name = $1 AND {idle_once_ours_ends}
                 RETURNING 1
             ), kept AS (
                 UPDATE {t} AS t
                 SET holders = jsonb_path_query_array(t.holders, {LIVE_OTHERS}, {vars})
                 FROM {CLOCK}
                 WHERE t.name = $1 AND jsonb_path_exists(t.holders, {LIVE_ONE}, {vars})
                   AND NOT EXISTS (SELECT FROM gone)
                 RETURNING 1
             ), freed AS (SELECT 1 FROM gone UNION ALL SELECT 1 FROM kept)"
        ),
        3,
    )
}

/// `writes`, common table expressions the last of which, `freed`, returns
/// a row when they freed something, then a notification on channel `$n`
/// with payload `$n+1` for that row. It is part of the statement, so it
/// costs no round trip of its own, and the server sends it when the write
/// commits, never without it. A null channel sends none: the write alone,
/// for when the server's notification queue is full (see
/// `lease::Announced`).
fn announcing(writes: &str, channel: u8) -> String {
    let payload = channel + 1;
    format!(
        "WITH {writes}
         SELECT 1 FROM freed LEFT JOIN LATERAL (
             SELECT pg_notify(${channel}, ${payload}) WHERE ${channel}::text IS NOT NULL
         ) AS announced ON true"
    )
}

/// Ends the live exclusive grant `$2` of `$1` and grants `$3` (lease `$4`
/// µs, holder `$5`) in the same write, with the next token. Waiting
/// writers' marks stay.
fn hand_over(t: &str) -> String {
    let vars = "jsonb_build_object('now', c.now_us, 'id', $2::text)";
    let token = "greatest(t.fencing_token + 1, c.now_us)";
    format!(
        "UPDATE {t} AS t SET
             fencing_token = {token},
             holders = jsonb_build_array(jsonb_build_object(
                 'id', $3::text, 'token', {token}, 'at', c.now_us,
                 'exp', c.now_us + $4, 'holder', $5::text::jsonb))
         FROM {CLOCK}
         WHERE t.name = $1 AND t.kind = 'exclusive'
           AND jsonb_path_exists(t.holders, {LIVE_ONE}, {vars})
         RETURNING t.fencing_token"
    )
}

/// Takes up the grant `$2` of `$1` under the identity `$6`, for a process
/// that restarted while it held it, in one write: only when a grant with
/// that identity and the fencing token `$3` lives by the server's clock,
/// and the row's holders hold the claim `$4` (the `kind` column's value)
/// with the permit limit `$5` (null but for a semaphore). Its end becomes
/// the server's now plus `$7` µs, as after an extension, and its holder
/// `$8` (JSON text); its token, its time of grant, its place among the
/// holders and, in fair mode, the place it was granted to and its term
/// stay, and so do the row's token, kind and waiting writers. Returns a
/// row when it took the grant up.
///
/// The row is locked first and the clock read only then, so that a
/// statement that waited for another's write judges the grant by the
/// clock at the moment it writes, on the row as that write left it. The
/// old identity is gone from the row once this commits: its holder's
/// next extension finds nothing to extend, and a second resume of the
/// same identity nothing to take up.
fn resume(t: &str) -> String {
    let vars = "jsonb_build_object('now', c.now_us, 'id', $2::text, 'token', $3::bigint)";
    let ours = "h ->> 'id' = $2::text AND (h ->> 'exp')::bigint > c.now_us";
    format!(
        "WITH locked AS MATERIALIZED (
             SELECT t.name FROM {t} AS t WHERE t.name = $1 FOR UPDATE
         ), c AS MATERIALIZED (
             SELECT {NOW_US} AS now_us FROM locked
         )
         UPDATE {t} AS t SET holders = (
             SELECT jsonb_agg(CASE WHEN {ours}
                 THEN h || jsonb_build_object('id', $6::text, 'exp', c.now_us + $7,
                                              'holder', $8::text::jsonb)
                 ELSE h END ORDER BY n)
             FROM jsonb_array_elements(t.holders) WITH ORDINALITY AS x(h, n)
         )
         FROM c
         WHERE t.name = $1 AND t.kind = $4 AND t.permit_limit IS NOT DISTINCT FROM $5::integer
           AND jsonb_path_exists(t.holders,
                 '$[*] ? (@.exp > $now && @.id == $id && @.token == $token)', {vars})
         RETURNING 1"
    )
}

/// Ends every holder of `$1` and announces it on channel `$2` with payload
/// `$3`; returns a row when one lived. Waiting writers' marks stay.
fn force_release(t: &str) -> String {
    announcing(
        &format!(
            "freed AS (
                 UPDATE {t} AS t SET holders = '[]'
                 FROM {CLOCK}
                 WHERE t.name = $1
                   AND jsonb_path_exists(t.holders, {LIVE}, jsonb_build_object('now', c.now_us))
                 RETURNING 1
             )"
        ),
        2,
    )
}

/// Removes the writer's mark `$2` from `$1`, with the marks that expired,
/// and announces it on channel `$3` with payload `$4`: readers that waited
/// behind the mark may go in.
fn end_wait(t: &str) -> String {
    let vars = "jsonb_build_object('now', c.now_us, 'id', $2::text)";
    announcing(
        &format!(
            "freed AS (
                 UPDATE {t} AS t
                 SET waiting = jsonb_path_query_array(t.waiting, {LIVE_OTHERS}, {vars})
                 FROM {CLOCK}
                 WHERE t.name = $1
                   AND t.waiting @> jsonb_build_array(jsonb_build_object('id', $2::text))
                 RETURNING 1
             )"
        ),
        3,
    )
}

/// Every live holder: name, kind, limit, token, µs left, holder as JSON
/// text, and how many live holders its name has.
fn list(t: &str) -> String {
    format!(
        "SELECT t.name, t.kind, t.permit_limit, (h ->> 'token')::bigint,
                (h ->> 'exp')::bigint - c.now_us, (h -> 'holder')::text,
                (count(*) OVER (PARTITION BY t.name))::integer
         FROM {t} AS t CROSS JOIN {CLOCK} CROSS JOIN LATERAL jsonb_array_elements(t.holders) AS h
         WHERE (h ->> 'exp')::bigint > c.now_us
         ORDER BY t.name, (h ->> 'token')::bigint"
    )
}

/// Every live writer's mark of every name, outside fair mode: the name,
/// the mark's holder as JSON text (null in a mark of an older version)
/// and µs since its wait began by the server's clock (null likewise), in
/// the order the waits began, those without a beginning last in the
/// row's order. A fair place (an entry with a `lease`) is not a mark:
/// fair mode lists the places itself.
fn waiters(t: &str) -> String {
    format!(
        "SELECT t.name, (m.mark -> 'holder')::text, c.now_us - (m.mark ->> 'since')::bigint
         FROM {t} AS t, {CLOCK},
              jsonb_array_elements(jsonb_path_query_array(t.waiting,
                  '$[*] ? (@.exp > $now && !(exists(@.lease)))',
                  jsonb_build_object('now', c.now_us))) WITH ORDINALITY AS m(mark, n)
         ORDER BY t.name, (m.mark ->> 'since')::bigint NULLS LAST, m.n"
    )
}

/// Deletes at most `$1` rows in which no grant and no writer's mark
/// lives, skipping rows another statement has locked and names whose gate
/// is taken (an acquire in flight), and only where the row's token is
/// behind the server's clock (see [`gate`]). Answers how many went. Rows
/// are locked before the gate is tried, so that a grant cannot join a row
/// between the check and the deletion.
fn sweep(t: &str) -> String {
    let vars = "jsonb_build_object('now', c.now_us)";
    format!(
        "WITH idle AS MATERIALIZED (
             SELECT t.name FROM {t} AS t, {CLOCK}
             WHERE NOT jsonb_path_exists(t.holders, {LIVE}, {vars})
               AND NOT jsonb_path_exists(t.waiting, {LIVE}, {vars})
               AND t.fencing_token < c.now_us
             LIMIT $1
             FOR UPDATE OF t SKIP LOCKED
         ), gone AS (
             DELETE FROM {t} AS t USING idle
             WHERE t.name = idle.name AND {gate}
             RETURNING 1
         )
         SELECT count(*) FROM gone",
        gate = gate::try_exclusive("t.name"),
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
            statements.acquire(ClaimKind::Exclusive),
            &statements.campaign,
            &statements.held,
            &statements.extend,
            &statements.release,
            &statements.resume,
            &statements.list,
            &statements.waiters,
            &statements.sweep,
        ] {
            assert!(sql.contains(r#""s"."a ""b""; --""#), "{sql}");
        }
    }

    #[test]
    fn what_frees_a_name_announces_it_and_nothing_else_does() {
        let statements = Statements::new(&TableName::new("s", "t").unwrap());
        for sql in [
            &statements.release,
            &statements.force_release,
            &statements.end_wait,
        ] {
            assert!(sql.contains("pg_notify("), "{sql}");
        }
        for sql in [
            statements.acquire(ClaimKind::Exclusive),
            &statements.campaign,
            &statements.held,
            &statements.extend,
            &statements.hand_over,
            &statements.resume,
            &statements.sweep,
        ] {
            assert!(!sql.contains("pg_notify"), "{sql}");
        }
    }

    #[test]
    fn grants_read_the_clock_behind_the_gate_and_deletions_try_it() {
        let statements = Statements::new(&TableName::new("s", "t").unwrap());
        for asked in [ClaimKind::Exclusive, ClaimKind::Shared, ClaimKind::Permit] {
            let sql = statements.acquire(asked);
            assert!(sql.contains("pg_advisory_xact_lock_shared("), "{sql}");
        }
        assert!(
            statements
                .campaign
                .contains(statements.acquire(ClaimKind::Exclusive))
        );
        for sql in [&statements.release, &statements.sweep] {
            assert!(sql.contains("DELETE FROM"), "{sql}");
            assert!(sql.contains("pg_try_advisory_xact_lock("), "{sql}");
            assert!(sql.contains("t.fencing_token"), "{sql}");
        }
        // Hand-overs keep a live holder: they need no gate.
        assert!(!statements.hand_over.contains("DELETE"));
    }

    #[test]
    fn a_resume_locks_the_row_before_it_reads_the_clock_and_checks_the_owner() {
        let resume = Statements::new(&TableName::new("s", "t").unwrap()).resume;
        let lock = resume.find("FOR UPDATE").unwrap();
        assert!(lock < resume.find("clock_timestamp").unwrap(), "{resume}");
        for check in [
            "@.exp > $now",
            "@.id == $id",
            "@.token == $token",
            "t.kind = $4",
        ] {
            assert!(resume.contains(check), "{check}: {resume}");
        }
        // It neither makes tokens nor deletes rows: no gate.
        assert!(!resume.contains("advisory"), "{resume}");
        assert!(!resume.contains("fencing_token ="), "{resume}");
    }

    #[test]
    fn only_a_campaign_writes_the_record_of_terms() {
        let statements = Statements::new(&TableName::new("s", "t").unwrap());
        assert!(statements.campaign.contains(r#""s"."t_terms""#));
        for asked in [ClaimKind::Exclusive, ClaimKind::Shared, ClaimKind::Permit] {
            assert!(!statements.acquire(asked).contains("_terms"));
        }
    }

    #[test]
    fn readers_are_capped_and_wait_behind_writers() {
        let shared = admits(ClaimKind::Shared);
        assert!(shared.contains("t.waiting"), "{shared}");
        assert!(shared.contains(&format!("< {MAX_READERS}")), "{shared}");
        assert!(!admits(ClaimKind::Exclusive).contains("t.waiting"));
    }
}

//! Lease mode's fair mode: waiting writers queue in their name's row, and
//! the statement that frees the name grants it to the first of them.
//!
//! A waiter's place is an entry of the row's `waiting` array, after the
//! writers' marks' shape, `{id, exp, lease, holder}` (and `term`, the
//! holder with its label whole, for a campaign): the array's order is the
//! order in which places were taken, each under the row's lock. A place
//! lives while its `exp` is after the server's clock, and each attempt of
//! its wait renews it where it stands, for a lease. Readers wait while any
//! place lives, as they wait behind writers' marks.
//!
//! A release (or the end of a wait whose place was granted) that leaves
//! no live holder grants the first live place in the same statement: a
//! grant under the place's id, with the next token, the place's lease from
//! the server's now, its holder, and `by` set to the id of the statement's
//! own grant or place, so that the statement can tell the grant it made
//! (and record its term). An attempt does the same when it finds the holder
//! gone, for a lease that ran out unreleased. The wait's next attempt finds
//! the grant under its place's id and takes it over under its own, for a
//! lease from then. Every statement judges by the row as it is once
//! locked, so two statements never grant the name twice.

use std::time::Duration;

use distlock_core::{Claim, LockName, Result};
use tokio_postgres::Row;

use super::gate;
use crate::clock::CLOCK;
use crate::rows::{self, get};
use crate::table::TableName;
use crate::terms;

/// The JSON path of the live places (entries with a lease) given `$now`.
const LIVE_PLACES: &str = "'$[*] ? (@.exp > $now && exists(@.lease))'";

/// The JSON path of the live entries given `$now`.
const LIVE: &str = "'$[*] ? (@.exp > $now)'";

/// The JSON path of the live entries other than `$place`.
const LIVE_BUT_PLACE: &str = "'$[*] ? (@.exp > $now && @.id != $place)'";

/// The JSON path of the live entries other than `$id`.
const LIVE_BUT_ID: &str = "'$[*] ? (@.exp > $now && @.id != $id)'";

/// The JSON path of the grant made by the statement whose own id is `$id`.
const MADE_HERE: &str = "'$[*] ? (@.by == $id)'";

/// Fair mode's statements, for one table.
#[derive(Debug)]
pub(crate) struct FairStatements {
    /// One attempt of a waiting writer, or a single try; see [`attempt`].
    pub(crate) attempt: String,
    /// Ends a grant or a place, granting the first place; see [`release`].
    pub(crate) release: String,
    /// Ends a place, as `release` does, and withdraws the term of a grant
    /// passed on to it; see [`release`]. `None` without a record of
    /// terms, where `release` ends a place.
    pub(crate) leave: Option<String>,
    /// How many live places `$1` has in line.
    pub(crate) queued: String,
    /// Every live place of every name: the name, and the place's holder
    /// as JSON, in line order.
    pub(crate) waiters: String,
}

impl FairStatements {
    /// The statements for `table`, which also record election terms in
    /// `terms` when given.
    pub(crate) fn new(table: &TableName, terms: Option<&TableName>) -> Self {
        let t = table.quoted();
        Self {
            attempt: attempt(t, terms),
            release: release(t, terms, false),
            leave: terms.map(|_| release(t, terms, true)),
            queued: format!(
                "SELECT jsonb_array_length(jsonb_path_query_array(t.waiting, {LIVE_PLACES},
                     jsonb_build_object('now', c.now_us)))::bigint
                 FROM {t} AS t, {CLOCK} WHERE t.name = $1"
            ),
            waiters: format!(
                "SELECT t.name, (p.place -> 'holder')::text
                 FROM {t} AS t, {CLOCK},
                      jsonb_array_elements(jsonb_path_query_array(t.waiting, {LIVE_PLACES},
                          jsonb_build_object('now', c.now_us))) WITH ORDINALITY AS p(place, n)
                 ORDER BY t.name, p.n"
            ),
        }
    }
}

/// `entry`, a place's JSON, granted by this statement (whose own id is
/// `$2`): under the place's id, or under `$2` itself when `mine` (an SQL
/// condition) says the place is this attempt's.
fn grant_of_place(entry: &str, token: &str, mine: &str) -> String {
    format!(
        "jsonb_build_object(
             'id', CASE WHEN {mine} THEN $2::text ELSE {entry} ->> 'id' END,
             'token', {token}, 'at', c.now_us, 'exp', c.now_us + ({entry} ->> 'lease')::bigint,
             'holder', {entry} -> 'holder', 'by', $2::text)
         || CASE WHEN {entry} ? 'term' THEN jsonb_build_object('term', {entry} -> 'term')
                 ELSE '{{}}'::jsonb END"
    )
}

/// The direct grant of an attempt: `$2`, lease `$4` µs, holder `$5`, and
/// the term's holder `$6` when it records one.
fn own_grant(token: &str) -> String {
    format!(
        "jsonb_build_object('id', $2::text, 'token', {token}, 'at', c.now_us,
             'exp', c.now_us + $4, 'holder', $5::text::jsonb, 'by', $2::text)
         || CASE WHEN $6::text IS NULL THEN '{{}}'::jsonb
                 ELSE jsonb_build_object('term', $6::text::jsonb) END"
    )
}

/// `array` without the entry `entry`.
fn without(array: &str, entry: &str) -> String {
    format!(
        "(SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb)
          FROM jsonb_array_elements({array}) WITH ORDINALITY AS x(e, n)
          WHERE e ->> 'id' IS DISTINCT FROM {entry} ->> 'id')"
    )
}

/// `array`, the live waiting entries, with this wait's place `$3` renewed
/// for a lease (`$4` µs) where it stands, or added last; as it is for a
/// single try (`$3` null).
fn renewed(array: &str) -> String {
    format!(
        "CASE WHEN $3::text IS NULL THEN {array}
              WHEN {array} @> jsonb_build_array(jsonb_build_object('id', $3::text)) THEN (
                  SELECT jsonb_agg(CASE WHEN e ->> 'id' = $3::text
                      THEN jsonb_set(e, '{{exp}}', to_jsonb(c.now_us + $4)) ELSE e END ORDER BY n)
                  FROM jsonb_array_elements({array}) WITH ORDINALITY AS x(e, n))
              ELSE {array} || jsonb_build_array(jsonb_build_object(
                  'id', $3::text, 'exp', c.now_us + $4, 'lease', $4::bigint,
                  'holder', $5::text::jsonb)
                  || CASE WHEN $6::text IS NULL THEN '{{}}'::jsonb
                          ELSE jsonb_build_object('term', $6::text::jsonb) END)
         END"
    )
}

/// What an attempt's statement answers, from the row `t` as it left it
/// and the server's clock `now`: the token when `$2` holds it, whether it
/// granted another place (whose waiter is then told), the grant it made
/// (for its term), the live holders' kind and limit, and µs until the
/// first of them ends.
fn outcome_columns(now: &str) -> String {
    let vars = format!("jsonb_build_object('now', {now}, 'id', $2::text)");
    format!(
        "(jsonb_path_query_first(t.holders, '$[*] ? (@.id == $id)', {vars}) ->> 'token')::bigint
             AS token,
         jsonb_path_exists(t.holders, '$[*] ? (@.by == $id && @.id != $id)', {vars}) AS passed,
         jsonb_path_query_first(t.holders, {MADE_HERE}, {vars}) AS made,
         CASE WHEN jsonb_path_exists(t.holders, {LIVE}, {vars}) THEN t.kind END AS kind,
         t.permit_limit,
         (SELECT min((h ->> 'exp')::bigint) FROM jsonb_array_elements(t.holders) AS h
           WHERE (h ->> 'exp')::bigint > {now}) - {now} AS first_left"
    )
}

/// The common table expressions that record the term of the grant a
/// statement made, from `made` (a grant's JSON) of the rows of `from`,
/// when the grant carries one; nothing without a record of terms.
fn recording(from: &str, terms: Option<&TableName>) -> String {
    let Some(terms) = terms else {
        return String::new();
    };
    format!(
        ", granted AS (
             SELECT (made ->> 'token')::bigint AS fencing_token, (made -> 'term')::text AS term
             FROM {from} WHERE made ? 'term'
         ), {recorded}",
        recorded = terms::appended_after("granted", terms, "$1", "g.term"),
    )
}

/// One fair attempt at the whole lock `$1`, as one statement, on the row
/// as it is once locked:
///
/// - the grant a release made to this wait's place `$3` is taken over
///   under this attempt's id `$2`, for a lease (`$4` µs) from now;
/// - else, where no holder lives, the first live place is granted (this
///   wait's own under `$2`), and its waiter told on channel `$7` with
///   payload `$8`, `/` and the place's id; with no place either, `$2` is granted (the row made if
///   missing, its clock read behind the name's [`gate`]);
/// - and where the lock stays another's, the place `$3` is renewed, or
///   taken last. A single try (`$3` null) takes no place, and changes
///   nothing while a holder lives.
///
/// `$5` is the holder as JSON text, `$6` the holder with its label whole
/// when the grant is a term to record. Answers one row (see
/// [`outcome_columns`]), or none when the row was made or deleted by
/// another at the same moment: the statement's snapshot, taken before the
/// gate let it on, may still show a row that a release deleted meanwhile,
/// and a wait must then not be told it waits in a line its place is not
/// in. A single try is answered from that row: who held it as it began.
fn attempt(t: &str, terms: Option<&TableName>) -> String {
    let vars = "jsonb_build_object('now', c.now_us, 'id', $2::text, 'place', $3::text)";
    let token = "greatest(t.fencing_token + 1, c.now_us)";
    let ours = format!(
        "jsonb_path_query_first(t.holders, '$[*] ? (@.exp > $now && @.id == $place)', {vars})"
    );
    let first = format!("jsonb_path_query_first(t.waiting, {LIVE_PLACES}, {vars})");
    let live_holders = format!("jsonb_path_query_array(t.holders, {LIVE}, {vars})");
    let live_waiting = format!("jsonb_path_query_array(t.waiting, {LIVE}, {vars})");
    let columns = outcome_columns("c.now_us");
    // An insert's `RETURNING` sees only the row it made.
    let inserted = outcome_columns("(SELECT now_us FROM c)");
    format!(
        "WITH c AS MATERIALIZED (SELECT now_us FROM {gated}),
         upd AS (
             UPDATE {t} AS t SET (kind, permit_limit, fencing_token, holders, waiting) = (
                 SELECT CASE WHEN k.step = 'held' THEN t.kind ELSE 'exclusive' END,
                        CASE WHEN k.step = 'held' THEN t.permit_limit END,
                        CASE WHEN k.step IN ('passed', 'granted') THEN {token}
                             ELSE t.fencing_token END,
                        CASE k.step
                            WHEN 'taken' THEN
                                jsonb_path_query_array(t.holders, {LIVE_BUT_PLACE}, {vars})
                                || jsonb_build_array(s.ours || jsonb_build_object(
                                       'id', $2::text, 'exp', c.now_us + $4))
                            WHEN 'passed' THEN jsonb_build_array({grant_first})
                            WHEN 'granted' THEN jsonb_build_array({own_grant})
                            ELSE s.h END,
                        CASE k.step
                            WHEN 'taken' THEN
                                jsonb_path_query_array(t.waiting, {LIVE_BUT_PLACE}, {vars})
                            WHEN 'passed' THEN
                                CASE WHEN s.first ->> 'id' = $3::text THEN s.after_first
                                     ELSE {renewed_after_first} END
                            WHEN 'granted' THEN s.w
                            ELSE {renewed_w} END
                 FROM (SELECT {ours} AS ours, {first} AS first, {live_holders} AS h,
                              {live_waiting} AS w,
                              {after_first} AS after_first) AS s
                 CROSS JOIN LATERAL (SELECT CASE
                     WHEN s.ours IS NOT NULL THEN 'taken'
                     WHEN s.h = '[]'::jsonb AND s.first IS NOT NULL THEN 'passed'
                     WHEN s.h = '[]'::jsonb THEN 'granted'
                     ELSE 'held' END AS step) AS k
             )
             FROM c
             WHERE t.name = $1
               AND ($3::text IS NOT NULL OR NOT jsonb_path_exists(t.holders, {LIVE}, {vars}))
             RETURNING {columns}
         ), ins AS (
             INSERT INTO {t} AS t (name, kind, fencing_token, holders)
             SELECT $1, 'exclusive', c.now_us, jsonb_build_array({own_grant_new})
             FROM c
             WHERE NOT EXISTS (SELECT FROM {t} WHERE name = $1)
             ON CONFLICT (name) DO NOTHING
             RETURNING {inserted}
         ), outcome AS (SELECT * FROM upd UNION ALL SELECT * FROM ins){recording}
         SELECT o.token, o.kind, o.permit_limit, o.first_left FROM outcome AS o
         LEFT JOIN LATERAL (
             SELECT pg_notify($7, $8 || '/' || (o.made ->> 'id'))
             WHERE o.passed AND $7::text IS NOT NULL
         ) AS announced ON true
         UNION ALL
         SELECT NULL, o.kind, o.permit_limit, o.first_left
         FROM (SELECT {columns} FROM {t} AS t, c WHERE t.name = $1) AS o
         WHERE NOT EXISTS (SELECT FROM outcome) AND $3::text IS NULL",
        gated = gate::gated_clock("$1"),
        grant_first = grant_of_place("s.first", token, "s.first ->> 'id' = $3::text"),
        own_grant = own_grant(token),
        own_grant_new = own_grant("c.now_us"),
        after_first = without(&live_waiting, &first),
        renewed_after_first = renewed("s.after_first"),
        renewed_w = renewed("s.w"),
        recording = recording("outcome", terms),
    )
}

/// Ends the live grant, or the place, `$2` of `$1`, and, where no holder
/// lives then, grants the first live place in the same write (its term
/// recorded when it carries one); announces it on channel `$3` with
/// payload `$4`, followed by `/` and the place's id when it granted one,
/// so that only that place's waiter asks (see [`crate::wake::Calls`]).
/// Returns a row when there was a grant or place to end.
///
/// As a plain release, it deletes the row instead when ours was its last
/// live grant and nothing waits (through the name's [`gate`]), and
/// otherwise leaves it to a later sweep.
///
/// When `leaving` (the end of a wait whose place is `$2`, with a record of
/// terms), it also withdraws the term recorded for the holder `$5` (JSON
/// text, its label whole) with a grant passed on to the place, which
/// nobody received: in the write that appends the next place's term when
/// it grants one, so that that term names the one before, or else in a
/// write of its own. The grant's token is read from the row as the
/// statement locked it (`FOR UPDATE`), or as it deleted it.
fn release(t: &str, terms: Option<&TableName>, leaving: bool) -> String {
    let vars = "jsonb_build_object('now', c.now_us, 'id', $2::text)";
    let token = "greatest(t.fencing_token + 1, c.now_us)";
    let idle_once_ours_ends = format!(
        "CASE WHEN NOT jsonb_path_exists(t.holders, '$[*] ? (@.exp > $now && @.id == $id)', {vars})
                  THEN false
              WHEN jsonb_path_exists(t.holders, {LIVE_BUT_ID}, {vars}) THEN false
              WHEN jsonb_path_exists(t.waiting, {LIVE_BUT_ID}, {vars}) THEN false
              WHEN t.fencing_token >= c.now_us THEN false
              ELSE {gate} END",
        gate = gate::try_exclusive("t.name"),
    );
    let first = format!("jsonb_path_query_first(w, {LIVE_PLACES}, {vars})");
    format!(
        "WITH gone AS (
             DELETE FROM {t} AS t USING {CLOCK}
             WHERE t.name = $1 AND {idle_once_ours_ends}
             RETURNING {ended}
         ), kept AS (
             UPDATE {t} AS t SET (kind, permit_limit, fencing_token, holders, waiting) = (
                 SELECT CASE WHEN s.first IS NULL THEN t.kind ELSE 'exclusive' END,
                        CASE WHEN s.first IS NULL THEN t.permit_limit END,
                        CASE WHEN s.first IS NULL THEN t.fencing_token ELSE {token} END,
                        CASE WHEN s.first IS NULL THEN s.h
                             ELSE jsonb_build_array({grant_first}) END,
                        CASE WHEN s.first IS NULL THEN s.w ELSE {after_first} END
                 FROM (SELECT h, w, CASE WHEN h = '[]'::jsonb THEN {first} END AS first
                       FROM (SELECT jsonb_path_query_array(t.holders, {LIVE_BUT_ID}, {vars}) AS h,
                                    jsonb_path_query_array(t.waiting, {LIVE_BUT_ID}, {vars}) AS w
                            ) AS a) AS s
             )
             FROM {CLOCK}{locked}
             WHERE t.name = $1
               AND (jsonb_path_exists(t.holders, '$[*] ? (@.exp > $now && @.id == $id)', {vars})
                    OR t.waiting @> jsonb_build_array(jsonb_build_object('id', $2::text)))
               AND NOT EXISTS (SELECT FROM gone)
             RETURNING jsonb_path_query_first(t.holders, {MADE_HERE}, {vars}) AS made{kept_ended}
         ), freed AS (SELECT 1 FROM gone UNION ALL SELECT 1 FROM kept){recording}
         SELECT 1 FROM freed LEFT JOIN LATERAL (
             SELECT pg_notify($3, coalesce(
                 $4 || '/' || (SELECT made ->> 'id' FROM kept WHERE made IS NOT NULL), $4))
             WHERE $3::text IS NOT NULL
         ) AS announced ON true",
        grant_first = grant_of_place("s.first", token, "false"),
        after_first = without("s.w", "s.first"),
        ended = if leaving { ended("t") } else { "1".to_owned() },
        locked = if leaving {
            format!(", (SELECT o.holders FROM {t} AS o WHERE o.name = $1 FOR UPDATE) AS old")
        } else {
            String::new()
        },
        kept_ended = if leaving {
            format!(", {}", ended("old"))
        } else {
            String::new()
        },
        recording = match terms {
            Some(terms) if leaving => withdrawing(terms),
            _ => recording("kept", terms),
        },
    )
}

/// The token of the grant to place `$2` in the row `row` as the statement
/// found it, as the column `ended`; null when the place holds none.
fn ended(row: &str) -> String {
    format!(
        "(jsonb_path_query_first({row}.holders, '$[*] ? (@.id == $id)',
              jsonb_build_object('id', $2::text)) ->> 'token')::bigint AS ended"
    )
}

/// What the end of a wait writes to the record of terms (see [`release`]):
/// the term of the grant it ended under the place `$2`, recorded for `$5`,
/// withdrawn, in the write that appends the term of the grant it made
/// when it made one that records a term, or else in a write of its own.
fn withdrawing(terms: &TableName) -> String {
    let record = terms::withdrawn_from("r.terms", "(SELECT ended FROM ended LIMIT 1)", "$5");
    format!(
        ", ended AS (
             SELECT ended FROM gone WHERE ended IS NOT NULL
             UNION ALL SELECT ended FROM kept WHERE ended IS NOT NULL
         ), granted AS (
             SELECT (made ->> 'token')::bigint AS fencing_token, (made -> 'term')::text AS term
             FROM kept WHERE made ? 'term'
         ), {recorded}, withdrawn AS (
             UPDATE {table} AS r SET terms = {record}
             WHERE r.name = $1 AND EXISTS (SELECT FROM ended) AND NOT EXISTS (SELECT FROM granted)
             RETURNING 1
         )",
        recorded = terms::appended_onto("granted", terms, "$1", "g.term", &record),
        table = terms.quoted(),
    )
}

/// What a fair attempt found, read from its statement's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// The lock is ours, with this token.
    Acquired(u64),
    /// Another holds it: what it holds (`None` when nobody lives any
    /// more) and how long until its first holder's lease ends.
    Held {
        claim: Option<Claim>,
        first_expiry: Option<Duration>,
    },
}

impl Found {
    /// Reads the attempt's row about `name`.
    pub(crate) fn read(row: &Row, name: &LockName) -> Result<Self> {
        let what = format!("acquiring {name}");
        if let Some(token) = get::<Option<i64>>(row, 0, &what)? {
            return Ok(Self::Acquired(rows::token(token, &what)?));
        }
        let kind: Option<String> = get(row, 1, &what)?;
        let limit: Option<i32> = get(row, 2, &what)?;
        let first_us: Option<i64> = get(row, 3, &what)?;
        Ok(Self::Held {
            claim: kind
                .map(|kind| rows::claim(&kind, limit, &what))
                .transpose()?,
            first_expiry: first_us.map(rows::duration),
        })
    }
}

//! The record of election terms, in both modes: a table beside the mode's
//! own (its name with `_terms` added, see [`TableName::terms`]), with a
//! row per election whose `terms` is a JSON array of its last
//! [`TERMS_KEPT`] terms, oldest first, each `{term, previous, holder}`.
//!
//! Only a campaign's grant writes it, in the statement that grants (see
//! [`appended_after`]): plain grants run statements without it, and cost
//! nothing more. Rows stay when the lock's row is deleted, so an observer
//! still reads the terms of a lock nobody holds any more.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{AcquireRequest, Lease, TERMS_KEPT, Term, TermLog};
use distlock_core::{Claim, Error, Holder, LockName, Result};
use tokio_postgres::Row;
use tokio_postgres::types::Type;

use crate::pool::Connections;
use crate::rows::{self, get};
use crate::table::TableName;

/// A common table expression, `recorded`, that appends a term to the
/// election's row of `terms` for each row of the expression `granted`
/// (its column `fencing_token`, the grant's token): `name` and `holder`
/// (the holder as JSON text, its label whole) are the statement's
/// parameters for them, never text put into it.
///
/// `INSERT … ON CONFLICT (name) DO UPDATE` locks the election's row and
/// reads its latest committed version, not the statement's snapshot: a
/// grant that waited behind another's lock names that one's term as its
/// `previous`, so two grants never name the same one. The oldest terms
/// past [`TERMS_KEPT`] go in the same write.
pub(crate) fn appended_after(granted: &str, terms: &TableName, name: &str, holder: &str) -> String {
    appended_onto(granted, terms, name, holder, "r.terms")
}

/// As [`appended_after`], onto `record` (an expression of the election's
/// row `r`, its kept terms) rather than `r.terms` as it is: a fair wait's
/// end appends the next place's term onto the record without the term it
/// withdraws (see [`withdrawn_from`]), in the one write of the row.
pub(crate) fn appended_onto(
    granted: &str,
    terms: &TableName,
    name: &str,
    holder: &str,
    record: &str,
) -> String {
    let table = terms.quoted();
    let older_kept = TERMS_KEPT - 1;
    format!(
        "recorded AS (
             INSERT INTO {table} AS r (name, terms)
             SELECT {name}, jsonb_build_array(jsonb_build_object(
                 'term', g.fencing_token, 'previous', NULL, 'holder', {holder}::text::jsonb))
             FROM {granted} AS g
             ON CONFLICT (name) DO UPDATE SET terms = (
                 SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb)
                 FROM jsonb_array_elements({record}) WITH ORDINALITY AS x(e, n)
                 WHERE n > jsonb_array_length({record}) - {older_kept}
             ) || jsonb_build_array(jsonb_build_object(
                 'term', excluded.terms -> 0 -> 'term',
                 'previous', {record} -> -1 -> 'term',
                 'holder', excluded.terms -> 0 -> 'holder'))
             RETURNING 1
         )"
    )
}

/// `record` (a JSON array of terms) without the entry whose term is
/// `term` and whose holder is `holder` (JSON text), both SQL expressions,
/// the entry that named it as its previous term taking its previous
/// instead: [`TermLog::withdraw`]'s splice, in [`TermRecord`]'s own
/// statement and in a statement that ends a grant nobody received. The
/// record as it is when it has no such entry (or `term` is null).
pub(crate) fn withdrawn_from(record: &str, term: &str, holder: &str) -> String {
    format!(
        "(SELECT coalesce(jsonb_agg(CASE WHEN y.e -> 'previous' = w.e -> 'term'
                  THEN jsonb_set(y.e, '{{previous}}', w.e -> 'previous') ELSE y.e END
                  ORDER BY y.n), '[]'::jsonb)
          FROM jsonb_array_elements({record}) WITH ORDINALITY AS y(e, n)
          LEFT JOIN (
              SELECT x.e FROM jsonb_array_elements({record}) AS x(e)
              WHERE (x.e ->> 'term')::bigint = {term} AND x.e -> 'holder' = {holder}::text::jsonb
              LIMIT 1
          ) AS w ON true
          WHERE w.e IS NULL OR y.e <> w.e)"
    )
}

/// Whether `request`'s grant is to be recorded as an election's term, on
/// a backend that keeps the record when `kept`.
///
/// # Errors
/// [`Error::Unsupported`] for a term asked of a reader's or a permit's
/// grant: a term is an exclusive grant, as campaigns ask.
/// [`Error::Denied`] for a term asked of a backend that could not create
/// the record's table: granting it unrecorded would hide it from
/// observers elsewhere.
pub(crate) fn recorded(request: &AcquireRequest, kept: bool) -> Result<bool> {
    if !request.records_term {
        return Ok(false);
    }
    if request.claim != Claim::Exclusive {
        return Err(Error::Unsupported(format!(
            "an election's term is an exclusive grant; {} asked to record one for a {:?} claim",
            request.name, request.claim
        )));
    }
    if !kept {
        return Err(Error::Denied {
            backend: "postgres",
            message: format!(
                "cannot record the term of election {}: this backend could not create its \
                 table of election terms when it opened (see the warning it logged); open a \
                 backend once as a role that may create tables in the lock table's schema, \
                 then open this one again",
                request.name
            ),
            source: None,
        });
    }
    Ok(true)
}

/// The holder as a term records it, as JSON text. Unlike a lock row's
/// holder, the label is kept whole: it is the value the campaign stood
/// with (at most 1 KiB, checked by the campaign), which observers return.
pub(crate) fn holder_json(holder: &Holder) -> String {
    serde_json::to_string(holder).unwrap_or_else(|_| "{}".to_owned())
}

/// Reads the record, through the pool: one statement, no write; and
/// withdraws a term from it (see [`TermLog::withdraw`]), one statement.
pub(crate) struct TermRecord {
    connections: Connections,
    /// `$1` name, `$2` the last term seen: the kept terms after it,
    /// oldest first.
    read: String,
    /// `$1` name, `$2` the term (0: the one of grant `$4`, where the
    /// mode can tell), `$3` the holder as JSON text, `$4` the grant's
    /// identity: removes the entry, and gives its previous term to the
    /// entry that named it.
    withdraw: String,
}

impl TermRecord {
    /// The record in table `terms`; `grants`, lease mode's lock table,
    /// where a grant whose answer never came is found by its identity.
    pub(crate) fn new(
        connections: Connections,
        terms: &TableName,
        grants: Option<&TableName>,
    ) -> Self {
        let table = terms.quoted();
        let term = match grants {
            Some(grants) => format!(
                "coalesce(nullif($2, 0), (
                     SELECT (h ->> 'token')::bigint
                     FROM {} AS t CROSS JOIN LATERAL jsonb_array_elements(t.holders) AS h
                     WHERE t.name = $1 AND h ->> 'id' = $4
                     LIMIT 1))",
                grants.quoted()
            ),
            None => "nullif($2, 0)".to_owned(),
        };
        Self {
            connections,
            withdraw: format!(
                "UPDATE {table} AS r SET terms = {spliced} WHERE r.name = $1",
                spliced = withdrawn_from("r.terms", &term, "$3"),
            ),
            read: format!(
                "SELECT (e ->> 'term')::bigint, (e ->> 'previous')::bigint, (e -> 'holder')::text
                 FROM {table} AS r
                 CROSS JOIN LATERAL jsonb_array_elements(r.terms) WITH ORDINALITY AS x(e, n)
                 WHERE r.name = $1 AND (e ->> 'term')::bigint > $2
                 ORDER BY n"
            ),
        }
    }
}

#[async_trait]
impl TermLog for TermRecord {
    async fn terms_after(&self, name: &LockName, after: u64, limit: Duration) -> Result<Vec<Term>> {
        let bytes = name.as_str().as_bytes();
        // Tokens are stored as `bigint`: none is above its largest value.
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let what = format!("reading the terms of election {name}");
        let rows = self
            .connections
            .query(
                &what,
                &self.read,
                &[(&bytes, Type::BYTEA), (&after, Type::INT8)],
                limit,
            )
            .await?;
        rows.iter().map(|row| term(row, &what)).collect()
    }

    async fn withdraw(&self, lease: &Lease, holder: &Holder) -> Result<()> {
        let term = i64::try_from(lease.fencing_token).unwrap_or(i64::MAX);
        self.withdrawing(
            &lease.name,
            term,
            holder,
            &lease.id.to_string(),
            lease.operation_timeout,
        )
        .await
    }
}

impl TermRecord {
    /// Withdraws term `term` of `name`, recorded for `holder`, within
    /// `timeout`: advisory fair mode's end of a wait, for a grant the
    /// server made to the wait's session after it gave up, before it
    /// releases that grant.
    ///
    /// # Errors
    /// A backend error; the term then stays in the record.
    pub(crate) async fn withdraw_term(
        &self,
        name: &LockName,
        term: i64,
        holder: &Holder,
        timeout: Duration,
    ) -> Result<()> {
        self.withdrawing(name, term, holder, "", timeout).await
    }

    /// The withdraw statement, for `term` (0: the one of grant `id`).
    async fn withdrawing(
        &self,
        name: &LockName,
        term: i64,
        holder: &Holder,
        id: &str,
        timeout: Duration,
    ) -> Result<()> {
        let bytes = name.as_str().as_bytes();
        let holder = holder_json(holder);
        self.connections
            .query(
                &format!("withdrawing a term of election {name}"),
                &self.withdraw,
                &[
                    (&bytes, Type::BYTEA),
                    (&term, Type::INT8),
                    (&holder, Type::TEXT),
                    (&id, Type::TEXT),
                ],
                timeout,
            )
            .await?;
        Ok(())
    }
}

/// A row of the read statement.
fn term(row: &Row, what: &str) -> Result<Term> {
    let term = rows::token(get(row, 0, what)?, what)?;
    let previous = get::<Option<i64>>(row, 1, what)?
        .map(|previous| rows::token(previous, what))
        .transpose()?;
    let holder: String = get(row, 2, what)?;
    let holder = serde_json::from_str(&holder).map_err(|error| Error::InvalidData {
        what: what.to_owned(),
        field: "holder".to_owned(),
        reason: format!("not a holder's JSON: {error}"),
    })?;
    Ok(Term::new(term, previous, holder))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_go_as_parameters_and_only_the_quoted_table_is_put_in() {
        let terms = TableName::new("s", "a \"b\"; --").unwrap().terms();
        let sql = appended_after("granted", &terms, "$1", "$8");
        assert!(sql.contains(r#""s"."a ""b""; --_terms""#), "{sql}");
        assert!(sql.contains("SELECT $1,"), "{sql}");
        assert!(sql.contains("$8::text::jsonb"), "{sql}");
    }

    #[test]
    fn a_campaign_value_is_kept_whole() {
        let label = "v".repeat(1024);
        let json = holder_json(&Holder {
            host: "h".into(),
            pid: 1,
            label: Some(label.clone()),
        });
        let back: Holder = serde_json::from_str(&json).unwrap();
        assert_eq!(back.label, Some(label));
    }
}

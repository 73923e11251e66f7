//! Counting the statements a PostgreSQL database runs, from
//! `pg_stat_statements`, which counts each as it ends.
//!
//! The transaction counters of [`crate::pg_stats`] are published late (up
//! to ten seconds after an idle connection's work), so a reading as a
//! window opens misses what the workers did just before, which then lands
//! in the window: with 64 worker processes, their start-up (connections,
//! prepared statements) outweighed the window's own work. The waiters
//! curve, whose windows are short and whose processes many, counts here
//! instead: statements, `BEGIN` and `COMMIT` among them, read at the
//! window's two edges. The extension must be loaded by the server
//! (`shared_preload_libraries`) and created in the database, as
//! `scripts/servers/postgres.sh` does; without it, a reading fails and
//! says so.

use crate::commands::Counts;
use crate::outcome::Outcome;
use crate::pg_stats::{PgStats, less_reading};

/// The statements one reading adds to the next: its own `SELECT`s.
pub(crate) const READ_COST: u64 = 2;

/// The name of the one count a reading gives.
const STATEMENTS: &str = "statements";

/// The statement counts of one database.
#[derive(Debug, Clone)]
pub(crate) struct PgStatements {
    stats: PgStats,
}

impl PgStatements {
    /// The counts of the database a `postgres://` URL names.
    pub(crate) fn for_url(url: &str) -> Self {
        Self {
            stats: PgStats::for_url(url),
        }
    }

    /// The database's other statistics.
    pub(crate) fn stats(&self) -> &PgStats {
        &self.stats
    }

    /// The statements the database has run so far, by every user.
    pub(crate) async fn sample(&self) -> Outcome<Counts> {
        // The extension's schema is wherever the database has it.
        let schema = self
            .stats
            .query_one(
                "SELECT quote_ident(n.nspname) FROM pg_extension AS e \
                 JOIN pg_namespace AS n ON n.oid = e.extnamespace \
                 WHERE e.extname = 'pg_stat_statements'",
            )
            .await
            .map_err(|e| {
                format!(
                    "{e}: the waiters curve counts PostgreSQL's statements with \
                     pg_stat_statements; load it (shared_preload_libraries) and \
                     CREATE EXTENSION pg_stat_statements in the database"
                )
            })?;
        let schema: String = schema.try_get(0).map_err(|e| e.to_string())?;
        let row = self
            .stats
            .query_one(&format!(
                "SELECT coalesce(sum(calls), 0)::bigint FROM {schema}.pg_stat_statements \
                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ))
            .await?;
        let calls: i64 = row.try_get(0).map_err(|e| e.to_string())?;
        Ok(Counts(
            [(STATEMENTS.to_owned(), u64::try_from(calls).unwrap_or(0))]
                .into_iter()
                .collect(),
        ))
    }

    /// The statements between two readings, less the earlier reading's
    /// own.
    pub(crate) fn between(before: &Counts, after: &Counts) -> Counts {
        less_reading(after.since(before), STATEMENTS, READ_COST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_does_not_count_itself() {
        let counts = |n| Counts([(STATEMENTS.to_owned(), n)].into_iter().collect());
        assert_eq!(
            PgStatements::between(&counts(100), &counts(112)),
            counts(10)
        );
        assert_eq!(PgStatements::between(&counts(5), &counts(6)).total(), 0);
    }
}

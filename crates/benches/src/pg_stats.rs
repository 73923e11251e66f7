//! Counting what a PostgreSQL database is sent, from the server's own
//! per-database counters: `pg_stat_database.xact_commit + xact_rollback`.
//!
//! Every statement distlock's PostgreSQL backend sends runs on its own
//! (autocommit), so each is one transaction, and so is each statement of
//! the advisory-lock peer. The counters also count what is not a
//! statement of either: a connection's start-up (one transaction, reading
//! the catalogs), a peer connection's preparing of a statement, the
//! `LISTEN`s of the wake-up listener, and autovacuum's work. They are
//! reported as transactions, not as statements.
//!
//! A connection publishes its counts when it closes, and while open at most
//! once a second, or, once idle, as much as ten seconds later. So the
//! counts are only read around work whose connections have closed: a
//! contended run's worker processes, from when its window opens until they
//! have all exited. Each reading is made on a connection of its own,
//! closed at once, so that its own two transactions are published before
//! the next reading; [`READ_COST`] of them fall between two readings.

use std::time::Duration;

use distlock::backend::{Query, UrlParts};
use distlock::postgres::tokio_postgres::{self, NoTls};

use crate::commands::Counts;
use crate::outcome::Outcome;

/// The transactions one reading adds to the next: its connection's
/// start-up and its query.
pub(crate) const READ_COST: u64 = 2;

/// How long after its clients have closed their connections the server's
/// counters are taken to be published: a closing connection publishes its
/// counts as its server process exits, within milliseconds.
pub(crate) const PUBLISHED_AFTER_CLOSE: Duration = Duration::from_millis(500);

/// The counter that one reading's own transactions land in.
const COMMITS: &str = "xact_commit";

/// distlock's own options of a PostgreSQL URL, which the drivers refuse
/// or warn about.
const DISTLOCK_OPTIONS: [&str; 6] = [
    "table",
    "schema",
    "mode",
    "advisory_class",
    "fair",
    "listen_url",
];

/// The counters of one database.
#[derive(Debug, Clone)]
pub(crate) struct PgStats {
    /// The URL less distlock's options, for the driver.
    url: String,
}

impl PgStats {
    /// The counters of the database a `postgres://` URL names.
    pub(crate) fn for_url(url: &str) -> Self {
        Self {
            url: driver_url(url),
        }
    }

    /// The database's committed and rolled-back transactions so far.
    pub(crate) async fn sample(&self) -> Outcome<Counts> {
        let row = self
            .query_one(
                "SELECT xact_commit, xact_rollback FROM pg_stat_database \
                 WHERE datname = current_database()",
            )
            .await?;
        let commits: i64 = row.try_get(0).map_err(|e| e.to_string())?;
        let rollbacks: i64 = row.try_get(1).map_err(|e| e.to_string())?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(Counts(
            [
                (COMMITS.to_owned(), count(commits)),
                ("xact_rollback".to_owned(), count(rollbacks)),
            ]
            .into_iter()
            .collect(),
        ))
    }

    /// The transactions between two readings, less the earlier reading's
    /// own.
    pub(crate) fn between(before: &Counts, after: &Counts) -> Counts {
        less_reading(after.since(before), COMMITS, READ_COST)
    }

    /// The server's version, e.g. `15.18 (Debian 15.18-0+deb12u1)`.
    pub(crate) async fn version(&self) -> Option<String> {
        let row = self.query_one("SHOW server_version").await.ok()?;
        row.try_get::<_, String>(0).ok()
    }

    /// One query on a connection of its own, closed before returning, so
    /// that the server publishes its transactions at once.
    pub(crate) async fn query_one(&self, sql: &str) -> Outcome<tokio_postgres::Row> {
        let fail = |e: tokio_postgres::Error| format!("PostgreSQL statistics: {e}");
        let (client, connection) = tokio_postgres::connect(&self.url, NoTls)
            .await
            .map_err(fail)?;
        let connection = tokio::spawn(connection);
        let row = client.query_one(sql, &[]).await.map_err(fail);
        // Dropping the client ends the connection, which says goodbye to
        // the server before the task finishes.
        drop(client);
        let _ = connection.await;
        row
    }
}

/// `delta` with a reading's own `cost` taken off its `counter`, and
/// without the counts that are then zero.
pub(crate) fn less_reading(mut delta: Counts, counter: &str, cost: u64) -> Counts {
    if let Some(n) = delta.0.get_mut(counter) {
        *n = n.saturating_sub(cost);
    }
    delta.0.retain(|_, n| *n > 0);
    delta
}

/// `url` without distlock's own options (`table`, `schema`, `mode`,
/// `advisory_class`, `fair`, `listen_url`), as a driver takes it; a URL that does not read is left
/// as it is, for the driver to refuse.
pub(crate) fn driver_url(url: &str) -> String {
    let Ok(parts) = UrlParts::split(url) else {
        return url.to_owned();
    };
    let Ok(mut query) = Query::parse(parts.query) else {
        return url.to_owned();
    };
    for key in DISTLOCK_OPTIONS {
        if query.take(key).is_err() {
            return url.to_owned();
        }
    }
    parts.with_query(&query.to_query_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distlock_options_are_left_to_distlock() {
        let url =
            "postgres://u:p@h:5/db?table=t&connect_timeout=3&mode=advisory&fair=true&listen_url=x";
        assert_eq!(driver_url(url), "postgres://u:p@h:5/db?connect_timeout=3");
        assert_eq!(driver_url("postgres://h/db?schema=s"), "postgres://h/db");
        assert_eq!(driver_url("postgres://h/db"), "postgres://h/db");
    }

    #[test]
    fn a_reading_does_not_count_itself() {
        let counts = |commits, rollbacks| {
            Counts(
                [
                    (COMMITS.to_owned(), commits),
                    ("xact_rollback".to_owned(), rollbacks),
                ]
                .into_iter()
                .collect(),
            )
        };
        let delta = PgStats::between(&counts(100, 4), &counts(112, 5));
        assert_eq!(delta, counts(10, 1));
        assert_eq!(PgStats::between(&counts(1, 0), &counts(2, 0)).total(), 0);
    }
}

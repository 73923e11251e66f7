//! Where an uncontended cycle of PostgreSQL advisory mode goes, beside
//! sqlx's `PgAdvisoryLock`: statements sent directly on one connection,
//! each step adding one part of the backend's work to the bare
//! `pg_try_advisory_lock` + `pg_advisory_unlock` pair, up to the backend's
//! cycle with the name's row kept on release. Measured only: none of them
//! is what the backend does.
//!
//! Every step uses the backend's table and advisory class, and a row of
//! its own in that table (the steps' name, given a free `objid`). Only the
//! table's quoted name is put into the text; every value is bound.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use distlock::postgres::tokio_postgres::error::SqlState;
use distlock::postgres::tokio_postgres::types::{ToSql, Type};
use distlock::postgres::tokio_postgres::{self, Client, NoTls, Statement};
use distlock::postgres::{Mode, PostgresConfig};
use distlock::{LockName, LockOptions};

use crate::outcome::Outcome;
use crate::pg_stats::driver_url;
use crate::target::{Server, Target};

/// One step from sqlx's pair to the backend's cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// `pg_try_advisory_lock(class, objid)` and `pg_advisory_unlock` on
    /// a fixed key: sqlx's work, as a try, on the backend's kind of key.
    BarePair,
    /// The same, the key read from the name's row in the acquire.
    KeyRead,
    /// The same, and the fencing token bumped in the row when granted.
    TokenBumped,
    /// The backend's statements, with the row kept on release: the
    /// holder's record, the idle timeout and keepalives set and reset,
    /// and the release's `pg_notify`.
    RowKept,
}

impl Step {
    /// Every step, from sqlx's work to the backend's.
    pub(crate) const ALL: [Step; 4] = [
        Step::BarePair,
        Step::KeyRead,
        Step::TokenBumped,
        Step::RowKept,
    ];
}

/// The server's clock in µs, as the backend reads it.
const CLOCK: &str =
    "(SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now_us) AS c";

/// The fencing token a grant gets, as the backend computes it.
const TOKEN: &str = "greatest(t.fencing_token + 1, c.now_us)";

/// The channel the release of [`Step::RowKept`] notifies: no one listens,
/// as no one does on the name's channel in an uncontended cycle.
const CHANNEL: &str = "distlock_bench_steps";

/// The even, non-negative `int4`s, which the table's `objid`s are.
const OBJID_MASK: i32 = 0x7fff_fffe;

/// How many `objid`s the steps' name tries before giving up.
const MAX_PROBES: usize = 64;

/// The steps' connection, its statements prepared once, and the steps'
/// name's key.
pub(crate) struct PgSteps {
    client: Client,
    class: i32,
    /// The steps' name, as the table keeps names.
    name: Vec<u8>,
    objid: i32,
    insert_key: Statement,
    remove_key: Statement,
    bare_acquire: Statement,
    read_acquire: Statement,
    bump_acquire: Statement,
    kept_acquire: Statement,
    unlock: Statement,
    kept_release: Statement,
}

impl PgSteps {
    /// Opens the steps on `target`'s database, table and class; `None`
    /// unless the target is PostgreSQL in advisory mode.
    ///
    /// # Errors
    /// The URL does not read, the server refuses the connection or a
    /// statement.
    pub(crate) async fn open(target: &Target, name: &LockName) -> Outcome<Option<Self>> {
        if !matches!(target.server, Server::Postgres(_)) {
            return Ok(None);
        }
        Self::open_url(&target.url, name).await
    }

    /// Opens the steps on the database, table and class of `url`, a
    /// PostgreSQL URL; `None` unless it is in advisory mode.
    async fn open_url(url: &str, name: &LockName) -> Outcome<Option<Self>> {
        let config = PostgresConfig::parse(url).map_err(|e| e.to_string())?;
        if config.mode != Mode::Advisory {
            return Ok(None);
        }
        let fail = |e: tokio_postgres::Error| format!("the advisory-mode steps: {e}");
        let (client, connection) = tokio_postgres::connect(&driver_url(url), NoTls)
            .await
            .map_err(fail)?;
        tokio::spawn(connection);
        let t = format!("{}.{}", quoted(config.schema()), quoted(config.table()));
        let sql = StepSql::new(&t);
        let prepare =
            async |sql: &str, types: &[Type]| client.prepare_typed(sql, types).await.map_err(fail);
        let steps = Self {
            insert_key: prepare(&sql.insert_key, &[Type::BYTEA, Type::INT4]).await?,
            remove_key: prepare(&sql.remove_key, &[Type::BYTEA]).await?,
            bare_acquire: prepare(sql.bare_acquire, &[Type::INT4, Type::INT4]).await?,
            read_acquire: prepare(&sql.read_acquire, &[Type::INT4, Type::BYTEA]).await?,
            bump_acquire: prepare(&sql.bump_acquire, &[Type::INT4, Type::BYTEA]).await?,
            kept_acquire: prepare(
                &sql.kept_acquire,
                &[Type::INT4, Type::BYTEA, Type::TEXT, Type::TEXT],
            )
            .await?,
            unlock: prepare(sql.unlock, &[Type::INT4, Type::INT4]).await?,
            kept_release: prepare(
                sql.kept_release,
                &[Type::INT4, Type::INT4, Type::TEXT, Type::TEXT],
            )
            .await?,
            client,
            class: config.advisory_class,
            name: format!("{}-steps", name.as_str()).into_bytes(),
            objid: 0,
        };
        steps.keyed().await
    }

    /// These steps, with their name's row in the table and its `objid`.
    async fn keyed(mut self) -> Outcome<Option<Self>> {
        self.objid = self.ensure_key().await?;
        Ok(Some(self))
    }

    /// Gives the steps' name a row, unless it has one (the backend's sweep
    /// may delete it between rounds), and answers its `objid`: the first
    /// even one free from the name's hash on, as the backend probes.
    async fn ensure_key(&self) -> Outcome<i32> {
        let fail = |e: tokio_postgres::Error| format!("keying the steps' name: {e}");
        let mut hash = DefaultHasher::new();
        self.name.hash(&mut hash);
        let mut objid = (hash.finish() as i32) & OBJID_MASK;
        for _ in 0..MAX_PROBES {
            match self
                .client
                .query_one(&self.insert_key, &[&self.name, &objid])
                .await
            {
                Ok(row) => return row.try_get(0).map_err(fail),
                Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                    objid = objid.wrapping_add(2) & OBJID_MASK;
                }
                Err(e) => return Err(fail(e)),
            }
        }
        Err(format!(
            "keying the steps' name: {MAX_PROBES} objids in a row belong to other names"
        ))
    }

    /// Deletes the steps' row, so that what the table keeps afterwards
    /// (the names curve's reading) is the backend's alone, and closes the
    /// connection.
    ///
    /// # Errors
    /// The server refuses the deletion.
    pub(crate) async fn close(self) -> Outcome<()> {
        self.client
            .execute(&self.remove_key, &[&self.name])
            .await
            .map(|_| ())
            .map_err(|e| format!("deleting the steps' row: {e}"))
    }

    /// Cycles of `step` on the steps' name, as often as `seconds` allows.
    ///
    /// # Errors
    /// A statement fails, or the uncontended lock is not granted.
    pub(crate) async fn cycles(&mut self, step: Step, seconds: Duration) -> Outcome<u64> {
        self.objid = self.ensure_key().await?;
        let started = Instant::now();
        let mut cycles = 0u64;
        while started.elapsed() < seconds {
            let granted = match self.acquire(step).await? {
                Some(granted) => granted,
                // The sweep deleted the row while it was not held.
                None => {
                    self.objid = self.ensure_key().await?;
                    self.acquire(step)
                        .await?
                        .ok_or_else(|| format!("{step:?}: the steps' name has no row"))?
                }
            };
            if !granted {
                return Err(format!("{step:?}: an uncontended lock was held"));
            }
            self.release(step).await?;
            cycles += 1;
        }
        Ok(cycles)
    }

    /// One acquire of `step`: whether granted; `None` when the steps'
    /// name has no row.
    async fn acquire(&self, step: Step) -> Outcome<Option<bool>> {
        let fail = |e: tokio_postgres::Error| format!("{step:?}'s acquire: {e}");
        let lease = LockOptions::DEFAULT_LEASE.as_millis().to_string();
        let holder = r#"{"label": "distlock-bench steps"}"#;
        let (statement, params): (&Statement, Vec<&(dyn ToSql + Sync)>) = match step {
            Step::BarePair => (&self.bare_acquire, vec![&self.class, &self.objid]),
            Step::KeyRead => (&self.read_acquire, vec![&self.class, &self.name]),
            Step::TokenBumped => (&self.bump_acquire, vec![&self.class, &self.name]),
            Step::RowKept => (
                &self.kept_acquire,
                vec![&self.class, &self.name, &lease, &holder],
            ),
        };
        let rows = self.client.query(statement, &params).await.map_err(fail)?;
        rows.first()
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(fail)
    }

    /// One release of `step`.
    async fn release(&self, step: Step) -> Outcome<()> {
        let fail = |e: tokio_postgres::Error| format!("{step:?}'s release: {e}");
        let payload = String::from_utf8_lossy(&self.name).into_owned();
        let row = match step {
            Step::RowKept => {
                self.client
                    .query_one(
                        &self.kept_release,
                        &[&self.class, &self.objid, &CHANNEL, &payload],
                    )
                    .await
            }
            _ => {
                self.client
                    .query_one(&self.unlock, &[&self.class, &self.objid])
                    .await
            }
        }
        .map_err(fail)?;
        if row.try_get(0).map_err(fail)? {
            Ok(())
        } else {
            Err(format!("{step:?}: the lock was not held at its release"))
        }
    }
}

/// `ident` as a quoted SQL identifier.
fn quoted(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// The steps' SQL, for one table (`t`, quoted).
struct StepSql {
    /// `$1` name, `$2` objid: gives the name that `objid` unless it has a
    /// row (an `objid` another name has fails); answers its `objid`.
    insert_key: String,
    /// `$1` name: deletes its row.
    remove_key: String,
    /// `$1` class, `$2` objid: answers whether granted.
    bare_acquire: &'static str,
    /// `$1` class, `$2` name: whether granted, the `objid`.
    read_acquire: String,
    /// The same, the token bumped when granted; a token floored by the
    /// clock commits without waiting for the flush, as the backend's.
    bump_acquire: String,
    /// The same, with `$3` idle timeout in ms and `$4` holder as JSON
    /// text: the holder's record, the idle timeout and keepalives, as the
    /// backend's exclusive acquire (without the writers' intent, which
    /// nothing uses in an uncontended cycle).
    kept_acquire: String,
    /// `$1` class, `$2` objid: answers whether held.
    unlock: &'static str,
    /// The same, and the idle timeout's reset and `pg_notify($3, $4)`, as
    /// the backend's release, without deleting the row.
    kept_release: &'static str,
}

impl StepSql {
    fn new(t: &str) -> Self {
        let read = format!(
            "k AS (SELECT objid FROM {t} WHERE name = $2),
             l AS MATERIALIZED (
                 SELECT k.objid, pg_try_advisory_lock($1, k.objid) AS granted FROM k
             )"
        );
        let bumped = |holders: &str| {
            format!(
                "bumped AS (
                     UPDATE {t} AS t SET fencing_token = {TOKEN}{holders}
                     FROM l, {CLOCK}
                     WHERE t.name = $2 AND l.granted
                     RETURNING t.fencing_token, t.fencing_token = c.now_us AS floored
                 )"
            )
        };
        let no_flush_wait = "CASE WHEN (SELECT floored FROM bumped)
                                  THEN set_config('synchronous_commit', 'off', true) END";
        let recorded = format!(
            ", holders = jsonb_build_object(pg_backend_pid()::text,
                   jsonb_build_object('token', {TOKEN}, 'holder', $4::text::jsonb))"
        );
        let session = |setting: &str, granted: &str| {
            format!(
                "set_config('{setting}', CASE WHEN l.granted THEN {granted} ELSE '0' END, false)"
            )
        };
        Self {
            insert_key: format!(
                "WITH added AS (
                     INSERT INTO {t} (name, objid, fencing_token) VALUES ($1, $2, 0)
                     ON CONFLICT (name) DO NOTHING
                     RETURNING objid
                 )
                 SELECT objid FROM added UNION ALL SELECT objid FROM {t} WHERE name = $1"
            ),
            remove_key: format!("DELETE FROM {t} WHERE name = $1"),
            bare_acquire: "SELECT pg_try_advisory_lock($1, $2)",
            read_acquire: format!("WITH {read} SELECT l.granted, l.objid FROM l"),
            bump_acquire: format!(
                "WITH {read}, {}
                 SELECT l.granted, (SELECT fencing_token FROM bumped), {no_flush_wait} FROM l",
                bumped("")
            ),
            kept_acquire: format!(
                "WITH {read}, {}
                 SELECT l.granted, (SELECT fencing_token FROM bumped), pg_backend_pid(),
                        {}, {}, {}, {}, {no_flush_wait}
                 FROM l",
                bumped(&recorded),
                session("idle_session_timeout", "$3"),
                session("tcp_keepalives_idle", "ceil($3::numeric / 1000)::text"),
                session("tcp_keepalives_interval", "'1'"),
                session("tcp_keepalives_count", "'3'"),
            ),
            unlock: "SELECT pg_advisory_unlock($1, $2)",
            kept_release: "SELECT pg_advisory_unlock($1, $2),
                                  set_config('idle_session_timeout', '0', false),
                                  pg_notify($3, $4),
                                  set_config('synchronous_commit', 'off', true)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_quoted_table_name_is_interpolated() {
        let t = format!("{}.{}", quoted("s"), quoted("a \"b\"; --"));
        assert_eq!(t, r#""s"."a ""b""; --""#);
        let sql = StepSql::new(&t);
        for text in [
            &sql.insert_key,
            &sql.read_acquire,
            &sql.bump_acquire,
            &sql.kept_acquire,
        ] {
            assert!(text.contains(&t), "{text}");
        }
    }

    /// Every step takes and releases its lock on a real server, in the
    /// table the backend made; the steps' row keeps its key across them,
    /// and goes when they close.
    #[tokio::test]
    async fn every_step_cycles_on_the_backends_table() {
        // A test whose server is missing fails: it never passes unrun.
        let url = std::env::var("DISTLOCK_TEST_POSTGRES_URL")
            .ok()
            .filter(|url| !url.is_empty())
            .expect("DISTLOCK_TEST_POSTGRES_URL is not set: run the tests with scripts/test");
        let url = format!(
            "{url}{}mode=advisory",
            if url.contains('?') { '&' } else { '?' }
        );
        // The backend makes its table when it opens.
        let _backend = distlock::open(&url).await.unwrap();
        let name = crate::names::bench_name("steps-test");
        let mut steps = PgSteps::open_url(&url, &name).await.unwrap().unwrap();
        for step in Step::ALL {
            let cycles = steps.cycles(step, Duration::from_millis(50)).await.unwrap();
            assert!(cycles > 0, "{step:?}");
        }
        let objid = steps.objid;
        assert_eq!(steps.ensure_key().await.unwrap(), objid);
        let (client, connection) = tokio_postgres::connect(&driver_url(&url), NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        steps.close().await.unwrap();
        let table = format!(
            "{}.{}",
            quoted("public"),
            quoted(distlock::postgres::DEFAULT_ADVISORY_TABLE)
        );
        let left = client
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE objid = $1"),
                &[&objid],
            )
            .await
            .unwrap();
        assert_eq!(left.get::<_, i64>(0), 0, "the steps' row outlived them");
    }

    #[test]
    fn each_step_adds_to_the_one_before() {
        let sql = StepSql::new("t");
        assert!(!sql.read_acquire.contains("UPDATE"));
        assert!(sql.bump_acquire.contains("fencing_token"));
        assert!(!sql.bump_acquire.contains("holders"));
        assert!(!sql.bump_acquire.contains("idle_session_timeout"));
        assert!(sql.kept_acquire.contains("holders"));
        assert!(sql.kept_acquire.contains("idle_session_timeout"));
        assert!(sql.kept_release.contains("pg_notify"));
        assert!(!sql.kept_release.contains("DELETE"));
    }
}

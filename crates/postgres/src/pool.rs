//! Pooled connections, each running one statement at a time.
//!
//! Behind a transaction pooler every statement goes through
//! [`Client::query_typed`]: Parse, Bind, Execute and Sync with an unnamed
//! statement and parameter types given up front, in one round trip.
//! PgBouncer 1.18 in transaction mode (Debian 12's) may run each statement
//! on another server connection, and it predates prepared-statement
//! support, so a named statement prepared on one would be missing on the
//! next. For the same reason nothing here sets session state: no `SET`, no
//! temporary tables, no `LISTEN`. Where the check at open found no pooler
//! ([`Connections::prepare_unless_pooled`]), each statement is prepared once
//! per connection instead, then only bound and executed (see
//! [`prepared`]): the server no longer parses and plans it at every call.
//!
//! Every statement runs in a transaction of its own at `READ COMMITTED`,
//! which the statements are written for (an update that finds its row
//! changed since the statement began reads the newest version, where
//! `REPEATABLE READ` and `SERIALIZABLE` fail with 40001), whatever the
//! role's, the database's or the server's `default_transaction_isolation`.
//! The level is set by the `BEGIN`, not for the session: a session's setting
//! would not follow the statement from one server connection to the next
//! behind PgBouncer, which also refuses the startup packet's `options`.
//! The `BEGIN`, the statement and the `COMMIT` are sent together, so it
//! costs no round trip.
//!
//! [`Client::query_typed`]: tokio_postgres::Client::query_typed

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use distlock_core::backend::ServerInfo;
use distlock_core::{Error, Result};
use tokio_postgres::Row;

use crate::error::{from_driver, from_pool, within};
use crate::pooler;
use crate::prepared::{self, Params};
use crate::tls::Endpoint;

/// Opens each statement's transaction: see the module's documentation.
pub(crate) const BEGIN_READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// How long each step of opening a backend may take: connecting,
/// creating its tables, and checking the server (in advisory mode, also
/// that no transaction pooler stands in between). The calls core makes
/// later each carry their own time.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The bound on opening a backend, under its old name: listing, forced
/// releases and reads of terms now take the client's operation timeout.
#[deprecated(
    since = "0.1.0",
    note = "renamed SETUP_TIMEOUT: it bounds only the steps of opening a backend"
)]
pub const ADMIN_TIMEOUT: Duration = SETUP_TIMEOUT;

/// How many connections one backend keeps open at most.
pub(crate) const POOL_SIZE: usize = 16;

/// A pool of connections to one server (or PgBouncer).
#[derive(Clone)]
pub(crate) struct Connections {
    pool: Pool,
    /// Whether statements are prepared: once no transaction pooler was
    /// found in the way, until a prepared statement goes astray.
    prepares: Arc<AtomicBool>,
}

impl Connections {
    /// A pool that connects to `endpoint`, with its TLS connector, when a
    /// statement needs it.
    ///
    /// # Errors
    /// A backend error if the pool cannot be built.
    pub(crate) fn new(endpoint: Endpoint) -> Result<Self> {
        let manager = Manager::from_config(
            endpoint.config,
            endpoint.tls,
            ManagerConfig {
                // A connection comes back to the pool only after its
                // statement completed (see `Checkout`), so checking that it
                // is still open is enough, and costs no round trip.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(|error| Error::backend("postgres", "building the connection pool", error))?;
        Ok(Self {
            pool,
            prepares: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Has the pool prepare its statements, unless two of its connections
    /// show a transaction pooler in the way (see [`pooler`], which uses
    /// keys of `class`), each step within `timeout`. Answers whether it
    /// prepares them.
    ///
    /// # Errors
    /// A backend error.
    ///
    /// # Cancel safety
    /// Dropping the future leaves statements unnamed; it may leave the
    /// check's lock on a connection, which is closed rather than reused.
    pub(crate) async fn prepare_unless_pooled(
        &self,
        class: i32,
        timeout: Duration,
    ) -> Result<bool> {
        let what = "checking for a transaction pooler";
        let taking = async {
            let first = self.pool.get().await?;
            let second = self.pool.get().await?;
            Ok::<_, deadpool_postgres::PoolError>((Checkout(Some(first)), Checkout(Some(second))))
        };
        let (mut first, mut second) = within(what, timeout, taking)
            .await?
            .map_err(|error| from_pool(what, error))?;
        let pooled =
            pooler::reaches_transaction_pooler(first.client(), second.client(), class, timeout)
                .await?;
        first.done();
        second.done();
        if !pooled {
            self.prepare_statements();
        }
        Ok(!pooled)
    }

    /// Has the pool prepare its statements: for a URL known to reach the
    /// server itself.
    pub(crate) fn prepare_statements(&self) {
        self.prepares.store(true, Ordering::Relaxed);
    }

    /// Runs `sql` with `params` on a pooled connection, waiting at most
    /// `timeout` for a connection and the answer together.
    ///
    /// # Errors
    /// A backend error, or [`Error::Denied`] for refused credentials or
    /// privileges; `what` says what was being done.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the statement running on the server,
    /// where it commits or not as a whole. The connection it ran on is
    /// closed rather than reused, so no later statement waits behind it.
    pub(crate) async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &Params<'_>,
        timeout: Duration,
    ) -> Result<Vec<Row>> {
        let run = async {
            let object = self
                .pool
                .get()
                .await
                .map_err(|error| from_pool(what, error))?;
            let mut checkout = Checkout(Some(object));
            let rows = self
                .run(checkout.client(), sql, params)
                .await
                .map_err(|error| from_driver(what, error));
            checkout.done();
            rows
        };
        within(what, timeout, run).await?
    }

    /// Runs `sql` in a transaction of its own on `client`: prepared when
    /// the pool prepares, else unnamed. A prepared statement gone astray
    /// shows a pooler the check at open missed: statements are then
    /// unnamed for good, and this one runs again so (it failed before it
    /// ran, and its transaction was rolled back).
    async fn run(
        &self,
        client: &ClientWrapper,
        sql: &str,
        params: &Params<'_>,
    ) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
        if self.prepares.load(Ordering::Relaxed) {
            let (types, values) = prepared::split(params);
            let answered = match prepared::statement(client, sql, &types).await {
                Ok(statement) => in_transaction(client, client.query(&statement, &values)).await,
                Err(error) => Err(error),
            };
            match answered {
                Err(error) if prepared::went_astray(&error) => {
                    tracing::warn!(
                        "a prepared statement went astray, as behind a transaction pooler: \
                         sending statements unnamed from now on"
                    );
                    self.prepares.store(false, Ordering::Relaxed);
                    client.statement_cache.clear();
                }
                answered => return answered,
            }
        }
        in_transaction(client, client.query_typed(sql, params)).await
    }
}

/// Runs `statement`, a statement of `client`'s not yet sent, between
/// `BEGIN` and `COMMIT`: see the module's documentation.
async fn in_transaction(
    client: &tokio_postgres::Client,
    statement: impl Future<Output = std::result::Result<Vec<Row>, tokio_postgres::Error>>,
) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
    // Biased, so that the three are sent in this order, at once, in the
    // first poll; the server answers them in order. A statement that
    // fails leaves its transaction aborted, which the `COMMIT` then ends
    // with a rollback, without an error.
    let (begun, rows, committed) = tokio::join!(
        biased;
        client.batch_execute(BEGIN_READ_COMMITTED),
        statement,
        client.batch_execute("COMMIT"),
    );
    begun.and(rows).and_then(|rows| committed.map(|()| rows))
}

impl Connections {
    /// The server's version and the time on its clock, for a deployment
    /// check, asked within `timeout`.
    ///
    /// # Errors
    /// As [`query`](Self::query).
    pub(crate) async fn server_info(&self, timeout: Duration) -> Result<ServerInfo> {
        let rows = self
            .query(
                "asking the server for its version and time",
                "SELECT current_setting('server_version'), \
                 (extract(epoch from clock_timestamp()) * 1000000)::int8",
                &[],
                timeout,
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(ServerInfo::default());
        };
        let version: Option<String> = row.try_get(0).ok();
        let micros: Option<i64> = row.try_get(1).ok();
        let clock = micros
            .and_then(|micros| u64::try_from(micros).ok())
            .map(|micros| std::time::UNIX_EPOCH + Duration::from_micros(micros));
        Ok(ServerInfo::new(
            version.map(|version| format!("PostgreSQL {version}")),
            clock,
        ))
    }
}

/// A connection taken from the pool for one statement. Dropped before the
/// statement completed, it closes the connection instead of returning it:
/// the server still owes that statement's answer, and a statement sent
/// after it would wait for it.
struct Checkout(Option<Object>);

impl Checkout {
    fn client(&self) -> &ClientWrapper {
        self.0
            .as_ref()
            .expect("a checkout holds its connection until done")
    }

    /// The statement completed: the connection may go back to the pool.
    fn done(&mut self) {
        self.0.take();
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            // Taken out of the pool and dropped, its connection task ends.
            drop(Object::take(object));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against the real server and PgBouncer before it: `scripts/test`
    //! starts them and sets `DISTLOCK_TEST_POSTGRES_URL` and
    //! `DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL`.

    use distlock_core::backend::LeaseId;

    use super::*;
    use crate::config::{DEFAULT_ADVISORY_CLASS, PostgresConfig};

    /// Long enough for any step of a test.
    const PATIENCE: Duration = Duration::from_secs(30);

    /// A pool for the URL in `variable`. A missing server fails the test:
    /// a run without it must not pass as if it had one.
    fn connections(variable: &str) -> Connections {
        let url = std::env::var(variable).unwrap_or_else(|_| {
            panic!(
                "{variable} is not set: run the tests with scripts/test, which starts PostgreSQL"
            )
        });
        let config = PostgresConfig::parse(&url).expect("a valid URL");
        let (endpoint, _) = config.endpoints().expect("the URL's endpoints");
        Connections::new(endpoint).expect("a pool")
    }

    /// Whether a statement run through `connections` is among the
    /// statements prepared on the connection that runs it.
    async fn runs_prepared(connections: &Connections) -> bool {
        // A text of its own, so that no other statement is taken for it.
        let sql = format!(
            "SELECT statement FROM pg_prepared_statements /* {} */",
            LeaseId::random()
        );
        let rows = connections
            .query("listing prepared statements", &sql, &[], PATIENCE)
            .await
            .expect("the prepared statements");
        rows.iter().any(|row| row.get::<_, String>(0) == sql)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_are_prepared_only_where_no_pooler_is_in_the_way() {
        let direct = connections("DISTLOCK_TEST_POSTGRES_URL");
        assert!(!runs_prepared(&direct).await, "unnamed until checked");
        let prepares = direct
            .prepare_unless_pooled(DEFAULT_ADVISORY_CLASS, PATIENCE)
            .await
            .expect("the check");
        assert!(prepares, "the server itself is no pooler");
        assert!(runs_prepared(&direct).await);

        let pooled = connections("DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL");
        let prepares = pooled
            .prepare_unless_pooled(DEFAULT_ADVISORY_CLASS, PATIENCE)
            .await
            .expect("the check");
        assert!(!prepares, "PgBouncer in transaction mode is a pooler");
        for _ in 0..5 {
            assert!(!runs_prepared(&pooled).await);
        }
    }

    /// How many statements prepared on `client`'s session take or free an
    /// advisory lock.
    async fn advisory_statements_prepared(client: &ClientWrapper) -> i64 {
        let sql = "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%advisory%'";
        let rows = client
            .query_typed(sql, &[])
            .await
            .expect("the prepared statements");
        rows[0].get(0)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_check_for_a_pooler_leaves_no_statement_prepared() {
        // Behind a pooler, a statement prepared by one process stays on a
        // server connection that the pooler hands to others, where one
        // of the same name would run it with their parameters.
        let direct = connections("DISTLOCK_TEST_POSTGRES_URL");
        let first = direct.pool.get().await.expect("a connection");
        let second = direct.pool.get().await.expect("another connection");
        let pooled =
            pooler::reaches_transaction_pooler(&first, &second, DEFAULT_ADVISORY_CLASS, PATIENCE)
                .await
                .expect("the check");
        assert!(!pooled, "the server itself is no pooler");
        assert_eq!(advisory_statements_prepared(&first).await, 0);
        assert_eq!(advisory_statements_prepared(&second).await, 0);
    }

    /// Runs `SELECT n + 1` through `connections`, and checks its answer.
    async fn add_one(connections: &Connections, n: i32) {
        let rows = connections
            .query(
                "adding one",
                "SELECT $1::int4 + 1",
                &[(&n, tokio_postgres::types::Type::INT4)],
                PATIENCE,
            )
            .await
            .expect("an answer");
        assert_eq!(rows[0].get::<_, i32>(0), n + 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prepared_statement_gone_astray_is_run_unnamed_and_so_are_the_next() {
        let direct = connections("DISTLOCK_TEST_POSTGRES_URL");
        direct.prepare_statements();
        add_one(&direct, 1).await;
        assert!(runs_prepared(&direct).await);
        // One at a time, the pool's statements all ran on one connection:
        // its prepared statements go, as a pooler's other clients could
        // make them go.
        let object = direct.pool.get().await.expect("the pool's connection");
        object
            .batch_execute("DEALLOCATE ALL")
            .await
            .expect("dropping its statements");
        drop(object);
        add_one(&direct, 2).await;
        assert!(!runs_prepared(&direct).await);
    }
}

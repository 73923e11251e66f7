//! Pooled connections, each running one unnamed statement at a time.
//!
//! Every statement goes through [`Client::query_typed`]: Parse, Bind,
//! Execute and Sync with an unnamed statement and parameter types given
//! up front, in one round trip. PgBouncer 1.18 in transaction mode (Debian
//! 12's) may run each statement on another server connection, and it
//! predates prepared-statement support, so a named statement prepared on
//! one would be missing on the next. For the same reason nothing here sets
//! session state: no `SET`, no temporary tables, no `LISTEN`.
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

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use distlock_core::backend::ServerInfo;
use distlock_core::{Error, Result};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::error::{from_driver, from_pool, within};
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

/// One statement's parameters, each with its type.
pub(crate) type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// A pool of connections to one server (or PgBouncer).
#[derive(Clone)]
pub(crate) struct Connections {
    pool: Pool,
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
        Ok(Self { pool })
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
            let client = checkout.client();
            // Biased, so that the three are sent in this order, at once, in
            // the first poll; the server answers them in order. A
            // statement that fails leaves its transaction aborted, which
            // the `COMMIT` then ends with a rollback, without an error.
            let (begun, rows, committed) = tokio::join!(
                biased;
                client.batch_execute(BEGIN_READ_COMMITTED),
                client.query_typed(sql, params),
                client.batch_execute("COMMIT"),
            );
            let rows = begun
                .and(rows)
                .and_then(|rows| committed.map(|()| rows))
                .map_err(|error| from_driver(what, error));
            checkout.done();
            rows
        };
        within(what, timeout, run).await?
    }
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
    fn client(&self) -> &tokio_postgres::Client {
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

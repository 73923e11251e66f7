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
//! [`Client::query_typed`]: tokio_postgres::Client::query_typed

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use distlock_core::{Error, Result, ServerInfo};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::error::{from_driver, from_pool};
use crate::tls::Endpoint;

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
            let rows = checkout
                .client()
                .query_typed(sql, params)
                .await
                .map_err(|error| from_driver(what, error));
            checkout.done();
            rows
        };
        tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| Error::Backend {
                backend: "postgres",
                message: format!("{what}: no answer within {timeout:?}"),
                source: None,
            })?
    }
}

/// How long asking the server for its version and time may take.
pub(crate) const INFO_TIMEOUT: Duration = Duration::from_secs(10);

impl Connections {
    /// The server's version and the time on its clock, for a deployment
    /// check.
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

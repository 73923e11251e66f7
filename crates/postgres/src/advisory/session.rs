//! Dedicated connections for advisory mode: each one is a server session
//! that can hold session advisory locks, opened outside the pool, and
//! watched so that its end is known at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use deadpool_postgres::ClientWrapper;
use distlock_core::Result;
use distlock_core::backend::LossReporter;
use tokio_postgres::error::SqlState;
use tokio_postgres::{CancelToken, Row};

use crate::error::{from_driver, within};
use crate::prepared::{self, Params};
use crate::tls::Endpoint;

/// How many idle sessions a backend keeps for its next attempts; more are
/// closed. Opening one costs a connection and an authentication.
const MAX_SPARES: usize = 8;

/// Sets a session's transactions to READ COMMITTED.
const SESSION_READ_COMMITTED: &str =
    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED";

/// One server session of our own, with its driver task.
///
/// Dropped, it closes its connection, and the server ends every advisory
/// lock the session held.
pub(crate) struct Session {
    /// The connection, with its prepared statements (see [`prepared`]).
    /// Dropped, it aborts the driver task: the driver alone would keep the
    /// connection open until every statement sent was answered, and a
    /// statement waiting in a lock's queue may not be for long.
    client: ClientWrapper,
    watch: Arc<Watch>,
}

/// What the driver task reports to when the connection ends.
#[derive(Default)]
struct Watch {
    /// The grant that lives on this session, while one does.
    reporter: Mutex<Option<LossReporter>>,
}

impl Watch {
    fn set(&self, reporter: Option<LossReporter>) {
        *self.reporter.lock().unwrap_or_else(PoisonError::into_inner) = reporter;
    }

    fn take(&self) -> Option<LossReporter> {
        self.reporter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl Session {
    /// Opens a session to `endpoint` within `timeout`.
    ///
    /// # Errors
    /// As [`from_driver`], or a backend error when the server does not
    /// answer in time.
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing open.
    async fn open(endpoint: &Endpoint, timeout: Duration) -> Result<Self> {
        let what = "opening a session for advisory locks";
        let (client, connection) = within(what, timeout, endpoint.connect())
            .await?
            .map_err(|error| from_driver(what, error))?;
        let watch = Arc::new(Watch::default());
        let ended = watch.clone();
        let driver = tokio::spawn(async move {
            // Ends when the server closes the connection (terminated,
            // restarted, timed out), the network fails, or the session is
            // dropped; only the first two leave a reporter set.
            let _ = connection.await;
            if let Some(reporter) = ended.take() {
                reporter.report();
            }
        });
        let client = ClientWrapper::new(client, driver);
        // The statements are written for READ COMMITTED (see
        // `statements::wait_in_line`), whatever the role's, the database's
        // or the server's default. For the session: advisory mode refuses
        // a transaction pooler, whose connections would not keep it.
        within(what, timeout, client.batch_execute(SESSION_READ_COMMITTED))
            .await?
            .map_err(|error| from_driver(what, error))?;
        Ok(Self { client, watch })
    }

    /// From now on, the end of this connection reports `reporter`'s grant
    /// lost.
    pub(crate) fn pin(&self, reporter: LossReporter) {
        self.watch.set(Some(reporter));
    }

    /// The end of this connection no longer concerns any grant.
    pub(crate) fn unpin(&self) {
        self.watch.set(None);
    }

    /// The connection, for the pooler check (see [`crate::pooler`]).
    pub(crate) fn client(&self) -> &ClientWrapper {
        &self.client
    }

    /// Whether the connection has ended, and every lock on it with it.
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// What cancels the statement this session runs, from another
    /// connection (see [`Spares::cancel`]).
    pub(crate) fn cancel_token(&self) -> CancelToken {
        self.client.cancel_token()
    }

    /// Runs `sql` with `params`, waiting at most `timeout` for the answer
    /// (and for preparing `sql` on its first use on this session).
    ///
    /// # Errors
    /// A backend error, or
    /// [`Error::Denied`](distlock_core::Error::Denied); `what` says what
    /// was being done.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the statement running; its answer
    /// then comes before the answer to the session's next statement.
    pub(crate) async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &Params<'_>,
        timeout: Duration,
    ) -> Result<Vec<Row>> {
        within(what, timeout, prepared::query(&self.client, sql, params))
            .await?
            .map_err(|error| from_driver(what, error))
    }

    /// Runs `sql`, which takes no parameters and answers no rows, as a
    /// simple query: nothing to prepare, so it is sent at once, before any
    /// statement asked for after it.
    ///
    /// # Errors
    /// As [`query`](Self::query).
    ///
    /// # Cancel safety
    /// As [`query`](Self::query).
    pub(crate) async fn execute(&self, what: &str, sql: &str, timeout: Duration) -> Result<()> {
        within(what, timeout, self.client.batch_execute(sql))
            .await?
            .map_err(|error| from_driver(what, error))
    }

    /// As [`query`](Self::query), but a statement the server refused with
    /// `code` answers `None`.
    ///
    /// # Errors
    /// As [`query`](Self::query).
    ///
    /// # Cancel safety
    /// As [`query`](Self::query).
    pub(crate) async fn query_unless(
        &self,
        code: &SqlState,
        what: &str,
        sql: &str,
        params: &Params<'_>,
        timeout: Duration,
    ) -> Result<Option<Vec<Row>>> {
        match within(what, timeout, prepared::query(&self.client, sql, params)).await? {
            Ok(rows) => Ok(Some(rows)),
            Err(error) if error.code() == Some(code) => Ok(None),
            Err(error) => Err(from_driver(what, error)),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Closed on purpose: nothing was lost. The client, dropped next,
        // aborts the driver.
        self.unpin();
    }
}

/// `future`'s output, or a backend error once `timeout` passed.
/// How long a background refill of the spares may take to connect.
const REFILL_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle sessions kept for the next attempts, and how to open more.
///
/// One spare is kept ready in the background: opening a session costs a
/// connection and an authentication (SCRAM's key derivation is slow in
/// unoptimized builds), which an attempt would otherwise pay within its
/// operation timeout.
#[derive(Clone)]
pub(crate) struct Spares {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: Endpoint,
    idle: Mutex<Vec<Session>>,
    /// Whether a background open is under way.
    refilling: AtomicBool,
}

impl Spares {
    /// Spares that connect to `endpoint`; the first opens at once, in the
    /// background.
    pub(crate) fn new(endpoint: Endpoint) -> Self {
        let spares = Self {
            inner: Arc::new(Inner {
                endpoint,
                idle: Mutex::new(Vec::new()),
                refilling: AtomicBool::new(false),
            }),
        };
        spares.refill();
        spares
    }

    /// An idle session that is still open, or a new one.
    ///
    /// # Errors
    /// As [`Session::open`].
    ///
    /// # Cancel safety
    /// Dropping the future closes the session it was getting.
    pub(crate) async fn take(&self, timeout: Duration) -> Result<Session> {
        loop {
            let (idle, now_empty) = {
                let mut idle = self
                    .inner
                    .idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let session = idle.pop();
                (session, idle.is_empty())
            };
            if now_empty {
                self.refill();
            }
            match idle {
                Some(session) if !session.is_closed() => return Ok(session),
                Some(_closed) => continue,
                None => return Session::open(&self.inner.endpoint, timeout).await,
            }
        }
    }

    /// Keeps `session` for a later attempt. Only a session that holds no
    /// lock, has no statement in flight and has no idle timeout set may
    /// come back.
    pub(crate) fn put(&self, session: Session) {
        if session.is_closed() {
            return;
        }
        let mut idle = self
            .inner
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_SPARES {
            session.unpin();
            idle.push(session);
        }
    }

    /// Asks the server, over a connection of its own, to cancel the
    /// statement that `token`'s session runs, within `timeout`. A session
    /// that runs none is left as it is, or, should the request come
    /// between two statements, its next statement may be cancelled.
    ///
    /// # Errors
    /// A backend error when the request could not be sent in time.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the request sent or not.
    pub(crate) async fn cancel(&self, token: &CancelToken, timeout: Duration) -> Result<()> {
        let what = "cancelling a wait";
        within(
            what,
            timeout,
            token.cancel_query(self.inner.endpoint.tls.clone()),
        )
        .await?
        .map_err(|error| from_driver(what, error))
    }

    /// Opens one spare in the background, unless one is being opened.
    fn refill(&self) {
        if self.inner.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        // Weak: a refill must not keep a dropped backend's spares alive.
        let inner = Arc::downgrade(&self.inner);
        let endpoint = self.inner.endpoint.clone();
        tokio::spawn(async move {
            let opened = Session::open(&endpoint, REFILL_TIMEOUT).await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            inner.refilling.store(false, Ordering::Release);
            match opened {
                Ok(session) => Self { inner }.put(session),
                Err(error) => tracing::debug!(%error, "could not open a spare session"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    //! Against the real server: `scripts/test` starts it and sets
    //! `DISTLOCK_TEST_POSTGRES_URL`.

    use tokio_postgres::types::Type;

    use super::*;
    use crate::config::PostgresConfig;

    /// Long enough for any step of a test.
    const PATIENCE: Duration = Duration::from_secs(30);

    /// A session of its own. A missing server fails the test: a run
    /// without it must not pass as if it had one.
    async fn session() -> Session {
        let url = std::env::var("DISTLOCK_TEST_POSTGRES_URL").unwrap_or_else(|_| {
            panic!(
                "DISTLOCK_TEST_POSTGRES_URL is not set: run the tests with scripts/test, \
                 which starts PostgreSQL"
            )
        });
        let config = PostgresConfig::parse(&url).expect("a valid URL");
        let (endpoint, _) = config.endpoints().expect("the URL's endpoints");
        Session::open(&endpoint, PATIENCE).await.expect("a session")
    }

    /// The statements prepared on `session`, as the server lists them to
    /// it. Asked with an unnamed statement, which the list leaves out.
    async fn prepared_on(session: &Session) -> Vec<String> {
        let rows = session
            .client
            .query_typed(
                "SELECT statement FROM pg_prepared_statements ORDER BY statement",
                &[],
            )
            .await
            .expect("the session's prepared statements");
        rows.iter().map(|row| row.get(0)).collect()
    }

    /// Runs `sql` on `session` with `n`, and checks the sum it answers.
    async fn add_one(session: &Session, sql: &str, n: i32) {
        let rows = session
            .query("adding one", sql, &[(&n, Type::INT4)], PATIENCE)
            .await
            .expect("an answer");
        assert_eq!(rows[0].get::<_, i32>(0), n + 1, "{sql} with {n}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_are_prepared_once_per_session() {
        let session = session().await;
        let first = "SELECT $1::int4 + 1";
        let second = "SELECT 1 + $1::int4";
        for n in 0..5 {
            add_one(&session, first, n).await;
            add_one(&session, second, n).await;
        }
        assert_eq!(prepared_on(&session).await, [first, second]);
        // Another session prepares its own.
        let other = self::session().await;
        assert!(prepared_on(&other).await.is_empty());
        add_one(&other, first, 7).await;
        assert_eq!(prepared_on(&other).await, [first]);
        assert_eq!(prepared_on(&session).await, [first, second]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_whose_statements_were_dropped_prepares_them_again() {
        let session = session().await;
        let sql = "SELECT $1::int4 + 1";
        for drop_them in ["DEALLOCATE ALL", "DISCARD ALL"] {
            add_one(&session, sql, 1).await;
            assert_eq!(prepared_on(&session).await, [sql]);
            session
                .client
                .batch_execute(drop_them)
                .await
                .expect("dropping the statements");
            assert!(prepared_on(&session).await.is_empty(), "{drop_them}");
            add_one(&session, sql, 2).await;
            assert_eq!(prepared_on(&session).await, [sql], "after {drop_them}");
            add_one(&session, sql, 3).await;
            assert_eq!(prepared_on(&session).await, [sql], "after {drop_them}");
        }
    }
}

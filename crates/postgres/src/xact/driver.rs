//! The caller's transaction, whichever driver it is on: the three things
//! a transaction lock asks of it (open the savepoint, run the lock
//! statement, close the savepoint), and the driver's errors told apart by
//! SQLSTATE. `tokio-postgres` here, `sqlx` in [`super::driver_sqlx`].

use async_trait::async_trait;
use distlock_core::Error;
use tokio_postgres::SimpleQueryMessage;
use tokio_postgres::types::Type;

pub(crate) use self::private::Failure;

/// A connection inside a transaction that the caller owns, on which
/// [`XactLocks`](super::XactLocks) takes a lock that lasts until that
/// transaction ends.
///
/// Implemented for `&tokio_postgres::Transaction<'_>` and
/// `&deadpool_postgres::Transaction<'_>`, and, with the crate's `sqlx`
/// feature, for `&mut sqlx::Transaction<'_, sqlx::Postgres>` and
/// `&mut sqlx::PgConnection` (which must then be inside a transaction
/// block: the call fails otherwise). Sealed: the crate implements it for
/// the drivers it knows.
pub trait InTransaction: private::Driver {}

pub(crate) mod private {
    use async_trait::async_trait;
    use distlock_core::Error;
    use tokio_postgres::error::SqlState;

    use crate::error::from_driver;

    /// What the driver failed with, and its SQLSTATE, if the server sent one.
    pub struct Failure {
        pub(crate) code: Option<String>,
        /// As distlock's error, the driver's kept as its source.
        pub(crate) error: Error,
    }

    impl Failure {
        pub(crate) fn is(&self, code: &SqlState) -> bool {
            self.code.as_deref() == Some(code.code())
        }

        pub(crate) fn from_tokio(what: &str, error: tokio_postgres::Error) -> Self {
            Self {
                code: error.code().map(|code| code.code().to_owned()),
                error: from_driver(what, error),
            }
        }
    }

    /// The calls [`super::InTransaction`] stands for.
    #[async_trait]
    pub trait Driver: Send {
        /// Runs [`OPEN`](crate::xact::statements::OPEN): opens the
        /// savepoint, and answers the session's server process id.
        async fn open(&mut self, sql: &'static str) -> Result<i32, Failure>;

        /// Runs a lock statement on the key `(class, objid)`, with its
        /// `lock_timeout` when it waits: whether the lock was granted.
        async fn take(
            &mut self,
            sql: &str,
            class: i32,
            objid: i32,
            lock_timeout: Option<&str>,
        ) -> Result<bool, Failure>;

        /// Runs statements without parameters or answers.
        async fn batch(&mut self, sql: &'static str) -> Result<(), Failure>;
    }
}

/// The process id [`OPEN`](crate::xact::statements::OPEN) answered in
/// text, as the simple protocol sends it.
pub(crate) fn pid(text: Option<&str>) -> Result<i32, Failure> {
    text.and_then(|pid| pid.parse().ok())
        .ok_or_else(|| Failure {
            code: None,
            error: Error::Backend {
                backend: "postgres",
                message: "opening a savepoint: the server answered no process id".into(),
                source: None,
            },
        })
}

const OPENING: &str = "opening a savepoint for a transaction lock";
const TAKING: &str = "taking a transaction lock";
const CLOSING: &str = "closing a transaction lock's savepoint";

#[async_trait]
impl private::Driver for &tokio_postgres::Transaction<'_> {
    async fn open(&mut self, sql: &'static str) -> Result<i32, Failure> {
        let messages = self
            .simple_query(sql)
            .await
            .map_err(|error| Failure::from_tokio(OPENING, error))?;
        let row = messages.iter().find_map(|message| match message {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        });
        pid(row.and_then(|row| row.get(0)))
    }

    async fn take(
        &mut self,
        sql: &str,
        class: i32,
        objid: i32,
        lock_timeout: Option<&str>,
    ) -> Result<bool, Failure> {
        let answered = match lock_timeout {
            Some(timeout) => {
                self.query_typed(
                    sql,
                    &[
                        (&class, Type::INT4),
                        (&objid, Type::INT4),
                        (&timeout, Type::TEXT),
                    ],
                )
                .await
            }
            None => {
                self.query_typed(sql, &[(&class, Type::INT4), (&objid, Type::INT4)])
                    .await
            }
        };
        let rows = answered.map_err(|error| Failure::from_tokio(TAKING, error))?;
        match rows.first() {
            Some(row) => row
                .try_get(0)
                .map_err(|error| Failure::from_tokio(TAKING, error)),
            None => Ok(false),
        }
    }

    async fn batch(&mut self, sql: &'static str) -> Result<(), Failure> {
        self.batch_execute(sql)
            .await
            .map_err(|error| Failure::from_tokio(CLOSING, error))
    }
}

impl InTransaction for &tokio_postgres::Transaction<'_> {}

#[async_trait]
impl private::Driver for &deadpool_postgres::Transaction<'_> {
    async fn open(&mut self, sql: &'static str) -> Result<i32, Failure> {
        let mut inner: &tokio_postgres::Transaction<'_> = self;
        inner.open(sql).await
    }

    async fn take(
        &mut self,
        sql: &str,
        class: i32,
        objid: i32,
        lock_timeout: Option<&str>,
    ) -> Result<bool, Failure> {
        let mut inner: &tokio_postgres::Transaction<'_> = self;
        inner.take(sql, class, objid, lock_timeout).await
    }

    async fn batch(&mut self, sql: &'static str) -> Result<(), Failure> {
        let mut inner: &tokio_postgres::Transaction<'_> = self;
        inner.batch(sql).await
    }
}

impl InTransaction for &deadpool_postgres::Transaction<'_> {}

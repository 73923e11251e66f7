//! The caller's transaction on `sqlx` (the crate's `sqlx` feature): the
//! same statements as on `tokio-postgres`, each sent unnamed
//! (`persistent(false)`), so that none stays prepared on a server
//! connection that PgBouncer in transaction mode hands to other clients.

use async_trait::async_trait;
use distlock_core::Error;
use sqlx::{Executor, PgConnection, Postgres, Row};

use super::driver::{Failure, InTransaction, pid, private::Driver};

const OPENING: &str = "opening a savepoint for a transaction lock";
const TAKING: &str = "taking a transaction lock";
const CLOSING: &str = "closing a transaction lock's savepoint";

impl Failure {
    fn from_sqlx(what: &str, error: sqlx::Error) -> Self {
        let code = error
            .as_database_error()
            .and_then(|db| db.code())
            .map(|code| code.into_owned());
        let message = match error.as_database_error() {
            Some(db) => format!("{what}: {}", db.message()),
            None => format!("{what}: {error}"),
        };
        Self {
            code,
            error: Error::backend("postgres", message, error),
        }
    }
}

#[async_trait]
impl Driver for &mut PgConnection {
    async fn open(&mut self, sql: &'static str) -> Result<i32, Failure> {
        // A query without arguments goes by the simple protocol, which
        // takes the two statements of `OPEN` at once.
        let rows = Executor::fetch_all(&mut **self, sql)
            .await
            .map_err(|error| Failure::from_sqlx(OPENING, error))?;
        match rows.first() {
            // In text, as the simple protocol answers; sqlx reads it so.
            Some(row) => row
                .try_get::<i32, _>(0)
                .map_err(|error| Failure::from_sqlx(OPENING, error)),
            None => pid(None),
        }
    }

    async fn take(
        &mut self,
        sql: &str,
        class: i32,
        objid: i32,
        lock_timeout: Option<&str>,
    ) -> Result<bool, Failure> {
        let mut query = sqlx::query(sql).persistent(false).bind(class).bind(objid);
        if let Some(timeout) = lock_timeout {
            query = query.bind(timeout);
        }
        let row = query
            .fetch_optional(&mut **self)
            .await
            .map_err(|error| Failure::from_sqlx(TAKING, error))?;
        match row {
            Some(row) => row
                .try_get::<bool, _>(0)
                .map_err(|error| Failure::from_sqlx(TAKING, error)),
            None => Ok(false),
        }
    }

    async fn batch(&mut self, sql: &'static str) -> Result<(), Failure> {
        Executor::execute(&mut **self, sql)
            .await
            .map(drop)
            .map_err(|error| Failure::from_sqlx(CLOSING, error))
    }
}

impl InTransaction for &mut PgConnection {}

#[async_trait]
impl Driver for &mut sqlx::Transaction<'_, Postgres> {
    async fn open(&mut self, sql: &'static str) -> Result<i32, Failure> {
        let mut connection: &mut PgConnection = self;
        connection.open(sql).await
    }

    async fn take(
        &mut self,
        sql: &str,
        class: i32,
        objid: i32,
        lock_timeout: Option<&str>,
    ) -> Result<bool, Failure> {
        let mut connection: &mut PgConnection = self;
        connection.take(sql, class, objid, lock_timeout).await
    }

    async fn batch(&mut self, sql: &'static str) -> Result<(), Failure> {
        let mut connection: &mut PgConnection = self;
        connection.batch(sql).await
    }
}

impl InTransaction for &mut sqlx::Transaction<'_, Postgres> {}

//! Named prepared statements, kept for a session's life.
//!
//! Advisory mode refuses transaction poolers (see [`super::pooler`]), so
//! each of its sessions is one server connection from open to close, and
//! a statement prepared on it stays there: each of its statements is
//! parsed and planned once per session, then only bound and executed.
//! Lease mode runs behind PgBouncer and keeps unnamed statements.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row, Statement};

use crate::pool::Params;

/// One session's prepared statements, by their SQL.
#[derive(Default)]
pub(super) struct Prepared {
    statements: Mutex<HashMap<String, Arc<Statement>>>,
}

impl Prepared {
    /// Runs `sql` with `params` on `client` as a named prepared statement,
    /// preparing it on its first use. A statement the session no longer
    /// has (someone ran `DEALLOCATE` or `DISCARD ALL` on it) is prepared
    /// again, once: the server refused it before running it.
    ///
    /// # Errors
    /// The driver's.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the statement running, its answer
    /// then coming before the answer to the session's next statement; or
    /// leave a statement prepared that this cache does not know, unused
    /// until the session closes.
    pub(super) async fn query(
        &self,
        client: &Client,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(value, _)| *value).collect();
        let statement = self.statement(client, sql, &types).await?;
        match client.query(statement.as_ref(), &values).await {
            Err(error) if error.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) => {
                self.forget(sql, &statement);
                let statement = self.statement(client, sql, &types).await?;
                client.query(statement.as_ref(), &values).await
            }
            answered => answered,
        }
    }

    /// `sql`'s statement for parameters of `types`, prepared now unless
    /// it was before.
    async fn statement(
        &self,
        client: &Client,
        sql: &str,
        types: &[Type],
    ) -> Result<Arc<Statement>, tokio_postgres::Error> {
        if let Some(known) = self.lock().get(sql)
            && known.params() == types
        {
            return Ok(known.clone());
        }
        let statement = Arc::new(client.prepare_typed(sql, types).await?);
        self.lock().insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Drops `sql`'s statement, unless another query already replaced it.
    fn forget(&self, sql: &str, lost: &Arc<Statement>) {
        let mut statements = self.lock();
        if statements
            .get(sql)
            .is_some_and(|known| Arc::ptr_eq(known, lost))
        {
            statements.remove(sql);
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Statement>>> {
        self.statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

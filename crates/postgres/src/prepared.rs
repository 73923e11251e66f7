//! Named prepared statements, kept for a connection's life.
//!
//! Where no transaction pooler stands between us and the server (advisory
//! mode refuses one, lease mode looks for one as it opens: see
//! [`crate::pooler`]), each connection is one server session from open to
//! close, and a statement prepared on it stays there: each statement is
//! parsed and planned once per connection, then only bound and executed.
//! Behind a pooler, lease mode sends every statement unnamed instead.
//!
//! The statements are kept in the connection's own cache
//! ([`ClientWrapper`]'s, which pooled connections have and advisory
//! mode's sessions wrap themselves in).

use deadpool_postgres::ClientWrapper;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error, Row, Statement};

/// One statement's parameters, each with its type.
pub(crate) type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// `params` as the driver takes them: the types to prepare with, and the
/// values to bind.
pub(crate) fn split<'a>(params: &Params<'a>) -> (Vec<Type>, Vec<&'a (dyn ToSql + Sync)>) {
    params
        .iter()
        .map(|(value, ty)| (ty.clone(), *value))
        .unzip()
}

/// `sql`'s statement on `client` for parameters of `types`, prepared now
/// unless it was before.
///
/// # Errors
/// The driver's.
///
/// # Cancel safety
/// Dropping the future may leave a statement prepared that the cache does
/// not know, unused until the connection closes.
pub(crate) async fn statement(
    client: &ClientWrapper,
    sql: &str,
    types: &[Type],
) -> Result<Statement, Error> {
    client.prepare_typed_cached(sql, types).await
}

/// Whether `error` is the server missing a statement prepared on the
/// connection (someone ran `DEALLOCATE` or `DISCARD ALL` on it, or a
/// pooler ran it on another server connection), or finding one of that
/// name there already (prepared by another client of a pooler's).
pub(crate) fn went_astray(error: &Error) -> bool {
    error.code().is_some_and(|code| {
        *code == SqlState::INVALID_SQL_STATEMENT_NAME || *code == SqlState::DUPLICATE_PSTATEMENT
    })
}

/// Runs `sql` with `params` on `client` as a named prepared statement,
/// preparing it on its first use. A statement the connection no longer
/// has is prepared again, once: the server refused it before running it.
///
/// # Errors
/// The driver's.
///
/// # Cancel safety
/// Dropping the future may leave the statement running, its answer then
/// coming before the answer to the connection's next statement; or leave
/// a statement prepared that the cache does not know.
pub(crate) async fn query(
    client: &ClientWrapper,
    sql: &str,
    params: &Params<'_>,
) -> Result<Vec<Row>, Error> {
    let (types, values) = split(params);
    let prepared = statement(client, sql, &types).await?;
    match client.query(&prepared, &values).await {
        Err(error) if error.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) => {
            client.statement_cache.remove(sql, &types);
            let prepared = statement(client, sql, &types).await?;
            client.query(&prepared, &values).await
        }
        answered => answered,
    }
}

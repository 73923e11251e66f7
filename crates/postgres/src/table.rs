//! The lock table: its name, quoted for SQL, and its creation on first
//! use, safe when many processes start at once.

use std::fmt;
use std::time::Duration;

use distlock_core::{Error, Result};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use crate::error::from_driver;

/// The version of the table's layout this release reads and writes,
/// recorded in the table's comment so that a later release can migrate.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// What the comment of a table made by distlock starts with; the version
/// follows.
const COMMENT_PREFIX: &str = "distlock lock table, schema version ";

/// PostgreSQL cuts identifiers longer than this (NAMEDATALEN - 1), which
/// could make two configured names one table.
const MAX_IDENTIFIER_BYTES: usize = 63;

/// A schema-qualified table name, kept as given and as SQL quotes it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct TableName {
    schema: String,
    table: String,
    /// `"schema"."table"`, with inner quotes doubled.
    quoted: String,
}

impl fmt::Debug for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.quoted)
    }
}

impl TableName {
    /// Validates `schema` and `table`: each non-empty, without NUL, and at
    /// most 63 bytes. Everything else is allowed, quoted.
    pub(crate) fn new(schema: &str, table: &str) -> Result<Self> {
        check_identifier("schema", schema)?;
        check_identifier("table", table)?;
        Ok(Self {
            quoted: format!("{}.{}", quote(schema), quote(table)),
            schema: schema.to_owned(),
            table: table.to_owned(),
        })
    }

    pub(crate) fn schema(&self) -> &str {
        &self.schema
    }

    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// The name as SQL text, safe to put into a statement.
    pub(crate) fn quoted(&self) -> &str {
        &self.quoted
    }

    /// The schema alone, as SQL text.
    fn quoted_schema(&self) -> String {
        quote(&self.schema)
    }
}

fn check_identifier(field: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::config(field, "must not be empty"));
    }
    if name.len() > MAX_IDENTIFIER_BYTES {
        return Err(Error::config(
            field,
            format!(
                "PostgreSQL names are at most {MAX_IDENTIFIER_BYTES} bytes, this one has {}",
                name.len()
            ),
        ));
    }
    if name.contains('\0') {
        return Err(Error::config(field, "must not contain NUL"));
    }
    Ok(())
}

/// `name` as a quoted SQL identifier.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The table's layout. `holders` lists the live and expired grants of the
/// name, `waiting` the writers' marks; `kind` and `permit_limit` mean
/// something only while a holder lives.
/// The schema is created too unless it exists: creating one needs a
/// privilege that using one does not.
fn create_statements(table: &TableName, schema_exists: bool) -> String {
    let name = table.quoted();
    let comment = format!("{COMMENT_PREFIX}{SCHEMA_VERSION}");
    let schema = if schema_exists {
        String::new()
    } else {
        format!("CREATE SCHEMA IF NOT EXISTS {};", table.quoted_schema())
    };
    format!(
        "{schema}
         CREATE TABLE IF NOT EXISTS {name} (
             name bytea PRIMARY KEY,
             kind text NOT NULL CHECK (kind IN ('exclusive', 'shared', 'semaphore')),
             permit_limit integer,
             fencing_token bigint NOT NULL,
             holders jsonb NOT NULL DEFAULT '[]',
             waiting jsonb NOT NULL DEFAULT '[]'
         );
         COMMENT ON TABLE {name} IS '{comment}';"
    )
}

/// What is there now under the table's name.
enum Found {
    /// A table of this release's version.
    Current,
    /// Nothing: it is to be made.
    Missing { schema_exists: bool },
}

/// Makes sure the lock table exists at this release's version, creating
/// it (and its schema) if missing. Concurrent callers are serialized by a
/// transaction-scoped advisory lock, which PgBouncer's transaction mode
/// allows, so that many processes starting at once all succeed.
///
/// # Errors
/// [`Error::Denied`] when the role may not create what is missing;
/// [`Error::InvalidConfig`] when a table of that name exists but was not
/// made by distlock, or by a newer release; a backend error otherwise.
pub(crate) async fn ensure(client: &Client, table: &TableName, timeout: Duration) -> Result<()> {
    tokio::time::timeout(timeout, ensure_now(client, table))
        .await
        .map_err(|_| Error::Backend {
            backend: "postgres",
            message: format!("preparing the lock table {table:?} took longer than {timeout:?}"),
            source: None,
        })?
}

async fn ensure_now(client: &Client, table: &TableName) -> Result<()> {
    if let Found::Current = inspect(client, table).await? {
        return Ok(());
    }
    let what = format!("creating the lock table {table:?}");
    // A dedicated connection: an error mid-transaction drops it, so no
    // pooled connection is ever left inside a transaction.
    client
        .batch_execute("BEGIN")
        .await
        .map_err(|error| from_driver(&what, error))?;
    let key = format!("distlock schema {}", table.quoted_schema());
    client
        .query_typed(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[(&key, Type::TEXT)],
        )
        .await
        .map_err(|error| from_driver(&what, error))?;
    // Another process may have made it while we waited for the lock.
    if let Found::Missing { schema_exists } = inspect(client, table).await? {
        let statements = create_statements(table, schema_exists);
        if let Err(error) = client.batch_execute(&statements).await {
            // Only a server that ignores the advisory lock's promise
            // (another tool creating the same table) gets here.
            if !is_duplicate(&error) {
                return Err(from_driver(&what, error));
            }
        }
    }
    client
        .batch_execute("COMMIT")
        .await
        .map_err(|error| from_driver(&what, error))?;
    tracing::info!(table = ?table, "the lock table is ready");
    Ok(())
}

fn is_duplicate(error: &tokio_postgres::Error) -> bool {
    matches!(
        error.code(),
        Some(code) if *code == SqlState::UNIQUE_VIOLATION
            || *code == SqlState::DUPLICATE_TABLE
            || *code == SqlState::DUPLICATE_SCHEMA
    )
}

async fn inspect(client: &Client, table: &TableName) -> Result<Found> {
    let what = format!("looking for the lock table {table:?}");
    let rows = client
        .query_typed(
            "SELECT to_regnamespace($1) IS NOT NULL,
                    to_regclass($2) IS NOT NULL,
                    obj_description(to_regclass($2), 'pg_class')",
            &[
                (&table.quoted_schema(), Type::TEXT),
                (&table.quoted(), Type::TEXT),
            ],
        )
        .await
        .map_err(|error| from_driver(&what, error))?;
    let row = rows.first().ok_or_else(|| Error::Backend {
        backend: "postgres",
        message: format!("{what}: the server answered no row"),
        source: None,
    })?;
    let read = |error| from_driver(&what, error);
    let schema_exists: bool = row.try_get(0).map_err(read)?;
    let table_exists: bool = row.try_get(1).map_err(read)?;
    let comment: Option<String> = row.try_get(2).map_err(read)?;
    if !table_exists {
        return Ok(Found::Missing { schema_exists });
    }
    let version = comment
        .as_deref()
        .and_then(|comment| comment.strip_prefix(COMMENT_PREFIX))
        .and_then(|version| version.parse::<u32>().ok());
    match version {
        Some(SCHEMA_VERSION) => Ok(Found::Current),
        Some(newer) if newer > SCHEMA_VERSION => Err(Error::config(
            "table",
            format!(
                "{table:?} was made by a newer distlock (schema version {newer}); \
                 this one knows version {SCHEMA_VERSION}"
            ),
        )),
        _ => Err(Error::config(
            "table",
            format!("{table:?} exists but was not made by distlock; name another with ?table="),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_with_inner_quotes_doubled() {
        let name = TableName::new("my \"schema\"", "locks; DROP TABLE x").unwrap();
        let schema = r#""my ""schema""""#;
        assert_eq!(name.quoted(), format!("{schema}.\"locks; DROP TABLE x\""));
    }

    #[test]
    fn empty_long_and_nul_names_are_refused() {
        assert!(TableName::new("", "t").is_err());
        assert!(TableName::new("s", &"x".repeat(64)).is_err());
        assert!(TableName::new("s", "a\0b").is_err());
        assert!(TableName::new("s", &"x".repeat(63)).is_ok());
    }

    #[test]
    fn an_existing_schema_is_not_created_again() {
        let table = TableName::new("s", "t").unwrap();
        let fresh = create_statements(&table, false);
        assert!(
            fresh.starts_with("CREATE SCHEMA IF NOT EXISTS \"s\";"),
            "{fresh}"
        );
        assert!(fresh.contains("schema version 1"));
        assert!(!create_statements(&table, true).contains("CREATE SCHEMA"));
    }
}

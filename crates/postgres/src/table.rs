//! The mode's table and the table of election terms beside it: their
//! names, quoted for SQL, and their creation on first use, safe when many
//! processes start at once.

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

/// What the comment of a lease-mode table made by distlock starts with;
/// the version follows.
const COMMENT_PREFIX: &str = "distlock lock table, schema version ";

/// The same for `mode=advisory`'s fencing-token table.
const ADVISORY_COMMENT_PREFIX: &str = "distlock advisory token table, schema version ";

/// The same for the table of election terms, either mode's.
const TERMS_COMMENT_PREFIX: &str = "distlock election terms table, schema version ";

/// What the table of election terms' name adds to the mode's table's.
const TERMS_SUFFIX: &str = "_terms";

/// Which table: each has its layout, and its own comment, so that no
/// table is ever used as another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// One row per lock, its holders in it.
    Lease,
    /// One row per name: its advisory key and its latest fencing token.
    Advisory,
    /// One row per election: its last terms (see [`crate::terms`]).
    Terms,
}

impl Layout {
    const ALL: [Self; 3] = [Self::Lease, Self::Advisory, Self::Terms];

    fn comment_prefix(self) -> &'static str {
        match self {
            Self::Lease => COMMENT_PREFIX,
            Self::Advisory => ADVISORY_COMMENT_PREFIX,
            Self::Terms => TERMS_COMMENT_PREFIX,
        }
    }

    /// What the table is, for people.
    fn purpose(self) -> &'static str {
        match self {
            Self::Lease => "table for mode=lease",
            Self::Advisory => "table for mode=advisory",
            Self::Terms => "table of election terms",
        }
    }
}

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

    /// The table of election terms kept beside this one, in its schema:
    /// this name with `_terms` added. A name too long for that is cut, and
    /// a hash of the whole name goes before the suffix, so that two long
    /// names that begin alike still get tables of their own.
    pub(crate) fn terms(&self) -> Self {
        let table = if self.table.len() + TERMS_SUFFIX.len() <= MAX_IDENTIFIER_BYTES {
            format!("{}{TERMS_SUFFIX}", self.table)
        } else {
            let hash = format!("_{:08x}", fnv1a(self.table.as_bytes()) >> 32);
            let mut end = MAX_IDENTIFIER_BYTES - TERMS_SUFFIX.len() - hash.len();
            while !self.table.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{hash}{TERMS_SUFFIX}", &self.table[..end])
        };
        Self {
            quoted: format!("{}.{}", quote(&self.schema), quote(&table)),
            schema: self.schema.clone(),
            table,
        }
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

/// The 64-bit FNV-1a hash of `bytes`: stable across releases and
/// platforms, as a table's name must be.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `name` as a quoted SQL identifier.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The table's layout. In lease mode `holders` lists the live and expired
/// grants of the name, `waiting` the writers' marks; `kind` and
/// `permit_limit` mean something only while a holder lives. In advisory
/// mode, a row gives a name its advisory key (`objid`, unique, so two
/// names never share one) and keeps its latest token and, by server
/// process id, who took which grant (for `list`). The table of terms has
/// a row per election, its `terms` a JSON array (see [`crate::terms`]).
/// The schema is created too unless it exists: creating one needs a
/// privilege that using one does not.
fn create_statements(table: &TableName, layout: Layout, schema_exists: bool) -> String {
    let name = table.quoted();
    let comment = format!("{}{SCHEMA_VERSION}", layout.comment_prefix());
    let schema = if schema_exists {
        String::new()
    } else {
        format!("CREATE SCHEMA IF NOT EXISTS {};", table.quoted_schema())
    };
    let columns = match layout {
        Layout::Lease => {
            "name bytea PRIMARY KEY,
             kind text NOT NULL CHECK (kind IN ('exclusive', 'shared', 'semaphore')),
             permit_limit integer,
             fencing_token bigint NOT NULL,
             holders jsonb NOT NULL DEFAULT '[]',
             waiting jsonb NOT NULL DEFAULT '[]'"
        }
        Layout::Advisory => {
            "name bytea PRIMARY KEY,
             objid integer NOT NULL UNIQUE CHECK (objid >= 0 AND objid % 2 = 0),
             fencing_token bigint NOT NULL,
             holders jsonb NOT NULL DEFAULT '{}'"
        }
        Layout::Terms => {
            "name bytea PRIMARY KEY,
             terms jsonb NOT NULL"
        }
    };
    format!(
        "{schema}
         CREATE TABLE IF NOT EXISTS {name} ({columns});
         COMMENT ON TABLE {name} IS '{comment}';"
    )
}

/// What is there now under the table's name.
enum Found {
    /// A table of this release's version.
    Current,
    /// Nothing: it is to be made.
    Missing { schema_exists: bool },
    /// A table without distlock's comment. Seen outside the creation
    /// lock, this may be one being committed right now: `to_regclass`
    /// reads the catalog as of now, `obj_description` as of the
    /// statement's start, so the table can show before its comment.
    Unmarked,
}

/// Makes sure `table` exists at this release's version, creating
/// it (and its schema) if missing. Concurrent callers are serialized by a
/// transaction-scoped advisory lock, which PgBouncer's transaction mode
/// allows, so that many processes starting at once all succeed.
///
/// # Errors
/// [`Error::Denied`] when the role may not create what is missing;
/// [`Error::InvalidConfig`] when a table of that name exists but was not
/// made by distlock, or by a newer release; a backend error otherwise.
pub(crate) async fn ensure(
    client: &Client,
    table: &TableName,
    layout: Layout,
    timeout: Duration,
) -> Result<()> {
    tokio::time::timeout(timeout, ensure_now(client, table, layout))
        .await
        .map_err(|_| Error::Backend {
            backend: "postgres",
            message: format!("preparing the table {table:?} took longer than {timeout:?}"),
            source: None,
        })?
}

async fn ensure_now(client: &Client, table: &TableName, layout: Layout) -> Result<()> {
    if let Found::Current = inspect(client, table, layout).await? {
        return Ok(());
    }
    // Missing or unmarked: look again under the lock, after any creator
    // that holds it has committed.
    let what = format!("creating the table {table:?}");
    // A dedicated connection: an error mid-transaction drops it, so no
    // pooled connection is ever left inside a transaction.
    // READ COMMITTED whatever the server's default, so that the second
    // look, after the lock, sees what a creator that held it committed.
    client
        .batch_execute(crate::pool::BEGIN_READ_COMMITTED)
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
    match inspect(client, table, layout).await? {
        Found::Current => {}
        Found::Unmarked => return Err(not_made_by_distlock(table)),
        Found::Missing { schema_exists } => {
            let statements = create_statements(table, layout, schema_exists);
            if let Err(error) = client.batch_execute(&statements).await {
                // Only a server that ignores the advisory lock's promise
                // (another tool creating the same table) gets here.
                if !is_duplicate(&error) {
                    return Err(from_driver(&what, error));
                }
            }
        }
    }
    client
        .batch_execute("COMMIT")
        .await
        .map_err(|error| from_driver(&what, error))?;
    tracing::info!(table = ?table, "the table is ready");
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

async fn inspect(client: &Client, table: &TableName, layout: Layout) -> Result<Found> {
    let what = format!("looking for the table {table:?}");
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
    let other = Layout::ALL.into_iter().find(|other| {
        *other != layout
            && comment
                .as_deref()
                .is_some_and(|comment| comment.starts_with(other.comment_prefix()))
    });
    if let Some(other) = other {
        return Err(Error::config(
            "table",
            format!(
                "{table:?} is distlock's {}, not its {}; name another with ?table=",
                other.purpose(),
                layout.purpose()
            ),
        ));
    }
    let version = comment
        .as_deref()
        .and_then(|comment| comment.strip_prefix(layout.comment_prefix()))
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
        _ => Ok(Found::Unmarked),
    }
}

fn not_made_by_distlock(table: &TableName) -> Error {
    Error::config(
        "table",
        format!("{table:?} exists but was not made by distlock; name another with ?table="),
    )
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
        let fresh = create_statements(&table, Layout::Lease, false);
        assert!(
            fresh.starts_with("CREATE SCHEMA IF NOT EXISTS \"s\";"),
            "{fresh}"
        );
        assert!(fresh.contains("schema version 1"));
        assert!(!create_statements(&table, Layout::Lease, true).contains("CREATE SCHEMA"));
        let advisory = create_statements(&table, Layout::Advisory, true);
        assert!(
            advisory.contains("objid integer NOT NULL UNIQUE"),
            "{advisory}"
        );
        assert!(advisory.contains(ADVISORY_COMMENT_PREFIX), "{advisory}");
        let terms = create_statements(&table.terms(), Layout::Terms, true);
        assert!(terms.contains(r#""s"."t_terms""#), "{terms}");
        assert!(terms.contains(TERMS_COMMENT_PREFIX), "{terms}");
    }

    #[test]
    fn the_table_of_terms_has_a_name_of_its_own_even_beside_a_long_name() {
        let short = TableName::new("s", "locks").unwrap().terms();
        assert_eq!(short.quoted(), r#""s"."locks_terms""#);
        let long = |last: &str| {
            let name = format!("{}{last}", "é".repeat(30));
            TableName::new("s", &name).unwrap().terms()
        };
        let (one, other) = (long("a"), long("b"));
        assert_ne!(one, other);
        for terms in [&one, &other] {
            assert!(terms.table().len() <= MAX_IDENTIFIER_BYTES, "{terms:?}");
            assert!(terms.table().ends_with(TERMS_SUFFIX), "{terms:?}");
            assert!(TableName::new(terms.schema(), terms.table()).is_ok());
        }
    }
}

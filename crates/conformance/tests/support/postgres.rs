//! PostgreSQL's fixtures: a fresh table for each test, and the fixture of
//! a fair mode, whose line of waiters each mode reads its own way.

use std::sync::Arc;

use distlock_conformance::Fixture;
use distlock_core::LockName;
use distlock_core::backend::Backend;
use distlock_postgres::PostgresBackend;

use super::server_url;

/// A fresh table of the test's own on the server whose URL is in an
/// environment variable.
pub struct FreshTable {
    /// The server's URL as given, for a plain connection.
    pub server: String,
    pub table: String,
    /// The server's URL with the table and the options asked for.
    pub url: String,
}

impl FreshTable {
    /// A fresh table on the server in `var`, with `options`
    /// (`&`-separated) added to its URL.
    pub fn from_env(var: &str, options: &str) -> Self {
        let server = server_url(var, "PostgreSQL");
        let separator = if server.contains('?') { '&' } else { '?' };
        let table = format!("conformance_{:016x}", rand::random::<u64>());
        let url = format!("{server}{separator}table={table}{options}");
        Self { server, table, url }
    }

    /// Whether the URL asks for advisory mode, where a grant is the
    /// answer's pinned session (see
    /// [`Fixture::finds_grants_by_identity`]).
    pub fn is_advisory(&self) -> bool {
        self.url.contains("mode=advisory")
    }
}

/// The backend at `url`, which asks for fair mode, checked to be fair.
pub async fn open_fair(url: &str) -> PostgresBackend {
    let backend = PostgresBackend::open(url)
        .await
        .unwrap_or_else(|e| panic!("cannot open the test server: {e}"));
    assert!(backend.capabilities().fair, "the fixture is in fair mode");
    backend
}

/// How a fair fixture reads the line of a name's waiters from the server.
#[async_trait::async_trait]
pub trait LineReader: Send + Sync {
    /// How many wait for `name` in the line kept on `table`.
    async fn queued(&self, table: &FreshTable, name: &LockName) -> usize;
}

/// A fixture in fair mode on a fresh table, whose line `L` reads.
pub struct FairFixture<L> {
    table: FreshTable,
    line: L,
}

impl<L> FairFixture<L> {
    /// A fresh table on the server in `var`, in fair mode, with `options`
    /// (`&`-separated) added to its URL.
    pub fn from_env(var: &str, options: &str, line: L) -> Self {
        Self {
            table: FreshTable::from_env(var, &format!("&fair=true{options}")),
            line,
        }
    }
}

#[async_trait::async_trait]
impl<L: LineReader> Fixture for FairFixture<L> {
    async fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(open_fair(&self.table.url).await)
    }

    fn url(&self) -> Option<String> {
        Some(self.table.url.clone())
    }

    async fn queued(&self, name: &LockName) -> Option<usize> {
        Some(self.line.queued(&self.table, name).await)
    }

    fn finds_grants_by_identity(&self) -> bool {
        !self.table.is_advisory()
    }
}

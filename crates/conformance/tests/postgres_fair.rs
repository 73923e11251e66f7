//! The conformance suite on PostgreSQL's lease mode in fair mode
//! (`fair=true`): every promise of the suite holds when whole locks go to
//! waiters in the order they asked, the `distlock` processes of the
//! cross-process cases fair too. `scripts/test` starts the server and
//! sets `DISTLOCK_TEST_POSTGRES_URL`. Each test uses a fresh table.

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::Backend;
use distlock_postgres::PostgresBackend;

struct FairPostgres {
    /// The server's URL with a fresh table of the test's own, fair.
    url: String,
}

impl FairPostgres {
    fn from_env(var: &str) -> Self {
        let server = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: run the tests with scripts/test, which starts PostgreSQL")
        });
        let separator = if server.contains('?') { '&' } else { '?' };
        let table = format!("conformance_fair_{:016x}", rand::random::<u64>());
        Self {
            url: format!("{server}{separator}table={table}&fair=true"),
        }
    }
}

#[async_trait::async_trait]
impl Fixture for FairPostgres {
    async fn backend(&self) -> Arc<dyn Backend> {
        let backend = PostgresBackend::open(&self.url)
            .await
            .unwrap_or_else(|e| panic!("cannot open the test server: {e}"));
        assert!(backend.capabilities().fair, "the fixture is fair");
        Arc::new(backend)
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }
}

conformance_suite!(FairPostgres::from_env("DISTLOCK_TEST_POSTGRES_URL"));

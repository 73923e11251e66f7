//! The conformance suite on PostgreSQL's advisory mode in fair mode, on
//! the server itself: every promise of the suite holds when waiting
//! writers wait in the server's own queue of each lock. The URL carries
//! `fair=true`, so the cross-process cases' `distlock` children are fair
//! too. `scripts/test` starts the server and sets
//! `DISTLOCK_TEST_POSTGRES_URL`. Each test uses a fresh table.

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::Backend;
use distlock_postgres::PostgresBackend;

struct FairAdvisory {
    /// The server's URL in fair advisory mode, with a fresh table of the
    /// test's own.
    url: String,
}

impl FairAdvisory {
    fn from_env(var: &str) -> Self {
        let server = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: run the tests with scripts/test, which starts PostgreSQL")
        });
        let separator = if server.contains('?') { '&' } else { '?' };
        let table = format!("conformance_{:016x}", rand::random::<u64>());
        Self {
            url: format!("{server}{separator}table={table}&mode=advisory&fair=true"),
        }
    }
}

#[async_trait::async_trait]
impl Fixture for FairAdvisory {
    async fn backend(&self) -> Arc<dyn Backend> {
        let backend = PostgresBackend::open(&self.url)
            .await
            .unwrap_or_else(|e| panic!("cannot open the test server: {e}"));
        assert!(backend.capabilities().fair, "the fixture is in fair mode");
        Arc::new(backend)
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }
}

conformance_suite!(FairAdvisory::from_env("DISTLOCK_TEST_POSTGRES_URL"));

//! The conformance suite on PostgreSQL's lease mode in fair mode
//! (`fair=true`): every promise of the suite holds when whole locks go to
//! waiters in the order they asked, the `distlock` processes of the
//! cross-process cases fair too; and so do the fair cases. `scripts/test` starts the server and
//! sets `DISTLOCK_TEST_POSTGRES_URL`. Each test uses a fresh table.

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite, fair_cases};
use distlock_core::LockName;
use distlock_core::backend::Backend;
use distlock_postgres::PostgresBackend;

struct FairPostgres {
    /// The server's URL with a fresh table of the test's own, fair.
    url: String,
    /// A backend of its own that looks at the line.
    looker: tokio::sync::OnceCell<PostgresBackend>,
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
            looker: tokio::sync::OnceCell::new(),
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

    async fn queued(&self, name: &LockName) -> Option<usize> {
        let looker = self
            .looker
            .get_or_init(|| async {
                PostgresBackend::open(&self.url)
                    .await
                    .unwrap_or_else(|e| panic!("cannot open the test server: {e}"))
            })
            .await;
        Some(looker.queued(name).await.expect("count the places in line"))
    }
}

conformance_suite!(FairPostgres::from_env("DISTLOCK_TEST_POSTGRES_URL"));
fair_cases!(FairPostgres::from_env("DISTLOCK_TEST_POSTGRES_URL"));

//! The conformance suite on PostgreSQL's advisory mode in fair mode, on
//! the server itself: every promise of the suite holds when waiting
//! writers wait in the server's own queue of each lock. The URL carries
//! `fair=true`, so the cross-process cases' `distlock` children are fair
//! too. `scripts/test` starts the server and sets
//! `DISTLOCK_TEST_POSTGRES_URL`. Each test uses a fresh table. The fair
//! cases run too, the line read from `pg_locks`.

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite, fair_cases};
use distlock_core::LockName;
use distlock_core::backend::Backend;
use distlock_postgres::tokio_postgres::{self, NoTls};
use distlock_postgres::{DEFAULT_ADVISORY_CLASS, PostgresBackend};

struct FairAdvisory {
    /// The server's URL in fair advisory mode, with a fresh table of the
    /// test's own.
    url: String,
    /// The server's URL as given, for a plain connection.
    server: String,
    table: String,
    /// A plain connection that reads `pg_locks`.
    looker: tokio::sync::OnceCell<tokio_postgres::Client>,
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
            server,
            table,
            looker: tokio::sync::OnceCell::new(),
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

    /// The sessions waiting for the name's key in the server's lock queue.
    async fn queued(&self, name: &LockName) -> Option<usize> {
        let looker = self
            .looker
            .get_or_init(|| async {
                let (client, connection) = tokio_postgres::connect(&self.server, NoTls)
                    .await
                    .expect("connect to the test server");
                tokio::spawn(connection);
                client
            })
            .await;
        let statement = format!(
            "SELECT count(*) FROM pg_locks AS p JOIN public.{} AS t ON p.objid = t.objid::oid
             WHERE p.locktype = 'advisory' AND p.objsubid = 2 AND NOT p.granted
               AND p.classid::bigint = $1 AND t.name = $2",
            self.table
        );
        let class = i64::from(DEFAULT_ADVISORY_CLASS);
        let row = looker
            .query_one(&statement, &[&class, &name.as_str().as_bytes()])
            .await
            .expect("read pg_locks");
        Some(usize::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    /// A grant is the answer's pinned session; see the trait.
    fn finds_grants_by_identity(&self) -> bool {
        false
    }
}

conformance_suite!(FairAdvisory::from_env("DISTLOCK_TEST_POSTGRES_URL"));
fair_cases!(FairAdvisory::from_env("DISTLOCK_TEST_POSTGRES_URL"));

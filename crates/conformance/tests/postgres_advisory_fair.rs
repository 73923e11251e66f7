//! The conformance suite on PostgreSQL's advisory mode in fair mode, on
//! the server itself: every promise of the suite holds when waiting
//! writers wait in the server's own queue of each lock. The URL carries
//! `fair=true`, so the cross-process cases' `distlock` children are fair
//! too. `scripts/test` starts the server and sets
//! `DISTLOCK_TEST_POSTGRES_URL`. Each test uses a fresh table. The fair
//! cases run too, the line read from `pg_locks`.

mod support;

use distlock_conformance::{conformance_suite, fair_cases};
use distlock_core::LockName;
use distlock_postgres::DEFAULT_ADVISORY_CLASS;
use distlock_postgres::tokio_postgres::{self, NoTls};

use support::postgres::{FairFixture, FreshTable, LineReader};

/// The sessions waiting for the name's key in the server's lock queue, as
/// a plain connection reads them from `pg_locks`.
#[derive(Default)]
struct PgLocks(tokio::sync::OnceCell<tokio_postgres::Client>);

#[async_trait::async_trait]
impl LineReader for PgLocks {
    async fn queued(&self, table: &FreshTable, name: &LockName) -> usize {
        let looker = self
            .0
            .get_or_init(|| async {
                let (client, connection) = tokio_postgres::connect(&table.server, NoTls)
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
            table.table
        );
        let class = i64::from(DEFAULT_ADVISORY_CLASS);
        let row = looker
            .query_one(&statement, &[&class, &name.as_str().as_bytes()])
            .await
            .expect("read pg_locks");
        usize::try_from(row.get::<_, i64>(0)).unwrap_or(0)
    }
}

/// Fair advisory mode on a fresh table; the fixture reads from the URL
/// that a grant is the answer's pinned session.
fn fair_advisory() -> FairFixture<PgLocks> {
    FairFixture::from_env(
        "DISTLOCK_TEST_POSTGRES_URL",
        "&mode=advisory",
        PgLocks::default(),
    )
}

conformance_suite!(fair_advisory());
fair_cases!(fair_advisory());

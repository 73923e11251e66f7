//! The conformance suite on PostgreSQL's lease mode in fair mode
//! (`fair=true`): every promise of the suite holds when whole locks go to
//! waiters in the order they asked, the `distlock` processes of the
//! cross-process cases fair too; and so do the fair cases. `scripts/test` starts the server and
//! sets `DISTLOCK_TEST_POSTGRES_URL`. Each test uses a fresh table.

mod support;

use distlock_conformance::{conformance_suite, fair_cases};
use distlock_core::LockName;
use distlock_postgres::PostgresBackend;

use support::postgres::{FairFixture, FreshTable, LineReader, open_fair};

/// The line as a backend of its own counts it.
#[derive(Default)]
struct CountedByBackend(tokio::sync::OnceCell<PostgresBackend>);

#[async_trait::async_trait]
impl LineReader for CountedByBackend {
    async fn queued(&self, table: &FreshTable, name: &LockName) -> usize {
        let looker = self.0.get_or_init(|| open_fair(&table.url)).await;
        looker.queued(name).await.expect("count the places in line")
    }
}

fn fair_postgres() -> FairFixture<CountedByBackend> {
    FairFixture::from_env(
        "DISTLOCK_TEST_POSTGRES_URL",
        "",
        CountedByBackend::default(),
    )
}

conformance_suite!(fair_postgres());
fair_cases!(fair_postgres());

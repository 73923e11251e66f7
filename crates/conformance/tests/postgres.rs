//! The conformance suite on PostgreSQL: in lease mode on the server itself
//! and through PgBouncer in transaction-pooling mode, and in advisory mode
//! on the server itself (session advisory locks cannot pass through
//! PgBouncer in transaction mode).
//! `scripts/test` starts them and sets `DISTLOCK_TEST_POSTGRES_URL` and
//! `DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL`. Each test uses a fresh table.

mod support;

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::backend::Backend;
use distlock_postgres::PostgresBackend;

use support::postgres::FreshTable;

/// The server in lease or advisory mode, on a fresh table of the test's
/// own.
struct Postgres(FreshTable);

impl Postgres {
    fn from_env(var: &str) -> Self {
        Self::with_options(var, "")
    }

    /// As [`from_env`](Self::from_env), with `options` (`&`-separated)
    /// added to the URL.
    fn with_options(var: &str, options: &str) -> Self {
        Self(FreshTable::from_env(var, options))
    }
}

#[async_trait::async_trait]
impl Fixture for Postgres {
    async fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(
            PostgresBackend::open(&self.0.url)
                .await
                .unwrap_or_else(|e| panic!("cannot open the test server: {e}")),
        )
    }

    fn url(&self) -> Option<String> {
        Some(self.0.url.clone())
    }

    /// In advisory mode a grant is the answer's pinned session; see the
    /// trait.
    fn finds_grants_by_identity(&self) -> bool {
        !self.0.is_advisory()
    }
}

mod direct {
    use super::*;
    conformance_suite!(Postgres::from_env("DISTLOCK_TEST_POSTGRES_URL"));
}

mod pgbouncer {
    use super::*;
    conformance_suite!(Postgres::from_env("DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL"));
}

mod advisory {
    use super::*;
    conformance_suite!(Postgres::with_options(
        "DISTLOCK_TEST_POSTGRES_URL",
        "&mode=advisory"
    ));
}

//! PostgreSQL in lease mode (the default): one row per lock, leases judged
//! on the server's clock.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::LockName;

use super::server;
use crate::answers::{ClockStep, SecretCase};
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::servers::ServerCommand;

#[derive(Debug)]
pub(crate) struct Postgres;

pub(crate) const POSTGRES: Postgres = Postgres;

/// The default lock table, where R7 deletes records.
const TABLE: &str = "public.distlock_locks";

#[async_trait::async_trait]
impl CampaignBackend for Postgres {
    fn name(&self) -> &'static str {
        "PostgreSQL"
    }

    fn server(&self) -> Option<ServerCommand> {
        Some(server::command())
    }

    fn url(&self, _scratch: &Path, address: &str, _companions: &[String]) -> String {
        server::url(address)
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok(format!("{}?table={space}", server.url()))
    }

    /// Expiry is judged on the server's clock to the microsecond.
    fn regrant_bound(&self, lease: Duration) -> Duration {
        lease
    }

    async fn open_quiet(
        &self,
        url: &str,
        _lease: Duration,
    ) -> Outcome<Arc<dyn distlock::backend::Backend>> {
        Ok(Arc::new(super::open_listening(url).await?))
    }

    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        super::delete_row(server, TABLE, name).await
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        super::secret_cases(server, canary, "")
    }

    fn parse_url(&self, url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
        super::parse_url(url)
    }

    fn server_clock(&self) -> Result<ClockStep, &'static str> {
        Ok(ClockStep {
            clock_moves: true,
            leases_follow: true,
            why: "lease mode judges leases by the server's `clock_timestamp()`",
        })
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err(
            "memcached only; PostgreSQL judges leases on its own clock (`clock_timestamp()`), \
             never evicts a row, and keeps its rows across restarts (R6)",
        )
    }
}

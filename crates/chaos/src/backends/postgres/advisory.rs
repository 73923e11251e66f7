//! PostgreSQL in advisory mode (`?mode=advisory`): each grant is a session
//! advisory lock on a connection pinned to it, which the holder checks
//! once per extension period and the server ends after a lease without a
//! statement (`idle_session_timeout`). A lock ends with its connection:
//! there is no expiry time, and a restart ends every lock.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockName, LockOptions};
use tokio::task::JoinSet;

use super::server;
use crate::answers::{ClockStep, OnRestart, SecretCase};
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::scratch::unique;
use crate::servers::ServerCommand;

#[derive(Debug)]
pub(crate) struct PostgresAdvisory;

pub(crate) const POSTGRES_ADVISORY: PostgresAdvisory = PostgresAdvisory;

/// The mode's option, after the database in every URL.
const MODE: &str = "?mode=advisory";

/// The default token table, where R7 deletes records.
const TABLE: &str = "public.distlock_advisory";

/// How many idle sessions the backend keeps for its next attempts, which
/// [`PostgresAdvisory::open_quiet`] fills.
const SPARES: usize = 8;

/// The advisory class of the key space called `space`: each token table
/// needs a class of its own, or `list()` would show another table's lock
/// under the name that has the same `objid` in this one.
fn class_of(space: &str) -> u32 {
    // FNV-1a, as a non-negative `int4`.
    let hash = space.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    hash & 0x7fff_ffff
}

#[async_trait::async_trait]
impl CampaignBackend for PostgresAdvisory {
    fn name(&self) -> &'static str {
        "PostgreSQL, advisory mode"
    }

    fn option_name(&self) -> &'static str {
        "postgresql-advisory"
    }

    fn server(&self) -> Option<ServerCommand> {
        Some(server::command())
    }

    fn url(&self, _scratch: &Path, address: &str, _companions: &[String]) -> String {
        format!("{}{MODE}", server::url(address))
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok(format!(
            "{}&table={space}&advisory_class={}",
            server.url(),
            class_of(space)
        ))
    }

    /// A killed holder's connection closes with its process, and the
    /// server ends its session, and the lock, as soon as it reads the end.
    fn ends_with_holder(&self) -> bool {
        true
    }

    fn on_restart(&self) -> OnRestart {
        OnRestart::EndedAndTold
    }

    fn semaphores(&self) -> Result<(), &'static str> {
        Err(
            "PostgreSQL's advisory mode has no semaphores: asking for a permit is \
             `Unsupported` (lease mode has them)",
        )
    }

    /// Each grant holds a server connection of its own, and the campaign's
    /// server takes 300.
    fn max_held(&self) -> Option<usize> {
        Some(100)
    }

    /// A dead holder's lock ends with its connection, at once, and nobody
    /// is told: waiters try again at least once a second (the crate's
    /// docs), every half lease for shorter leases.
    fn regrant_bound(&self, lease: Duration) -> Duration {
        Duration::from_secs(1).min(lease / 2)
    }

    /// With its idle sessions filled, by as many locks held at once and
    /// released, and a moment for the background opening of one more to
    /// end: an attempt that empties the spares opens one in the
    /// background, whose handshake could take the proxy's one shot instead
    /// of the acquisition.
    async fn open_quiet(
        &self,
        url: &str,
        lease: Duration,
    ) -> Outcome<Arc<dyn distlock::backend::Backend>> {
        let backend: Arc<dyn distlock::backend::Backend> =
            Arc::new(super::open_listening(url).await?);
        let warm = LockClient::new(
            backend.clone(),
            LockOptions::builder().lease(lease).build()?,
        );
        let mut taking = JoinSet::new();
        for _ in 0..SPARES {
            let (warm, name) = (warm.clone(), LockName::new(unique("warm-up"))?);
            taking.spawn(async move { warm.try_acquire(&name).await });
        }
        let mut held = Vec::new();
        while let Some(taken) = taking.join_next().await {
            held.extend(taken??);
        }
        for guard in held {
            guard.release().await?;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(backend)
    }

    /// Gives `name` its key, by taking and releasing it once, directly: on
    /// a name without one, the acquisition's first statement only finds
    /// that out.
    async fn prepare_name(&self, server: &Server, name: &LockName) -> Outcome<()> {
        let client = LockClient::new(distlock::open(&server.url()).await?, LockOptions::default());
        if let Some(guard) = client.try_acquire(name).await? {
            guard.release().await?;
        }
        Ok(())
    }

    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        super::delete_row(server, TABLE, name).await
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        super::secret_cases(server, canary, MODE)
    }

    fn parse_url(&self, url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
        super::parse_url(url)
    }

    /// The server's clock moves, but a lock lives with its connection:
    /// the step reaches it only through `idle_session_timeout`.
    fn server_clock(&self) -> Result<ClockStep, &'static str> {
        Ok(ClockStep {
            clock_moves: true,
            leases_follow: false,
            why: "advisory locks live with their connections and have no expiry time; a step \
                  reaches them only through `idle_session_timeout`, an interval timer that the \
                  server checks against its wall clock when it fires",
        })
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err(
            "memcached only; advisory mode's locks have no expiry time: each ends with its \
             holder's connection, which the server ends after a lease without a statement \
             (R2, R3, R9), and a restart ends them all (R1, R6)",
        )
    }
}

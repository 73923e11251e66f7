//! PostgreSQL's transactions per uncontended cycle, counted in passes of
//! their own after the rounds: the server publishes a connection's counts
//! when it closes (see [`crate::pg_stats`]), and the rounds' connections
//! stay open across them.
//!
//! Each contender gets a pass: everything the rounds take the lock through
//! is opened afresh, the contender runs for [`PASS`], and all of it is
//! closed; the server's counts are read around the pass. A pass with no
//! cycle first counts what opening and closing costs (the connections'
//! start-ups, the backend's setup, the statements prepared), and that is
//! taken off each contender's count. What is left is the contender's
//! cycles, and the few start-ups of connections opened only once a lock
//! is taken (advisory mode's grant connections), spread over its cycles.

use std::sync::Arc;
use std::time::Duration;

use distlock::backend::Backend;
use distlock::{LockClient, LockName, LockOptions};
use sqlx::postgres::PgConnection;

use crate::commands::Counts;
use crate::contenders::{Contender, Side};
use crate::cycles::{backend_cycles, client_cycles};
use crate::outcome::Outcome;
use crate::pg_peer;
use crate::pg_stats::PUBLISHED_AFTER_CLOSE;
use crate::pg_steps::PgSteps;
use crate::target::Target;

/// How long each contender's counting pass takes the lock.
pub(crate) const PASS: Duration = Duration::from_millis(500);

/// Counts the transactions of each of `sides`' contenders on `target`,
/// less the transactions of opening and closing what they run on, and the
/// cycles of its pass. The client on a server beside the target's is not
/// counted. Only for a server that publishes its counts late.
///
/// # Errors
/// The server refuses a connection or a statement, or the uncontended lock
/// is held.
pub(crate) async fn count_transactions(
    target: &Target,
    name: &LockName,
    with_peer: bool,
    sides: &mut [Side],
) -> Outcome<()> {
    let Some((opening, _)) = counted(target, name, with_peer, None).await? else {
        return Ok(());
    };
    for side in sides {
        if let Some((counts, cycles)) =
            counted(target, name, with_peer, Some(side.contender)).await?
        {
            side.commands = Some(counts.since(&opening));
            side.counted_cycles = cycles;
        }
    }
    Ok(())
}

/// One pass of `contender` (none: no cycle), on what the rounds use,
/// opened for it and closed after it: the transactions the server counted
/// and the cycles made. `None` when the server keeps no counts, or the
/// contender is not counted here.
async fn counted(
    target: &Target,
    name: &LockName,
    with_peer: bool,
    contender: Option<Contender>,
) -> Outcome<Option<(Counts, u64)>> {
    if matches!(contender, Some(Contender::ClientBeside(_))) {
        return Ok(None);
    }
    let Some(before) = target.counts().await? else {
        return Ok(None);
    };
    let mut fresh = Fresh::open(target, name, with_peer).await?;
    let cycles = match contender {
        Some(contender) => fresh.cycles(contender, name).await?,
        None => Some(0),
    };
    fresh.close().await?;
    let Some(after) = target.counts().await? else {
        return Ok(None);
    };
    Ok(cycles.map(|cycles| (target.counted_between(&before, &after), cycles)))
}

/// What a pass takes the lock through, opened for it alone.
struct Fresh {
    backend: Arc<dyn Backend>,
    client: LockClient,
    sqlx: Option<PgConnection>,
    steps: Option<PgSteps>,
}

impl Fresh {
    async fn open(target: &Target, name: &LockName, with_peer: bool) -> Outcome<Self> {
        let backend = distlock::open(&target.url)
            .await
            .map_err(|e| format!("{}: {e}", target.shown))?;
        let sqlx = match with_peer {
            true => Some(pg_peer::connect(&target.url).await?),
            false => None,
        };
        let steps = match with_peer {
            true => PgSteps::open(target, name).await?,
            false => None,
        };
        Ok(Self {
            client: LockClient::new(backend.clone(), LockOptions::default()),
            backend,
            sqlx,
            steps,
        })
    }

    /// `contender`'s cycles for a pass; `None` for a contender that does
    /// not run here.
    async fn cycles(&mut self, contender: Contender, name: &LockName) -> Outcome<Option<u64>> {
        Ok(Some(match contender {
            Contender::BackendCalls => backend_cycles(&*self.backend, name, PASS).await?,
            Contender::Client => client_cycles(&self.client, name, PASS).await?,
            Contender::PgAdvisoryLock => match &mut self.sqlx {
                Some(connection) => pg_peer::cycles(connection, name, PASS).await?,
                None => return Ok(None),
            },
            Contender::PgStep(step) => match &mut self.steps {
                Some(steps) => steps.cycles(step, PASS).await?,
                None => return Ok(None),
            },
            _ => return Ok(None),
        }))
    }

    /// Closes every connection (the steps' row deleted first), and waits for the server to publish their
    /// counts.
    async fn close(self) -> Outcome<()> {
        drop((self.client, self.backend));
        if let Some(steps) = self.steps {
            steps.close().await?;
        }
        if let Some(connection) = self.sqlx {
            let _ = sqlx::Connection::close(connection).await;
        }
        tokio::time::sleep(PUBLISHED_AFTER_CLOSE).await;
        Ok(())
    }
}

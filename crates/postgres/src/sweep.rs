//! Deleting rows of names nobody uses any more, in bounded batches.
//!
//! Most idle rows go with the release that leaves them idle. A row stays
//! when its lease ran out unreleased, when a writer's mark outlived its
//! wait, or when an acquire of the name was in flight as it was released;
//! each backend sweeps such rows away now and then, and
//! [`PostgresBackend::remove_idle_rows`](crate::PostgresBackend::remove_idle_rows)
//! does it on demand. Each mode's statement says what idle means for its
//! rows and why deleting them is safe.

use std::time::Duration;

use distlock_core::Result;
use tokio::task::AbortHandle;
use tokio_postgres::types::Type;

use crate::pool::Connections;
use crate::rows::get;
use crate::wake::jittered;

/// The most rows one statement deletes: each takes an advisory lock until
/// the statement commits, and the server's lock table is shared and small
/// (64 per connection by default).
const BATCH: i64 = 100;

/// The most batches one sweep runs, so that a sweep of a huge backlog
/// ends and leaves the rest to the next.
const MAX_BATCHES: usize = 1_000;

/// How often each backend sweeps, less up to a quarter of it at random,
/// so that processes started together do not sweep together.
const PERIOD: Duration = Duration::from_secs(60);

/// How long one batch of a sweep may take: a sweep runs in the
/// background, with no client's operation timeout.
const SWEEP_TIMEOUT: Duration = Duration::from_secs(10);

/// One mode's sweep statement, and what it needs to run.
#[derive(Clone)]
pub(crate) struct Sweep {
    connections: Connections,
    /// Deletes idle rows and answers how many: at most `$1` in lease
    /// mode; in advisory mode, at most `$2` of the key class `$1`.
    sql: String,
    class: Option<i32>,
}

impl Sweep {
    /// Lease mode's sweep, `sql` taking the batch size alone.
    pub(crate) fn lease(connections: Connections, sql: String) -> Self {
        Self {
            connections,
            sql,
            class: None,
        }
    }

    /// Advisory mode's sweep, `sql` taking `class` and the batch size.
    pub(crate) fn advisory(connections: Connections, sql: String, class: i32) -> Self {
        Self {
            connections,
            sql,
            class: Some(class),
        }
    }

    /// Deletes idle rows, batch by batch, until a batch finds fewer than
    /// it may take, or [`MAX_BATCHES`] ran; answers how many went.
    ///
    /// # Errors
    /// A backend error from a batch; the batches before it stay done.
    ///
    /// # Cancel safety
    /// Dropping the future leaves whole batches done and at most one
    /// batch undone.
    pub(crate) async fn run(&self) -> Result<u64> {
        let mut removed = 0;
        for _ in 0..MAX_BATCHES {
            let gone = self.batch().await?;
            removed += gone;
            if gone < BATCH.unsigned_abs() {
                break;
            }
        }
        Ok(removed)
    }

    async fn batch(&self) -> Result<u64> {
        let what = "removing idle rows";
        let rows = match &self.class {
            None => {
                self.connections
                    .query(what, &self.sql, &[(&BATCH, Type::INT8)], SWEEP_TIMEOUT)
                    .await?
            }
            Some(class) => {
                self.connections
                    .query(
                        what,
                        &self.sql,
                        &[(class, Type::INT4), (&BATCH, Type::INT8)],
                        SWEEP_TIMEOUT,
                    )
                    .await?
            }
        };
        let gone: i64 = match rows.first() {
            Some(row) => get(row, 0, what)?,
            None => 0,
        };
        Ok(gone.unsigned_abs())
    }

    /// Sweeps every [`PERIOD`] or so in the background, until the returned
    /// handle is dropped.
    pub(crate) fn start(self) -> Sweeper {
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(jittered(PERIOD)).await;
                match self.run().await {
                    Ok(0) => {}
                    Ok(removed) => tracing::debug!(removed, "removed idle lock rows"),
                    Err(error) => tracing::debug!(%error, "could not remove idle lock rows"),
                }
            }
        });
        Sweeper(task.abort_handle())
    }
}

/// The background sweep, stopped when dropped.
#[derive(Debug)]
pub(crate) struct Sweeper(AbortHandle);

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

//! sqlx's `PgAdvisoryLock` as a peer, measured against the same PostgreSQL
//! server: a session advisory lock, `SELECT pg_advisory_lock($1)` to take
//! it and `SELECT pg_advisory_unlock($1)` to give it back (the guard's
//! `release_now`), with the key sqlx derives from the name.
//!
//! `pg_advisory_lock` waits on the server until the lock is granted, and
//! the server wakes the next waiter itself when the holder unlocks. The
//! lock belongs to the connection's session, and a session that already
//! holds it takes it again at once, so every contending task has a
//! connection of its own.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::LockName;
use sqlx::postgres::{PgAdvisoryLock, PgConnection};
use sqlx::{Connection, Error};
use tokio::process::Command;
use tokio::sync::Mutex;

use crate::outcome::Outcome;
use crate::pg_stats::driver_url;
use crate::target::Target;
use crate::worker::{Layout, Take, Taker, WorkerArgs, drive, hold_then_release, report_worker};

/// A connection of the peer's to the database `url` names.
pub(crate) async fn connect(url: &str) -> Outcome<PgConnection> {
    PgConnection::connect(&driver_url(url))
        .await
        .map_err(|e| format!("sqlx: {e}"))
}

/// Uncontended cycles of the advisory lock on `name`: `acquire` and
/// `release_now` on one connection, as often as `seconds` allows.
pub(crate) async fn cycles(
    connection: &mut PgConnection,
    name: &LockName,
    seconds: Duration,
) -> Outcome<u64> {
    let fail = |e: Error| format!("sqlx PgAdvisoryLock: {e}");
    let lock = PgAdvisoryLock::new(name.as_str());
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < seconds {
        let guard = lock.acquire(&mut *connection).await.map_err(fail)?;
        guard.release_now().await.map_err(fail)?;
        cycles += 1;
    }
    Ok(cycles)
}

/// The commands that start the peer's contending workers.
pub(crate) fn workers(exe: &Path, target: &Target, lock: &str, layout: Layout) -> Vec<Command> {
    layout.commands(exe, "pg-advisory-worker", &target.url, lock)
}

/// One task's side of the peer: the lock, and the task's own connection.
#[derive(Clone)]
struct AdvisoryTaker {
    lock: Arc<PgAdvisoryLock>,
    /// Every task's connection, by task.
    connections: Arc<Vec<Arc<Mutex<PgConnection>>>>,
    connection: Arc<Mutex<PgConnection>>,
}

impl Taker for AdvisoryTaker {
    async fn take_once(&self, left: Duration, work: Duration) -> Take {
        let mut connection = self.connection.lock().await;
        // The call waits on the server. Dropping it when the window closes
        // leaves the server's wait running; the task stops, and the lock it
        // may still get goes with its connection when the worker exits.
        let guard = match tokio::time::timeout(left, self.lock.acquire(&mut *connection)).await {
            Err(_) => return Take::TimedOut,
            Ok(Err(_)) => return Take::Failed,
            Ok(Ok(guard)) => guard,
        };
        // An advisory lock has no fencing token.
        hold_then_release(work, 0, async move { guard.release_now().await.is_err() }).await
    }

    fn for_task(&self, task: u32) -> Self {
        Self {
            connection: self.connections[task as usize % self.connections.len()].clone(),
            ..self.clone()
        }
    }
}

/// One worker process of the peer: a connection per task, `tasks` tasks
/// taking the lock within the window; reports like ours. Its transactions
/// are counted by the parent, from the server's statistics.
pub(crate) async fn worker(args: &WorkerArgs) -> Outcome<()> {
    let mut connections = Vec::new();
    for _ in 0..args.tasks.max(1) {
        connections.push(Arc::new(Mutex::new(connect(&args.backend).await?)));
    }
    let taker = AdvisoryTaker {
        lock: Arc::new(PgAdvisoryLock::new(&args.lock)),
        connection: connections[0].clone(),
        connections: Arc::new(connections),
    };
    let log = drive(taker, args).await?;
    report_worker(log, None)
}

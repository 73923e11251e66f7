//! A lock statement left running by a dropped call: cancelled from a
//! pooled connection, only while it still waits for its key.
//!
//! Dropping a driver's query future does not stop the statement: the
//! server runs it to its end, and the connection answers nothing else
//! until then (`tokio-postgres` reads and discards the answer; `sqlx`
//! reads it before the connection's next statement, and fails that one
//! with its error). A lock statement
//! that waits without a bound would hold the caller's connection, and the
//! name's queue, until the lock came, and then hold the lock until the
//! transaction's rollback. So a call dropped while its statement runs
//! has that statement cancelled, in a task of its own: the server process
//! of the caller's transaction is sent `pg_cancel_backend` only while
//! `pg_locks` shows it waiting for the call's key. A process that ran
//! another statement by then, or whose wait ended, is left alone.

use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::types::Type;

use crate::pool::Connections;
use crate::rows::get;

/// How long the task waits between looks when the statement has not
/// reached its wait yet.
const LOOK_AGAIN: Duration = Duration::from_millis(10);

/// The wait to cancel.
struct Target {
    connections: Connections,
    sql: &'static str,
    class: i32,
    objid: i32,
    pid: i32,
    patience: Duration,
}

/// Armed while a lock statement runs; dropped armed, it cancels the
/// statement's wait in the background.
pub(crate) struct CancelOnDrop(Option<Target>);

impl CancelOnDrop {
    /// Armed for server process `pid`'s wait for `(class, objid)`, which
    /// `sql` cancels through `connections`, trying for `patience` at most.
    pub(crate) fn arm(
        connections: &Connections,
        sql: &'static str,
        (class, objid): (i32, i32),
        pid: i32,
        patience: Duration,
    ) -> Self {
        Self(Some(Target {
            connections: connections.clone(),
            sql,
            class,
            objid,
            pid,
            patience,
        }))
    }

    /// The statement answered: nothing to cancel.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(target) = self.0.take() else {
            return;
        };
        // Without a runtime nothing can be sent: the statement then ends
        // when its lock comes or its `lock_timeout` runs out.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(target.cancel());
        }
    }
}

impl Target {
    /// Cancels the wait, looking again while the process still runs a
    /// statement that has not reached its wait, for `patience` at most.
    async fn cancel(self) {
        let what = "cancelling a dropped transaction lock's wait";
        let deadline = Instant::now() + self.patience;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = self
                .connections
                .query(
                    what,
                    self.sql,
                    &[
                        (&self.class, Type::INT4),
                        (&self.objid, Type::INT4),
                        (&self.pid, Type::INT4),
                    ],
                    left,
                )
                .await;
            let (cancelled, running) = match answer.as_deref() {
                Ok([row, ..]) => (
                    get::<bool>(row, 0, what).unwrap_or(false),
                    get::<bool>(row, 1, what).unwrap_or(false),
                ),
                Ok([]) => (false, false),
                Err(error) => {
                    tracing::debug!(%error, pid = self.pid, "{what}");
                    return;
                }
            };
            if cancelled || !running || Instant::now() + LOOK_AGAIN >= deadline {
                return;
            }
            tokio::time::sleep(LOOK_AGAIN).await;
        }
    }
}

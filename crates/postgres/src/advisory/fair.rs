//! Fair mode: a waiting writer waits inside the server, in the queue that
//! PostgreSQL's lock manager keeps for each lock in the order of arrival,
//! so that a release hands the lock to the first waiter by itself.
//!
//! - The first waiting attempt that finds the lock held keeps its session,
//!   which holds the name's writers' intent (keeping the name's row and
//!   key in place), and gives it to a task of the wait's own: its [`Place`].
//!   The task runs `pg_advisory_lock` there (see
//!   [`wait_in_line`](super::statements)), which bumps the token, and
//!   records the term for a campaign, in the statement that is granted.
//!   While it waits, the session's application name names the waiter, for
//!   the listing (see [`super::waiters`]).
//! - The attempt answers "wait" only once the server shows the session in
//!   the key's queue (or granted), asked from a pooled connection: the
//!   task may be scheduled late, and a waiter that asks after that answer
//!   must not take its place first. So waits are granted in the order of
//!   their answers.
//! - The task then wakes this process's waiters of the name, and the
//!   wait's next attempt takes the grant over: one statement on the
//!   session starts the server's idle timer (a lease) afresh from that
//!   attempt, so the lease core counts is never longer than the server's.
//!   Attempts in between ask the server nothing.
//! - Ending the wait cancels the statement from another connection, and
//!   releases a grant that came meanwhile; dropping the wait's state
//!   closes the session, which ends its place or grant on the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Attempt, ReleaseHub, WaitState};
use distlock_core::{Error, LockName, Result};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::CancelToken;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::grant;
use super::keys::Key;
use super::session::{Session, Spares};
use super::statements::CHECK_CONNECTION;
use super::waiters;
use super::waiting::{WaitingWriter, left};
use crate::pool::Connections;
use crate::rows::{self, get, holder_json};
use crate::terms;

/// How many leases a place waits at most, by the server's clock
/// (`lock_timeout`), before the task looks whether its wait was asked
/// about since: each attempt of the wait marks it, and a wait marked
/// joins the queue again at once (at its end), one that was not is given
/// up. A place cannot be renewed without leaving the queue, so the bound
/// is long, for waits that are tended; a waiter whose process died needs
/// none (see the crate docs' "Fair mode").
const PLACE_LEASES: u32 = 10;

/// How long a wait's first attempt pauses between two looks at the
/// server's queue, while its place is not there yet: the place's task
/// sends its statement as soon as it runs, so the place is mostly seen
/// at the first or second look.
const PLACE_LOOK_PAUSE: Duration = Duration::from_millis(1);

/// A wait's place in the server's queue: the task that waits there, on
/// the wait's own session.
pub(super) struct Place {
    /// The name's key, whose writers' intent the session holds.
    key: Key,
    cancel: CancelToken,
    task: JoinHandle<()>,
    /// How the task ended, sent before it wakes the wait: a wait woken
    /// finds it there (the task itself may not have returned yet).
    waited: oneshot::Receiver<Waited>,
    /// Marked by each attempt of the wait; see [`PLACE_LEASES`].
    asked: Arc<AtomicBool>,
}

impl Drop for Place {
    fn drop(&mut self) {
        // The task's future owns the session: aborted, it closes it, and
        // the server drops the place (or ends a grant made to it).
        self.task.abort();
    }
}

/// What became of a place given up, for the wait's end to settle.
pub(super) enum Left {
    /// Its statement was cancelled, or its session is gone: closed, the
    /// session ends whatever it held.
    Closed,
    /// Its place ran out: the session holds the name's intent only.
    RanOut(WaitingWriter),
    /// The server granted the place as it was given up: nobody received
    /// the grant, whose token is `token` (`None` if the name's row went).
    Granted {
        session: Session,
        key: Key,
        token: Option<i64>,
    },
}

/// How a place's task ended, with its session.
struct Waited {
    session: Session,
    outcome: Result<Option<Granted>>,
}

/// What the server's grant answered.
struct Granted {
    /// `None` if the name's row went meanwhile, which its intent prevents.
    token: Option<i64>,
    pid: i32,
}

/// The statement a place's task waits in line with, and what it sends,
/// owned by the task.
struct PlaceStatement {
    sql: String,
    name: LockName,
    class: i32,
    objid: i32,
    lock_timeout_ms: String,
    holder: String,
    /// The session's application name while it waits, which names the
    /// waiter in the listing (see [`super::waiters`]).
    waiter: String,
    /// A campaign's holder, with its label whole.
    term_holder: Option<String>,
    /// How long the client waits for the statement's answer at most: the
    /// place's bound, and an operation timeout for the answer to come.
    patience: Duration,
}

impl PlaceStatement {
    /// Waits in line on `session` until the server grants, or the place
    /// runs out unasked about, or fails; then wakes the name's waiters in
    /// this process.
    async fn wait(
        self,
        session: Session,
        asked: Arc<AtomicBool>,
        hub: ReleaseHub,
        done: oneshot::Sender<Waited>,
    ) {
        let what = format!("waiting in line for {}", self.name);
        let bytes = self.name.as_str().as_bytes();
        let params: [(&(dyn ToSql + Sync), Type); 6] = [
            (&self.class, Type::INT4),
            (&self.objid, Type::INT4),
            (&self.lock_timeout_ms, Type::TEXT),
            (&self.holder, Type::TEXT),
            (&bytes, Type::BYTEA),
            (&self.waiter, Type::TEXT),
        ];
        let campaign_params;
        let params: &[(&(dyn ToSql + Sync), Type)] = match &self.term_holder {
            Some(term_holder) => {
                campaign_params = [params.as_slice(), &[(term_holder, Type::TEXT)]].concat();
                &campaign_params
            }
            None => &params,
        };
        let ask = || {
            session.query_unless(
                &SqlState::LOCK_NOT_AVAILABLE,
                &what,
                &self.sql,
                params,
                self.patience,
            )
        };
        // The check is sent first, without waiting for its answer, so the
        // place is taken as soon as it would be without it.
        let check = session.execute(&what, CHECK_CONNECTION, self.patience);
        let (checked, mut answered) = tokio::join!(check, ask());
        if let Err(error) = checked {
            tracing::debug!(%error, "could not have the server check a waiter's connection");
        }
        let outcome = loop {
            match answered {
                Ok(Some(rows)) => break granted(rows.first(), &what),
                // The place ran out: back in line if the wait was asked
                // about since it took it.
                Ok(None) if asked.swap(false, Ordering::AcqRel) => answered = ask().await,
                Ok(None) => break Ok(None),
                Err(error) => break Err(error),
            }
        };
        // Dropped unsent when the wait is gone: the session closes.
        let _ = done.send(Waited { session, outcome });
        hub.notify(&self.name);
    }
}

fn granted(row: Option<&tokio_postgres::Row>, what: &str) -> Result<Option<Granted>> {
    let Some(row) = row else {
        return Err(Error::Backend {
            backend: "postgres",
            message: format!("{what}: the server answered no row"),
            source: None,
        });
    };
    Ok(Some(Granted {
        token: get(row, 0, what)?,
        pid: get(row, 1, what)?,
    }))
}

/// The place's `lock_timeout` for `lease`, in milliseconds as the server
/// takes it (at most `i32::MAX`).
fn lock_timeout_ms(lease: Duration) -> String {
    let ms = (lease * PLACE_LEASES)
        .as_millis()
        .clamp(1, i32::MAX as u128);
    ms.to_string()
}

impl Place {
    /// Starts waiting in line for `request` on `session`, which holds the
    /// intent of the name's `key`, with `sql`, the statement that waits
    /// (a campaign's, which `records` its term, or a plain one); `hub`
    /// wakes this process's waiters of the name once the task is done.
    pub(super) fn take(
        request: &AcquireRequest,
        session: Session,
        key: Key,
        sql: &str,
        records: bool,
        hub: ReleaseHub,
    ) -> Self {
        let place_timeout = request.lease * PLACE_LEASES;
        let asked = PlaceStatement {
            sql: sql.to_owned(),
            name: request.name.clone(),
            class: key.class,
            objid: key.objid,
            lock_timeout_ms: lock_timeout_ms(request.lease),
            holder: holder_json(&request.holder),
            waiter: waiters::application_name(&request.holder),
            term_holder: records.then(|| terms::holder_json(&request.holder)),
            patience: place_timeout.saturating_add(request.operation_timeout),
        };
        let marked = Arc::new(AtomicBool::new(false));
        let cancel = session.cancel_token();
        let (done, waited) = oneshot::channel();
        let task = tokio::spawn(asked.wait(session, marked.clone(), hub, done));
        Self {
            key,
            cancel,
            task,
            waited,
            asked: marked,
        }
    }

    /// The first attempt's answer once the place is taken: it looks,
    /// from `connections`, until the server shows the session's process
    /// `pid` in the key's queue or granted (with `place_taken`, see
    /// [`super::statements`]), or the task has ended (the next attempt
    /// then settles it at once), all before `deadline`.
    ///
    /// # Errors
    /// A backend error, or one when the place was not seen by `deadline`;
    /// the caller then drops the place, which gives it up.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads. The caller's place, dropped, closes
    /// its session, which gives the place (or a grant) up.
    pub(super) async fn confirm(
        &self,
        request: &AcquireRequest,
        pid: i32,
        connections: &Connections,
        place_taken: &str,
        deadline: Instant,
    ) -> Result<Attempt> {
        let what = format!("looking for the place in line for {}", request.name);
        loop {
            if !self.waited.is_empty() || self.waited.is_terminated() {
                return Ok(Attempt::Held {
                    retry_after: Some(Duration::ZERO),
                });
            }
            let params: [(&(dyn ToSql + Sync), Type); 3] = [
                (&self.key.class, Type::INT4),
                (&self.key.objid, Type::INT4),
                (&pid, Type::INT4),
            ];
            let rows = connections
                .query(&what, place_taken, &params, left(deadline))
                .await?;
            let seen = match rows.first() {
                Some(row) => get::<bool>(row, 0, &what)?,
                None => false,
            };
            if seen {
                return Ok(in_line(request));
            }
            if left(deadline) <= PLACE_LOOK_PAUSE {
                return Err(Error::Backend {
                    backend: "postgres",
                    message: format!("{what}: the server did not show it in time"),
                    source: None,
                });
            }
            tokio::time::sleep(PLACE_LOOK_PAUSE).await;
        }
    }

    /// One attempt of a wait that has this place: nothing asked of the
    /// server while the place waits, the grant taken over once it came,
    /// with `check`, the statement that answers the session's server
    /// process. `None` when the place ran out, and the wait asks again on
    /// its session.
    ///
    /// # Cancel safety
    /// Dropping the future closes a session it took over, and the lock
    /// with it.
    pub(super) async fn tend(
        mut self,
        request: &AcquireRequest,
        wait: &mut WaitState,
        check: &str,
        deadline: Instant,
    ) -> Result<Option<Attempt>> {
        self.asked.store(true, Ordering::Release);
        let what = format!("acquiring {}", request.name);
        let waited = match self.waited.try_recv() {
            Ok(waited) => waited,
            Err(oneshot::error::TryRecvError::Empty) => {
                wait.set(self);
                return Ok(Some(in_line(request)));
            }
            Err(oneshot::error::TryRecvError::Closed) => {
                return Err(Error::Backend {
                    backend: "postgres",
                    message: format!("{what}: the wait in line ended without an answer"),
                    source: None,
                });
            }
        };
        let session = waited.session;
        let Some(granted) = waited.outcome? else {
            wait.set(WaitingWriter {
                session,
                objid: self.key.objid,
            });
            return Ok(None);
        };
        // The grant's session answers this attempt: the idle timer, the
        // lease on the server, starts now, after the attempt was sent.
        let rows = session.query(&what, check, &[], left(deadline)).await?;
        let pid: Option<i32> = rows.first().map(|row| get(row, 0, &what)).transpose()?;
        if pid != Some(granted.pid) {
            return Err(Error::Backend {
                backend: "postgres",
                message: format!("{what}: the session's server process changed under the grant"),
                source: None,
            });
        }
        let Some(token) = granted.token else {
            // Dropped, the session ends the lock; the next try reads the
            // name's row anew.
            drop(session);
            return Ok(Some(Attempt::Held {
                retry_after: Some(Duration::ZERO),
            }));
        };
        let fencing_token = rows::token(token, &what)?;
        Ok(Some(grant::pin(
            request,
            session,
            self.key,
            false,
            granted.pid,
            fencing_token,
        )))
    }

    /// Gives the place up, as `request`'s wait ends: cancels its statement
    /// (through `spares`), and answers what the task ended with, within
    /// the request's operation timeout.
    ///
    /// # Cancel safety
    /// Dropping the future closes the session, which ends the place or
    /// the grant on the server.
    pub(super) async fn leave(mut self, request: &AcquireRequest, spares: &Spares) -> Left {
        let patience = request.operation_timeout;
        if self.waited.is_empty()
            && !self.waited.is_terminated()
            && let Err(error) = spares.cancel(&self.cancel, patience).await
        {
            // Dropping the place closes its session instead.
            tracing::debug!(%error, name = %request.name, "could not cancel a wait in line");
            return Left::Closed;
        }
        let Ok(Ok(waited)) = tokio::time::timeout(patience, &mut self.waited).await else {
            return Left::Closed;
        };
        let session = waited.session;
        match waited.outcome {
            Ok(Some(granted)) => Left::Granted {
                session,
                key: self.key,
                token: granted.token,
            },
            // Run out while waiting: the session holds the intent only.
            Ok(None) => Left::RanOut(WaitingWriter {
                session,
                objid: self.key.objid,
            }),
            // Cancelled, most likely while waiting; but a cancel that came
            // as the server granted fails the rest of the statement and
            // leaves the lock held. Closed, the session ends whatever it
            // holds.
            Err(_) => Left::Closed,
        }
    }
}

/// What an attempt answers while its place waits: the server grants by
/// itself, and the task wakes the wait; the place needs no renewing, so
/// the next attempt only looks at it, at about half a lease.
pub(super) fn in_line(request: &AcquireRequest) -> Attempt {
    Attempt::Held {
        retry_after: Some(request.lease / 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_waits_ten_leases_within_what_the_server_takes() {
        assert_eq!(lock_timeout_ms(Duration::from_secs(3)), "30000");
        assert_eq!(lock_timeout_ms(Duration::ZERO), "1");
        // The longest lease advisory mode takes, and past what it takes.
        assert_eq!(lock_timeout_ms(Duration::from_secs(32_767)), "327670000");
        assert_eq!(
            lock_timeout_ms(Duration::from_secs(300_000)),
            i32::MAX.to_string()
        );
    }
}

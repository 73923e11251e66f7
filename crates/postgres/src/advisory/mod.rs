//! Advisory mode: each grant is a session advisory lock on a connection of
//! its own, pinned to the grant for its life and checked once per
//! extension period. See the crate docs' "Advisory mode" for what callers
//! can rely on; this module says how.
//!
//! - A grant's [`GrantState`](distlock_core::backend::GrantState) holds its
//!   [`Pinned`] session (see [`grant`]). Releasing
//!   unlocks it and returns the session to the spares; dropping the state
//!   closes the session, which ends the lock on the server.
//! - A session's driver task reports the grant lost the moment its
//!   connection ends (see [`session`]). A connection that silently stops
//!   answering is caught by the extension check instead, which core's
//!   keeper gives up on after the lease minus its safety margin; the
//!   server ends that session after a lease of silence, through the
//!   `idle_session_timeout` each holding session is given.
//! - Writers are not starved: a waiting writer holds its name's intent key
//!   shared on its waiting session, and readers do not try while any
//!   intent is held (see [`statements`]).
//! - In fair mode a waiting writer waits inside the server, in the lock's
//!   own queue (see [`fair`]), where the listing finds it (see
//!   [`waiters`]); outside it, a waiting writer keeps its session between
//!   attempts (see [`waiting`]), and nobody can say in what order the
//!   waiters will be served.

mod fair;
mod grant;
pub(crate) mod keys;
mod session;
pub(crate) mod statements;
mod waiters;
mod waiting;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::Waiters;
use distlock_core::backend::{AcquireRequest, Attempt, Capabilities, Lease, WaitState};
use distlock_core::{Claim, Error, LockInfo, LockKind, LockName, Result, Waiter};
use tokio::time::Instant;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};

use self::fair::{Left, Place};
use self::grant::Pinned;
use self::keys::Key;
use self::session::{Session, Spares};
use self::statements::Statements;
use self::waiting::{WaitingWriter, left};
use crate::config::PostgresConfig;
use crate::error::{from_driver, notification_queue_full, within};
use crate::pool::{Connections, SETUP_TIMEOUT};
use crate::pooler;
use crate::prepared::Params;
use crate::rows::{self, get, holder_json};
use crate::store::Store;
use crate::sweep::Sweep;
use crate::terms::{self, TermRecord};
use crate::tls::Endpoint;
use crate::wake::{Channels, Listener};

/// How long a waiter waits at most before trying again: a holder whose
/// session ends without a release (a dead process, a session the server
/// timed out) frees the lock without a notification.
const SILENT_END_POLL: Duration = Duration::from_secs(1);

/// How many times one attempt asks, giving the name a key before each ask
/// after the first: a row is deleted between its keying and the next ask
/// only when others were granted the name and released it in between.
const MAX_ASKS: usize = 3;

/// How many grants one bulk extension checks at once, each on its own
/// session: as many as core's keeper would extend at once by default.
pub(crate) const CHECKS_AT_ONCE: usize = 32;

/// The longest lease advisory mode takes: the server probes a silent
/// holder's connection after a lease through `tcp_keepalives_idle`, in
/// whole seconds, which Linux caps at 32,767 (and the server only logs a
/// refused value, leaving the probes off). `idle_session_timeout`, in
/// milliseconds up to `i32::MAX` (some 24 days), is no tighter.
pub const MAX_ADVISORY_LEASE: Duration = Duration::from_secs(32_767);

/// The lease as `idle_session_timeout` takes it, in milliseconds, if the
/// server can enforce it.
///
/// # Errors
/// [`Error::InvalidConfig`] for the field `lease` when it is longer than
/// [`MAX_ADVISORY_LEASE`].
fn idle_timeout_ms(lease: Duration) -> Result<String> {
    if lease > MAX_ADVISORY_LEASE {
        return Err(Error::config(
            "lease",
            format!(
                "{lease:?} is too long for mode=advisory, whose server-side probes of a silent \
                 holder (tcp_keepalives_idle) take at most {}s; use a shorter lease, or \
                 mode=lease",
                MAX_ADVISORY_LEASE.as_secs()
            ),
        ));
    }
    Ok(lease.as_millis().max(1).to_string())
}

/// The oldest server with `idle_session_timeout`.
const MIN_SERVER_VERSION: i32 = 140_000;

/// Checks that the server can end the sessions of holders that stopped
/// checking them: `idle_session_timeout` came with PostgreSQL 14.
///
/// # Errors
/// [`Error::InvalidConfig`] for an older server; a backend error.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub(crate) async fn check_server(client: &Client, timeout: Duration) -> Result<()> {
    let what = "reading the server's version";
    let version_num = "SELECT current_setting('server_version_num')::integer";
    let rows = within(what, timeout, client.query_typed(version_num, &[]))
        .await?
        .map_err(|error| from_driver(what, error))?;
    let version: i32 = match rows.first() {
        Some(row) => get(row, 0, what)?,
        None => 0,
    };
    if version < MIN_SERVER_VERSION {
        return Err(Error::config(
            "mode",
            format!(
                "mode=advisory needs PostgreSQL 14 or later (idle_session_timeout), \
                 the server is version {version}; use mode=lease"
            ),
        ));
    }
    Ok(())
}

/// Checks that `spares` reach the server itself, within [`SETUP_TIMEOUT`],
/// with keys of `class`; the two sessions used go back to the spares.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `mode` behind a transaction pooler; a
/// backend error.
///
/// # Cancel safety
/// Dropping the future closes the sessions, which ends the probe's lock
/// on a server of our own.
async fn refuse_transaction_pooling(spares: &Spares, class: i32) -> Result<()> {
    let first = spares.take(SETUP_TIMEOUT).await?;
    let second = spares.take(SETUP_TIMEOUT).await?;
    if pooler::reaches_transaction_pooler(first.client(), second.client(), class, SETUP_TIMEOUT)
        .await?
    {
        return Err(Error::config(
            "mode",
            "mode=advisory holds session advisory locks, and this URL reaches a \
             transaction pooler (PgBouncer in transaction mode), which hands a server \
             connection and its locks to other clients between transactions: connect \
             straight to the server, or use mode=lease",
        ));
    }
    spares.put(first);
    spares.put(second);
    Ok(())
}

/// What one attempt's statement answered.
struct Answer {
    objid: i32,
    granted: bool,
    token: Option<i64>,
    pid: i32,
}

impl Answer {
    fn read(row: &Row, what: &str) -> Result<Self> {
        Ok(Self {
            objid: get(row, 0, what)?,
            granted: get(row, 1, what)?,
            token: get(row, 2, what)?,
            pid: get(row, 4, what)?,
        })
    }
}

/// Locks kept as session advisory locks, one pinned session per grant.
pub(crate) struct AdvisoryMode {
    /// Its pooled connections serve the statements that hold nothing:
    /// listing and forced releases.
    pub(crate) store: Store,
    class: i32,
    spares: Spares,
    statements: Statements,
    /// Fair mode: waiting writers wait in the server's queue.
    fair: bool,
}

impl AdvisoryMode {
    /// Advisory mode as `config` describes it, once its URL proved to
    /// reach the server itself, within [`SETUP_TIMEOUT`]; it records
    /// election terms when `records_terms` (their table is there).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] behind a transaction pooler; a backend
    /// error.
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing held.
    pub(crate) async fn open(
        config: &PostgresConfig,
        endpoint: Endpoint,
        connections: Connections,
        channels: Channels,
        listener: Listener,
        records_terms: bool,
    ) -> Result<Self> {
        let spares = Spares::new(endpoint);
        refuse_transaction_pooling(&spares, config.advisory_class).await?;
        // The pool reaches the server itself too.
        connections.prepare_statements();
        let statements = Statements::new(&config.table);
        let sweep = Sweep::advisory(
            connections.clone(),
            statements.sweep.clone(),
            config.advisory_class,
        );
        let terms = records_terms
            .then(|| TermRecord::new(connections.clone(), &config.table.terms(), None));
        Ok(Self {
            store: Store::new(connections, channels, listener, terms, sweep),
            class: config.advisory_class,
            fair: config.fair,
            spares,
            statements,
        })
    }

    /// Runs one attempt's statement on `session` (a campaign's, which
    /// `records` its term, or a plain one), giving the name its key first
    /// if it has none, all before `deadline`. `None` when the name's
    /// row was deleted each time it was given one: others were granted
    /// and released it meanwhile, and the attempt lost to them.
    async fn ask(
        &self,
        request: &AcquireRequest,
        session: &Session,
        shared: bool,
        records: bool,
        intent: Option<i32>,
        deadline: Instant,
    ) -> Result<Option<Answer>> {
        let what = format!("acquiring {}", request.name);
        let name = request.name.as_str().as_bytes();
        let idle_ms = idle_timeout_ms(request.lease)?;
        let holder = holder_json(&request.holder);
        let will_wait = !shared && request.retries;
        let params: [(&(dyn ToSql + Sync), Type); 6] = [
            (&self.class, Type::INT4),
            (&name, Type::BYTEA),
            (&idle_ms, Type::TEXT),
            (&holder, Type::TEXT),
            (&intent, Type::INT4),
            (&will_wait, Type::BOOL),
        ];
        // A campaign's statement also takes the holder with its label
        // whole; a plain acquire sends what it always did.
        let (term_holder, campaign_params);
        let (sql, params): (&str, &Params<'_>) = if records {
            term_holder = terms::holder_json(&request.holder);
            campaign_params = [params.as_slice(), &[(&term_holder, Type::TEXT)]].concat();
            (&self.statements.campaign, &campaign_params)
        } else {
            (self.statements.acquire(shared), &params)
        };
        for asked in 1..=MAX_ASKS {
            let rows = session.query(&what, sql, params, left(deadline)).await?;
            if let Some(row) = rows.first() {
                return Answer::read(row, &what).map(Some);
            }
            if asked == MAX_ASKS {
                break;
            }
            keys::allocate(
                keys::Runner::Session(session),
                &self.statements.insert_key,
                &request.name,
                left(deadline),
            )
            .await?;
        }
        Ok(None)
    }

    /// One attempt, start to end: a session, the statement, and what
    /// becomes of the session (pinned to the grant, kept by a waiting
    /// writer, or back to the spares).
    async fn attempt(
        &self,
        request: &AcquireRequest,
        shared: bool,
        records: bool,
        wait: &mut WaitState,
        deadline: Instant,
    ) -> Result<Attempt> {
        let waits_in_line = self.fair && !shared && request.retries;
        if waits_in_line
            && let Some(place) = wait.take::<Place>()
            && let Some(attempt) = place
                .tend(request, wait, &self.statements.check, deadline)
                .await?
        {
            return Ok(attempt);
        }
        // A waiting writer asks again on the session holding its intent.
        let (session, intent) = match wait.take::<WaitingWriter>() {
            Some(waiting) if !waiting.session.is_closed() => (waiting.session, Some(waiting.objid)),
            _ => (self.spares.take(left(deadline)).await?, None),
        };
        let Some(answer) = self
            .ask(request, &session, shared, records, intent, deadline)
            .await?
        else {
            self.spares.put(session);
            return Ok(Attempt::Held {
                retry_after: Some(Duration::ZERO),
            });
        };
        let what = format!("acquiring {}", request.name);
        if answer.granted {
            let Some(token) = answer.token else {
                // The name's row was deleted after this statement read its
                // key: the key is no longer the name's. Closing the session
                // ends the lock it took; the next try reads the row anew.
                drop(session);
                return Ok(Attempt::Held {
                    retry_after: Some(Duration::ZERO),
                });
            };
            if session.is_closed() {
                // It ended after answering: the lock went with it.
                return Err(Error::Backend {
                    backend: "postgres",
                    message: format!("{what}: the session ended as the lock was granted"),
                    source: None,
                });
            }
            let fencing_token = rows::token(token, &what)?;
            let key = Key {
                class: self.class,
                objid: answer.objid,
            };
            return Ok(grant::pin(
                request,
                session,
                key,
                shared,
                answer.pid,
                fencing_token,
            ));
        }
        if waits_in_line {
            let key = Key {
                class: self.class,
                objid: answer.objid,
            };
            let sql = if records {
                &self.statements.campaign_in_line
            } else {
                &self.statements.wait_in_line
            };
            let hub = self.store.listener.hub();
            let place = Place::take(request, session, key, sql, records, hub);
            // Dropped on an error (or with the attempt), the place is
            // given up: its session closes.
            let attempt = place
                .confirm(
                    request,
                    answer.pid,
                    &self.store.connections,
                    &self.statements.place_taken,
                    deadline,
                )
                .await?;
            wait.set(place);
            return Ok(attempt);
        }
        if !shared && request.retries {
            wait.set(WaitingWriter {
                session,
                objid: answer.objid,
            });
        } else {
            self.spares.put(session);
        }
        // A release wakes waiters; a holder whose session ended unreleased
        // does not, nor does a writer's intent that ended with its session.
        // A waiting writer also keeps its session's idle timer, a lease,
        // from running out.
        Ok(Attempt::Held {
            retry_after: Some(SILENT_END_POLL.min(request.lease / 2)),
        })
    }

    /// Ends a waiting writer's wait: its intent given up, its idle timeout
    /// taken off, and its session back to the spares.
    ///
    /// # Errors
    /// A backend error; the session is then closed, which ends the intent.
    ///
    /// # Cancel safety
    /// Dropping the future closes the session.
    async fn stop_waiting(&self, request: &AcquireRequest, waiting: WaitingWriter) -> Result<()> {
        let (channel, payload) = self.store.channels.announce(&request.name);
        waiting
            .session
            .query(
                &format!("ending a wait for {}", request.name),
                &self.statements.end_wait,
                &[
                    (&self.class, Type::INT4),
                    (&waiting.objid, Type::INT4),
                    (&channel, Type::TEXT),
                    (&payload, Type::TEXT),
                ],
                request.operation_timeout,
            )
            .await?;
        self.spares.put(waiting.session);
        Ok(())
    }

    /// Releases a grant the server made to a wait's place as the wait
    /// ended, which nobody received: the term its statement recorded goes
    /// first, while the session holds the lock, so that no later grant
    /// names it as the one before; the lock then passes to the next in
    /// line.
    ///
    /// # Errors
    /// A backend error when the release fails (dropped, the session is
    /// then closed, which ends the grant).
    ///
    /// # Cancel safety
    /// Dropping the future closes the session, which ends the grant.
    async fn release_unreceived(
        &self,
        request: &AcquireRequest,
        session: Session,
        key: Key,
        token: Option<i64>,
    ) -> Result<()> {
        let patience = request.operation_timeout;
        if let (Some(terms), Some(term), true) = (&self.store.terms, token, request.records_term)
            && let Err(error) = terms
                .withdraw_term(&request.name, term, &request.holder, patience)
                .await
        {
            tracing::warn!(%error, name = %request.name, "could not withdraw the term of a grant nobody received; observers may report it");
        }
        let (channel, payload) = self.store.channels.announce(&request.name);
        session
            .query(
                &format!("releasing {} granted after its wait ended", request.name),
                self.statements.release(false),
                &[
                    (&key.class, Type::INT4),
                    (&key.objid, Type::INT4),
                    (&channel, Type::TEXT),
                    (&payload, Type::TEXT),
                ],
                patience,
            )
            .await?;
        self.spares.put(session);
        Ok(())
    }
}

/// The calls of [`Backend`](distlock_core::backend::Backend) that advisory mode
/// answers its own way; the backend answers the rest for both modes.
impl AdvisoryMode {
    pub(crate) fn capabilities(&self) -> Capabilities {
        // Not process-bound: a holder cut off from the server must give
        // the lock up before the server ends its session (after a lease
        // of silence), so core's keeper checks each grant's session once
        // per extension period. No hand-overs: a lock passes between a
        // client's tasks by a release and a new grant. Fair: whole locks
        // go to waiters in the order of the server's queue.
        Capabilities::lease_based()
            .with_shared(true)
            .with_fair(self.fair)
    }

    pub(crate) async fn try_acquire(
        &self,
        request: &AcquireRequest,
        wait: &mut WaitState,
    ) -> Result<Attempt> {
        let shared = match request.claim {
            Claim::Exclusive => false,
            Claim::Shared => true,
            Claim::Permit { .. } => {
                return Err(Error::Unsupported(
                    "PostgreSQL's mode=advisory has no semaphores; mode=lease (the default) has"
                        .into(),
                ));
            }
        };
        let records = terms::recorded(request, self.store.terms.is_some())?;
        let deadline = Instant::now() + request.operation_timeout;
        // Everything the attempt opened is dropped with it, and a dropped
        // session ends whatever lock it took.
        within(
            &format!("acquiring {}", request.name),
            request.operation_timeout,
            self.attempt(request, shared, records, wait, deadline),
        )
        .await?
    }

    pub(crate) async fn end_wait(
        &self,
        request: &AcquireRequest,
        mut wait: WaitState,
    ) -> Result<()> {
        if let Some(place) = wait.take::<Place>() {
            return match place.leave(request, &self.spares).await {
                Left::Granted {
                    session,
                    key,
                    token,
                } => self.release_unreceived(request, session, key, token).await,
                Left::RanOut(waiting) => self.stop_waiting(request, waiting).await,
                Left::Closed => Ok(()),
            };
        }
        match wait.take::<WaitingWriter>() {
            Some(waiting) => self.stop_waiting(request, waiting).await,
            None => Ok(()),
        }
    }

    /// Whether `lease`'s grant still holds its lock: one round trip on
    /// its session, which also starts the server's idle timer afresh.
    pub(crate) async fn check(&self, lease: &Lease) -> Result<bool> {
        let Some(pinned) = lease.state.get::<Pinned>() else {
            return Ok(false);
        };
        let Some(session) = pinned.session(lease) else {
            return Ok(false);
        };
        if session.is_closed() {
            return Ok(false);
        }
        let checked = session
            .query(
                &format!("checking {}", lease.name),
                &self.statements.check,
                &[],
                lease.operation_timeout,
            )
            .await;
        match checked {
            Ok(rows) => match rows.first() {
                Some(row) => Ok(get::<i32>(row, 0, "checking a session")? == pinned.pid),
                None => Ok(false),
            },
            Err(_) if session.is_closed() => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Checks many grants, [`CHECKS_AT_ONCE`] at a time.
    pub(crate) async fn check_many(&self, leases: &[Lease]) -> Vec<Result<bool>> {
        let mut outcomes = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(CHECKS_AT_ONCE) {
            let checks = chunk.iter().map(|lease| self.check(lease));
            outcomes.extend(futures::future::join_all(checks).await);
        }
        outcomes
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        let Some(pinned) = lease.state.get::<Pinned>() else {
            return Ok(false);
        };
        let Some(session) = pinned.take_session(lease) else {
            return Ok(false);
        };
        // Released on purpose: the connection's end is no loss any more.
        session.unpin();
        if session.is_closed() {
            return Ok(false);
        }
        let (channel, payload) = self.store.channels.announce(&lease.name);
        let released = session
            .query(
                &format!("releasing {}", lease.name),
                self.statements.release(pinned.shared),
                &[
                    (&pinned.key.class, Type::INT4),
                    (&pinned.key.objid, Type::INT4),
                    (&channel, Type::TEXT),
                    (&payload, Type::TEXT),
                ],
                lease.operation_timeout,
            )
            .await;
        let rows = match released {
            Ok(rows) => rows,
            // The lock ended with the session.
            Err(_) if session.is_closed() => return Ok(false),
            // The server refused the notification for a full queue, after
            // the unlock: advisory unlocks take effect at once and are not
            // undone with the statement. The session held the lock until
            // then, so it was ours. Its idle timeout was undone with the
            // statement, so the session is closed rather than kept.
            Err(error) if notification_queue_full(&error) => {
                tracing::warn!(
                    %error,
                    "PostgreSQL's notification queue is full; released {} without waking its \
                     waiters, which find it free when they next poll",
                    lease.name
                );
                return Ok(true);
            }
            // Dropping the session closes it, which ends the lock.
            Err(error) => return Err(error),
        };
        let held = match rows.first() {
            Some(row) => get::<bool>(row, 0, "releasing")?,
            None => false,
        };
        if let Ok(session) = Arc::try_unwrap(session) {
            self.spares.put(session);
        }
        Ok(held)
    }

    pub(crate) async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        let rows = self
            .store
            .connections
            .query(
                "listing locks",
                &self.statements.list,
                &[(&self.class, Type::INT4)],
                limit,
            )
            .await?;
        rows.iter().map(lock_info).collect()
    }

    /// Whether waiting writers wait in the server's queue (fair mode).
    pub(crate) fn is_fair(&self) -> bool {
        self.fair
    }

    /// Every writer waiting in the server's queue of a name's key, with
    /// its name, in the order the server will grant them (see
    /// [`waiters`]); none outside fair mode, whose waiters each poll on
    /// their own, in no order anyone can tell.
    pub(crate) async fn waiters(&self, limit: Duration) -> Result<Vec<(LockName, Waiter)>> {
        if !self.fair {
            return Ok(Vec::new());
        }
        let rows = self
            .store
            .connections
            .query(
                "listing waiters",
                &self.statements.waiters,
                &[(&self.class, Type::INT4)],
                limit,
            )
            .await?;
        rows.iter().map(waiters::read).collect()
    }

    pub(crate) async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool> {
        let bytes = name.as_str().as_bytes();
        let (channel, payload) = self.store.channels.announce(name);
        let what = format!("force-releasing {name}");
        let rows = self
            .store
            .connections
            .query(
                &what,
                &self.statements.force_release,
                &[
                    (&self.class, Type::INT4),
                    (&bytes, Type::BYTEA),
                    (&channel, Type::TEXT),
                    (&payload, Type::TEXT),
                ],
                limit,
            )
            .await?;
        let ended: i32 = match rows.first() {
            Some(row) => get(row, 0, &what)?,
            None => 0,
        };
        Ok(ended > 0)
    }
}

/// Reads a row of the list statement.
fn lock_info(row: &Row) -> Result<LockInfo> {
    let what = "a listed lock";
    let raw: &[u8] = get(row, 0, what)?;
    let text = std::str::from_utf8(raw).map_err(|_| Error::InvalidData {
        what: what.into(),
        field: "name".into(),
        reason: "not UTF-8".into(),
    })?;
    let name = LockName::new(text)?;
    let mode: String = get(row, 1, what)?;
    let token: Option<i64> = get(row, 2, what)?;
    let holder: Option<String> = get(row, 3, what)?;
    Ok(LockInfo {
        kind: if mode == "ShareLock" {
            LockKind::Shared
        } else {
            LockKind::Exclusive
        },
        permits: None,
        holder: holder.and_then(|json| serde_json::from_str(&json).ok()),
        fencing_token: token.map(|token| rows::token(token, what)).transpose()?,
        // It lasts as long as the holder's session.
        expires_in: None,
        name,
        waiters: Waiters::Unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_the_server_cannot_enforce_are_refused_by_name() {
        assert_eq!(idle_timeout_ms(Duration::from_millis(1)).unwrap(), "1");
        assert_eq!(
            idle_timeout_ms(MAX_ADVISORY_LEASE).unwrap(),
            (MAX_ADVISORY_LEASE.as_millis()).to_string()
        );
        let error = idle_timeout_ms(MAX_ADVISORY_LEASE + Duration::from_millis(1)).unwrap_err();
        assert!(
            matches!(&error, Error::InvalidConfig { field, reason }
                if field == "lease" && reason.contains("32767s")),
            "{error}"
        );
        // Far past i32::MAX milliseconds too.
        assert!(idle_timeout_ms(Duration::from_secs(30 * 86_400)).is_err());
    }
}

//! Transaction locks: a lock taken inside a transaction the caller owns,
//! held until that transaction commits or rolls back, and never longer.
//!
//! ```no_run
//! use std::time::Duration;
//! use distlock_postgres::xact::{XactLocks, XactOptions};
//!
//! # async fn run(db: &mut distlock_postgres::tokio_postgres::Client) -> distlock_core::Result<()> {
//! // The same URL as the advisory-mode clients it must exclude (table,
//! // schema and advisory_class); `mode=advisory` is the default here.
//! let locks = XactLocks::open("postgres://app@pgbouncer:6432/app").await?;
//!
//! let tx = db.transaction().await.expect("BEGIN");
//! let grant = locks
//!     .lock(&tx, "reports/42", XactOptions::new().wait(Duration::from_secs(5)))
//!     .await?;
//! // … work in `tx`, writing `grant.fencing_token()` to what the lock guards …
//! tx.commit().await.expect("COMMIT"); // the lock ends here, with the work
//! # Ok(()) }
//! ```
//!
//! With the `sqlx` feature, the same calls take `&mut sqlx::Transaction<'_,
//! Postgres>` (or a `&mut PgConnection` inside a transaction block): see
//! [`InTransaction`].
//!
//! # When to use it
//! When the work the lock guards is a database transaction of your own,
//! and the lock should end exactly when that work commits or is undone.
//! It cannot leak: PostgreSQL ends it with the transaction, whatever
//! becomes of the process or the connection. It works behind PgBouncer in
//! transaction mode, where advisory mode's session locks cannot, since it
//! lives in the transaction, which PgBouncer keeps on one server
//! connection. It has no lease, no extension and no loss signal: none is
//! needed while the transaction lasts, and its end is the release. Lease
//! mode suits work that is not one transaction, and holds a lock across
//! many; advisory mode holds one on a connection of its own
//! (`docs/postgres.md`, *Which mode*, compares the three).
//!
//! # Advisory mode's lock, held by a transaction
//! A name's transaction lock is advisory mode's lock of that name: the
//! same two-`int4` key (`advisory_class`, and the name's `objid` from the
//! same token table), taken with `pg_advisory_xact_lock` for a writer and
//! `pg_advisory_xact_lock_shared` for a reader, where advisory mode takes
//! `pg_try_advisory_lock` and `pg_try_advisory_lock_shared`. So a
//! transaction lock and an advisory-mode grant of the same name, on the
//! same table and class, exclude each other as two grants of one mode do:
//! a writer excludes everyone, readers share. Open [`XactLocks`] with the
//! URL your advisory-mode clients use (its `table`, `schema` and
//! `advisory_class`); lease mode's locks are another thing, and a URL with
//! `mode=lease` is refused.
//!
//! Locks of one transaction are re-entrant, as PostgreSQL's are: taking a
//! name twice holds it once, until the end.
//!
//! # Fencing tokens
//! Each grant raises the name's token in the token table exactly as an
//! advisory-mode grant does, `greatest(previous + 1, server time in µs)`,
//! so a transaction lock's token is above the token of every earlier grant
//! of the name, in advisory mode and as a transaction lock, readers'
//! included, and the next grant's is above it. [`XactGrant::fencing_token`]
//! gives it.
//!
//! **The token is raised outside your transaction**, on a pooled
//! connection of [`XactLocks`]'s, in a statement that commits at once,
//! once the lock is granted in your transaction and before the call
//! returns. Raising it in your transaction would have been the obvious
//! design, and it is not safe:
//!
//! - *A rolled-back raise can give the same token twice.* A transaction can
//!   be rolled back without its holder's knowledge: the server ends the
//!   connection of a holder cut off from it (or an administrator ends it),
//!   rolls its transaction back and frees the lock, while the holder's
//!   process runs on and writes to the resource the lock guards. Its
//!   raise is undone with the rest, so the next grant computes its token
//!   from the same previous one, and gets the same value whenever the
//!   counter runs ahead of the server's clock (more than one grant a
//!   microsecond, or a clock set back). A resource that accepts a token
//!   equal to the highest it has seen, as [`crate::fencing`] does so that
//!   one holder can write twice, would then let the stale holder and the
//!   new one both write: the very case fencing is for. "Nothing committed
//!   under it" holds only for writes inside this database's transaction,
//!   which need no token; the token exists for writes elsewhere.
//! - *A raise holds the name's row until the transaction ends.* Every
//!   other grant of the name raises on that row: a second reader, in a
//!   transaction or in advisory mode, would wait for the first reader's
//!   transaction to end. Shared locks would not overlap.
//! - *A name's first grant makes its row*, which other sessions would not
//!   see until the transaction commits, and whose key they would wait for.
//!
//! Raised on the pool, a token is never given twice, whatever becomes of
//! the transaction: a rolled-back transaction leaves a gap in the tokens,
//! nothing more. The token is still above every earlier grant's: each
//! earlier holder raised its own while it held the lock, before
//! releasing it, and this raise comes after this grant. It costs one
//! statement on the pool per grant, and a URL for [`XactLocks`] to open
//! that pool with. Lease mode keeps tokens in its own table: they are not
//! compared with these.
//!
//! A raise that finds the name's row gone, or made again under another
//! key, since the call read the key (others released the name and its
//! row was deleted in between), undoes the lock, which was taken on a key
//! that is no longer the name's, and the call starts again.
//!
//! # Waiting
//! [`XactOptions::wait`] bounds the wait by the server's `lock_timeout`,
//! set for the lock's one statement: the caller's value is put back in
//! the same statement, and the statement runs under a savepoint of its
//! own. A wait that runs out rolls back to that savepoint and answers
//! [`Error::Timeout`] with the name and the wait: the transaction is as it
//! was before the call, usable, its `lock_timeout` unchanged. A wait of
//! [`Duration::ZERO`] tries once (`pg_try_advisory_xact_lock`), as does
//! [`XactLocks::try_lock`], which answers `Ok(None)` instead. Without a
//! bound the lock waits until it is granted. Waiters wait in the server's
//! own queue, in order, and a writer waiting there keeps new readers out,
//! advisory mode's too; readers do not wait for advisory-mode writers,
//! which wait outside the server.
//!
//! Any other failure of the lock's statement (a deadlock, your
//! `statement_timeout`) rolls back to the savepoint too, so the
//! transaction stays usable; a call in a transaction that is already
//! aborted, or outside any, fails at once with
//! [`Error::InvalidConfig`] naming `transaction`.
//!
//! # Cancel safety
//! Dropping the future of [`XactLocks::lock`] or [`XactLocks::try_lock`]
//! leaves the caller's transaction in an unknown state: it may hold the
//! lock (without a grant to show for it), be inside this call's
//! savepoint, or still be running the lock's statement, which the
//! connection answers before anything sent after it. With
//! `tokio-postgres` the connection stays usable and discards that answer.
//! `sqlx` reads it before the connection's next statement, which then
//! fails once with that statement's error (57014 when it was cancelled,
//! below); sqlx 0.8's pool closes such a connection as it comes back, which
//! ends the transaction too. **Roll the transaction back** (drop it):
//! that ends everything the call took. A
//! statement still waiting for the lock is cancelled in the background
//! (`pg_cancel_backend`, from a pooled connection, only while the
//! transaction's server process waits for this lock's key), so the
//! rollback does not wait for the lock to come. That takes the same
//! role as the caller's connection, or membership in
//! `pg_signal_backend`; without it, the statement ends when the lock
//! comes or its `lock_timeout` runs out, and the rollback frees the lock
//! then. A token may have been raised for a grant that nobody received: a
//! gap, never a repeat.
//!
//! # PgBouncer
//! Both the caller's transaction and [`XactLocks`]'s pool may go through
//! PgBouncer in transaction mode. The lock's statements are sent unnamed,
//! and keep no session state past the transaction (the `lock_timeout` is
//! the transaction's own, put back); the pool looks for a pooler as it
//! opens and then sends its statements unnamed, as lease mode does.
//!
//! # What else to know
//! - The end of a transaction lock notifies nobody (a notification would
//!   make your commit wait for the server's notification queue):
//!   advisory-mode waiters of the name find it free at their next poll,
//!   within a second; transaction-lock waiters are granted at once.
//! - `list` on an advisory-mode backend of the same table and class shows
//!   transaction locks too, with their tokens and holders; a forced
//!   release of the name ends the connections holding it, transactions'
//!   included.
//! - Names used only by transaction locks keep a row in the token table
//!   while they are used: [`XactLocks`] sweeps unused rows about once a
//!   minute, as an advisory-mode backend does.

mod driver;
#[cfg(feature = "sqlx")]
mod driver_sqlx;
mod statements;
mod waiting;

use std::fmt;
use std::time::Duration;

use distlock_core::{Error, Holder, IntoLockName, LockName, Result};
use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use self::driver::Failure;
pub use self::driver::InTransaction;
use self::statements::{KEEP, OPEN, Statements, UNDO};
use self::waiting::CancelOnDrop;
use crate::advisory::keys::{self, Runner};
use crate::config::{Mode, PostgresConfig};
use crate::error::{from_driver, within};
use crate::pool::{Connections, SETUP_TIMEOUT};
use crate::rows::{self, get, holder_json};
use crate::sweep::{Sweep, Sweeper};
use crate::table::{self, Layout};

/// How long each statement [`XactLocks`] runs on its pool may take by
/// default: reading or giving a name's key, raising its token, cancelling
/// a dropped wait. See [`XactLocks::operation_timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times one call takes the lock: each time past the first, the
/// name's row was deleted between the read of its key and the grant.
const MAX_TAKES: usize = 3;

/// The longest wait `lock_timeout` takes, in milliseconds.
const MAX_WAIT_MS: u128 = i32::MAX as u128;

/// Whether a transaction lock is a writer's or a reader's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum XactKind {
    /// A writer's: excludes every other holder of the name.
    #[default]
    Exclusive,
    /// A reader's: shared with other readers, excluded by a writer.
    Shared,
}

/// How to take a transaction lock: its kind, and how long to wait.
///
/// By default a writer's lock that waits without a bound. A
/// [`Duration`] converts into options that wait that long for a writer's
/// lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XactOptions {
    kind: XactKind,
    wait: Option<Duration>,
}

impl XactOptions {
    /// A writer's lock, waiting without a bound.
    pub fn new() -> Self {
        Self::default()
    }

    /// A reader's lock instead.
    #[must_use]
    pub fn shared(mut self) -> Self {
        self.kind = XactKind::Shared;
        self
    }

    /// Waits at most `limit` (the server's `lock_timeout`, in whole
    /// milliseconds, rounded up); [`Duration::ZERO`] tries once. Longer
    /// than `i32::MAX` milliseconds (some 24 days) is refused when the
    /// lock is taken.
    #[must_use]
    pub fn wait(mut self, limit: Duration) -> Self {
        self.wait = Some(limit);
        self
    }

    /// The kind of lock.
    pub fn kind(&self) -> XactKind {
        self.kind
    }

    /// The longest wait, `None` for no bound.
    pub fn wait_limit(&self) -> Option<Duration> {
        self.wait
    }
}

impl From<Duration> for XactOptions {
    fn from(limit: Duration) -> Self {
        Self::new().wait(limit)
    }
}

/// A transaction lock, held until its transaction ends.
///
/// Nothing to release: the commit or the rollback of the transaction it
/// was taken in ends it, and dropping this changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XactGrant {
    name: LockName,
    kind: XactKind,
    fencing_token: u64,
}

impl XactGrant {
    /// The name held.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// A writer's or a reader's.
    pub fn kind(&self) -> XactKind {
        self.kind
    }

    /// The grant's fencing token: above every earlier grant's of the name,
    /// in advisory mode and as a transaction lock, and below every later
    /// one's (see [Fencing tokens](self#fencing-tokens)).
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }
}

/// Takes transaction locks: locks held by a transaction the caller owns
/// (see the [module documentation](self)).
///
/// It keeps a small pool of its own to the same database, for what must
/// commit outside the caller's transaction: giving names their keys and
/// raising their tokens. Cheap to share: hold one per database and table,
/// behind an `Arc` if need be.
pub struct XactLocks {
    connections: Connections,
    statements: Statements,
    class: i32,
    holder: String,
    operation_timeout: Duration,
    shown: String,
    _sweeper: Sweeper,
}

impl fmt::Debug for XactLocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XactLocks")
            .field("url", &self.shown)
            .field("advisory_class", &self.class)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl XactLocks {
    /// Opens transaction locks on the server at `url`, read as advisory
    /// mode reads it ([`PostgresConfig::parse`], with `mode=advisory` the
    /// default): its token table (`table`, `schema`), created if missing,
    /// and its key class (`advisory_class`). `fair` and `listen_url` mean
    /// nothing here. Each step takes [`SETUP_TIMEOUT`] at most.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed URL, for `mode=lease`
    /// (transaction locks are advisory mode's locks), or for a table of that
    /// name that distlock did not make for advisory mode; [`Error::Denied`]
    /// for refused credentials or privileges; a backend error when the
    /// server cannot be reached.
    ///
    /// # Cancel safety
    /// Dropping the future leaves at most the table created.
    pub async fn open(url: &str) -> Result<Self> {
        let config = PostgresConfig::parse_with_mode(url, Mode::Advisory)?;
        if config.mode != Mode::Advisory {
            return Err(Error::config(
                "mode",
                "transaction locks are advisory mode's locks, on its keys and its token \
                 table: give the URL of your advisory-mode clients, with mode=advisory or \
                 no mode",
            ));
        }
        let (endpoint, _) = config.endpoints()?;
        let what = format!("connecting to {}", config.redacted_url());
        let (client, connection) = within(&what, SETUP_TIMEOUT, endpoint.connect())
            .await?
            .map_err(|error| from_driver(&what, error))?;
        let connection = tokio::spawn(connection);
        let ready = table::ensure(&client, &config.table, Layout::Advisory, SETUP_TIMEOUT).await;
        drop(client);
        connection.abort();
        ready?;
        let connections = Connections::new(endpoint)?;
        connections
            .prepare_unless_pooled(config.advisory_class, SETUP_TIMEOUT)
            .await?;
        let statements = Statements::new(&config.table);
        let sweep = Sweep::advisory(
            connections.clone(),
            statements.sweep.clone(),
            config.advisory_class,
        );
        Ok(Self {
            connections,
            statements,
            class: config.advisory_class,
            holder: holder_json(&Holder::this_process(None)),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            shown: config.redacted_url().to_owned(),
            _sweeper: sweep.start(),
        })
    }

    /// Bounds each statement run on the pool (reading or giving a name's
    /// key, raising its token) by `limit` instead of
    /// [`DEFAULT_OPERATION_TIMEOUT`]. The lock's own wait in the caller's
    /// transaction is [`XactOptions::wait`]'s.
    #[must_use]
    pub fn operation_timeout(mut self, limit: Duration) -> Self {
        self.operation_timeout = limit;
        self
    }

    /// Takes `name` in `tx`'s transaction as `options` say (a
    /// [`Duration`] converts into a writer's lock waiting that long),
    /// until that transaction ends.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait ran out, the transaction then
    /// usable as before the call; [`Error::InvalidName`] for an invalid
    /// name; [`Error::InvalidConfig`] naming `wait` for a wait longer than
    /// `i32::MAX` milliseconds, or naming `transaction` when `tx` is not
    /// in a transaction or its transaction is aborted; a backend error
    /// otherwise (the lock's statement failed, the transaction then rolled
    /// back to the savepoint and usable; or the pool's statement did).
    /// [`Error::Denied`] for missing privileges.
    ///
    /// # Cancel safety
    /// Not cancel safe: see [Cancel safety](self#cancel-safety). After
    /// dropping the future, roll the transaction back.
    pub async fn lock<T: InTransaction>(
        &self,
        tx: T,
        name: impl IntoLockName,
        options: impl Into<XactOptions>,
    ) -> Result<XactGrant> {
        let options = options.into();
        let name = name.into_lock_name()?;
        let wait = match options.wait {
            None => Some("0".to_owned()),
            Some(Duration::ZERO) => None,
            Some(limit) => Some(lock_timeout_ms(limit)?),
        };
        match self.take(tx, &name, options.kind, wait.as_deref()).await? {
            Some(grant) => Ok(grant),
            None => Err(Error::Timeout {
                name: name.to_string(),
                waited: options.wait.unwrap_or_default(),
                last_error: None,
            }),
        }
    }

    /// Tries once to take `name` as `kind` in `tx`'s transaction, until
    /// that transaction ends: `Ok(None)` when it is held otherwise.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), without the timeout.
    ///
    /// # Cancel safety
    /// As [`lock`](Self::lock).
    pub async fn try_lock<T: InTransaction>(
        &self,
        tx: T,
        name: impl IntoLockName,
        kind: XactKind,
    ) -> Result<Option<XactGrant>> {
        let name = name.into_lock_name()?;
        self.take(tx, &name, kind, None).await
    }

    /// Takes the lock under a savepoint, waiting with `lock_timeout` (or
    /// trying once without it), and raises its token on the pool: the
    /// grant, or `None` when the wait ran out or the try failed, the
    /// savepoint then rolled back.
    async fn take<T: InTransaction>(
        &self,
        mut tx: T,
        name: &LockName,
        kind: XactKind,
        lock_timeout: Option<&str>,
    ) -> Result<Option<XactGrant>> {
        let shared = kind == XactKind::Shared;
        let sql = self.statements.take(shared, lock_timeout.is_some());
        let started = Instant::now();
        for _ in 0..MAX_TAKES {
            let objid = self.key(name).await?;
            let pid = tx.open(OPEN).await.map_err(opening)?;
            let waiting = CancelOnDrop::arm(
                &self.connections,
                self.statements.cancel_wait,
                (self.class, objid),
                pid,
                self.operation_timeout,
            );
            let taken = tx.take(sql, self.class, objid, lock_timeout).await;
            waiting.disarm();
            match taken {
                Ok(true) => {}
                Ok(false) => {
                    undo(&mut tx).await?;
                    return Ok(None);
                }
                Err(failure) if failure.is(&SqlState::LOCK_NOT_AVAILABLE) => {
                    undo(&mut tx).await?;
                    return Ok(None);
                }
                Err(failure) => {
                    undo(&mut tx).await?;
                    return Err(failure.error);
                }
            }
            let raised = self.raise(name, objid, pid, shared).await;
            match raised {
                Ok(Some(fencing_token)) => {
                    tx.batch(KEEP).await.map_err(|failure| failure.error)?;
                    return Ok(Some(XactGrant {
                        name: name.clone(),
                        kind,
                        fencing_token,
                    }));
                }
                // The key is no longer the name's: undone, and again.
                Ok(None) => undo(&mut tx).await?,
                Err(error) => {
                    undo(&mut tx).await?;
                    return Err(error);
                }
            }
        }
        Err(Error::Backend {
            backend: "postgres",
            message: format!(
                "taking {name} in a transaction: the name's row was deleted under each of \
                 {MAX_TAKES} grants in {:?}",
                started.elapsed()
            ),
            source: None,
        })
    }

    /// The name's `objid`, given it first if it has none, on the pool.
    async fn key(&self, name: &LockName) -> Result<i32> {
        let what = format!("reading the advisory key of {name}");
        let bytes = name.as_str().as_bytes();
        for asked in 1..=MAX_TAKES {
            let rows = self
                .connections
                .query(
                    &what,
                    &self.statements.key,
                    &[(&bytes, Type::BYTEA)],
                    self.operation_timeout,
                )
                .await?;
            if let Some(row) = rows.first() {
                return get(row, 0, &what);
            }
            if asked < MAX_TAKES {
                keys::allocate(
                    Runner::Pool(&self.connections),
                    &self.statements.insert_key,
                    name,
                    self.operation_timeout,
                )
                .await?;
            }
        }
        Err(Error::Backend {
            backend: "postgres",
            message: format!("{what}: its row was deleted each time it was made"),
            source: None,
        })
    }

    /// Raises the name's token for a grant held by server process `pid`
    /// on `objid`, on the pool: the token, or `None` when the name's row
    /// no longer has that key.
    async fn raise(
        &self,
        name: &LockName,
        objid: i32,
        pid: i32,
        shared: bool,
    ) -> Result<Option<u64>> {
        let what = format!("raising the fencing token of {name}");
        let bytes = name.as_str().as_bytes();
        let rows = self
            .connections
            .query(
                &what,
                self.statements.raise(shared),
                &[
                    (&bytes, Type::BYTEA),
                    (&objid, Type::INT4),
                    (&pid, Type::INT4),
                    (&self.holder, Type::TEXT),
                ],
                self.operation_timeout,
            )
            .await?;
        let token: Option<i64> = match rows.first() {
            Some(row) => get(row, 0, &what)?,
            None => None,
        };
        token.map(|token| rows::token(token, &what)).transpose()
    }
}

/// `limit` as `lock_timeout` takes it: whole milliseconds, rounded up.
fn lock_timeout_ms(limit: Duration) -> Result<String> {
    let ms = limit.as_nanos().div_ceil(1_000_000).max(1);
    if ms > MAX_WAIT_MS {
        return Err(Error::config(
            "wait",
            format!(
                "{limit:?} is longer than lock_timeout takes ({MAX_WAIT_MS} ms); \
                 leave the wait unset to wait without a bound"
            ),
        ));
    }
    Ok(ms.to_string())
}

/// The savepoint could not be opened: outside a transaction block, or in
/// an aborted transaction, the caller's to fix; anything else, the
/// driver's error.
fn opening(failure: Failure) -> Error {
    let reason = if failure.is(&SqlState::IN_FAILED_SQL_TRANSACTION) {
        "the transaction is aborted (an earlier statement in it failed): roll it back, \
         or back to a savepoint of yours, before taking a lock in it"
    } else if failure.is(&SqlState::NO_ACTIVE_SQL_TRANSACTION) {
        "the connection is not in a transaction block: a transaction lock needs one \
         (BEGIN, or the driver's transaction)"
    } else {
        return failure.error;
    };
    Error::config("transaction", reason)
}

/// Rolls back to the lock's savepoint and closes it: whatever the call
/// did in the transaction is undone, and the transaction is usable again.
async fn undo<T: InTransaction>(tx: &mut T) -> Result<()> {
    tx.batch(UNDO).await.map_err(|failure| match failure.error {
        Error::Backend {
            backend,
            message,
            source,
        } => Error::Backend {
            backend,
            message: format!("{message}; the transaction's state is unknown: roll it back"),
            source,
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_whole_milliseconds_rounded_up_within_lock_timeouts_range() {
        assert_eq!(lock_timeout_ms(Duration::from_micros(1)).unwrap(), "1");
        assert_eq!(
            lock_timeout_ms(Duration::from_millis(1500)).unwrap(),
            "1500"
        );
        assert_eq!(lock_timeout_ms(Duration::from_micros(1500)).unwrap(), "2");
        assert_eq!(
            lock_timeout_ms(Duration::from_millis(MAX_WAIT_MS as u64)).unwrap(),
            MAX_WAIT_MS.to_string()
        );
        let error = lock_timeout_ms(Duration::from_millis(MAX_WAIT_MS as u64 + 1)).unwrap_err();
        assert!(
            matches!(&error, Error::InvalidConfig { field, .. } if field == "wait"),
            "{error}"
        );
    }

    #[test]
    fn options_default_to_a_writer_that_waits_without_a_bound() {
        let options = XactOptions::new();
        assert_eq!(
            (options.kind(), options.wait_limit()),
            (XactKind::Exclusive, None)
        );
        let options = XactOptions::from(Duration::from_secs(1)).shared();
        assert_eq!(
            (options.kind(), options.wait_limit()),
            (XactKind::Shared, Some(Duration::from_secs(1)))
        );
    }
}

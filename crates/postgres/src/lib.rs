//! distlock's PostgreSQL backend: one row per lock, changed by single
//! statements judged against the server's clock (`mode=lease`, the
//! default), or session advisory locks on a connection pinned to each
//! grant (`mode=advisory`); and, beside them, locks held by a transaction
//! of your own until it ends ([`xact`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use distlock_core::LockClient;
//! use distlock_postgres::PostgresBackend;
//!
//! # async fn run() -> distlock_core::Result<()> {
//! let backend = PostgresBackend::open("postgres://app:secret@db:5432/app?table=locks").await?;
//! let client = LockClient::builder().build(backend)?;
//! let guard = client
//!     .acquire_with("nightly-report", Duration::from_secs(10))
//!     .await?;
//! // … work, passing guard.fencing_token() to what the lock protects …
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! How it works (the lock table and its statements, the deletion of
//! unused rows, the record of terms, release wake-ups, advisory mode's
//! connections and keys, fair mode's line in each mode), which mode to
//! choose, and what the modes cost is in `docs/postgres.md` in the
//! repository; this page says what a caller can rely on.
//!
//! # Opening
//! `postgres://` or `postgresql://`, as libpq reads it. distlock reads the
//! options below itself and passes every other one to the driver
//! (`connect_timeout`, `application_name`, `host`, …):
//!
//! | option | default | meaning |
//! | --- | --- | --- |
//! | `table` | `distlock_locks`; `distlock_advisory` in advisory mode | the lock table, or advisory mode's token table |
//! | `schema` | `public` | its schema, created if missing |
//! | `mode` | `lease` | `lease` or `advisory` (see [Advisory mode](#advisory-mode)) |
//! | `advisory_class` | [`DEFAULT_ADVISORY_CLASS`] (1684799488) | advisory mode's key class, 0 to 2147483647 |
//! | `fair` | `false` | `true` for fair mode: whole locks go to waiters in the order they asked (see [Fair mode](#fair-mode)) |
//! | `listen_url` | the main URL | where the connection that listens for releases goes: a direct connection to the same server and database (see [Release wake-ups](#release-wake-ups)) |
//! | `sslmode` | `prefer` | whether and how to use TLS: `disable`, `prefer`, `require`, `verify-ca` or `verify-full` (see [TLS](#tls)) |
//! | `sslrootcert` | none | a PEM file of trusted CA certificates, or `system` for the public CAs |
//!
//! The user, the password and secret options never appear in errors, logs
//! or `Debug` output.
//!
//! # TLS
//! `sslmode` and `sslrootcert` mean what they mean to libpq, and apply to
//! every connection of the backend: the pool's, the listening connection
//! and advisory mode's sessions (a `listen_url` without TLS options of its
//! own uses the main URL's).
//!
//! | `sslmode` | TLS | the server's certificate |
//! | --- | --- | --- |
//! | `disable` | never | not looked at |
//! | `prefer` (default) | when the server offers it, else plain TCP | not checked; with `sslrootcert`, checked as by `verify-ca` |
//! | `require` | always: no connection without it | not checked; with `sslrootcert`, checked as by `verify-ca` |
//! | `verify-ca` | always | signed by a CA in `sslrootcert`, which it needs; any host name |
//! | `verify-full` | always | signed by a CA in `sslrootcert` (the public CAs without it), and issued for the host in the URL |
//!
//! A certificate that is not checked still encrypts the connection, which
//! stops eavesdroppers but not someone who can redirect it: use
//! `verify-full` across networks you do not trust. For a private CA, give
//! its certificate: `?sslmode=verify-full&sslrootcert=/etc/distlock/ca.pem`
//! (a path in the query needs escaping only if it holds `&`, `%` or `+`).
//! `sslrootcert=system` trusts the public CAs (Mozilla's list, built
//! in, not the operating system's store) and, as in libpq, allows only
//! `verify-full`, which it makes the default. The host name checked is the
//! URL's `host` (a name or an IP address), even when `hostaddr` says where
//! to connect. Connections over a Unix-domain socket never use TLS, as
//! with libpq.
//!
//! Mistakes are found when the backend opens: an unknown `sslmode`,
//! `verify-ca` without `sslrootcert`, or an `sslrootcert` that cannot be
//! read or holds no certificate is [`Error::InvalidConfig`](distlock_core::Error::InvalidConfig)
//! naming the option; a server that offers no TLS when the mode requires
//! it, or whose certificate fails the checks, is a backend error that says
//! which check failed and what to change. Client certificates (`sslcert`,
//! `sslkey`) and revocation lists (`sslcrl`) are not supported, and are
//! refused by name. TLS is rustls's, with the *ring* provider.
//!
//! # What a caller can rely on
//! In lease mode, and in advisory mode except where
//! [Advisory mode](#advisory-mode) says otherwise:
//! - **The server's clock decides.** A grant lives while its expiry is
//!   after the server's `clock_timestamp()`, never the client's clock;
//!   every decision is one statement.
//! - **Every kind of claim.** A name can be a lock, a reader-writer lock
//!   (at most 1,000 readers; a waiting writer keeps later readers out) or a
//!   semaphore. A name held as another kind, or as a semaphore of another
//!   limit, is
//!   [`Error::KindConflict`](distlock_core::Error::KindConflict).
//! - **Only the holder extends or releases** a grant: both act only on a
//!   live grant with its random identity.
//! - **Fencing tokens** are `greatest(previous + 1, server time in µs)` at
//!   each grant of any kind, so they keep increasing even after a name's
//!   row was deleted, as long as the server's clock never runs backwards.
//! - **Unused names cost nothing.** A name's row lasts only while it is
//!   used (a live grant or waiting writer; in advisory mode, a session on
//!   its key), so names used once (one per order, per user, per job) do
//!   not grow the table, nor the work of `list`, without bound. Rows are
//!   deleted by the release that leaves them unused and by a sweep about
//!   once a minute; [`PostgresBackend::remove_idle_rows`] sweeps on demand.
//!   A deletion never takes a row from a holder or a waiter.
//! - **It works through PgBouncer in transaction mode.** Lease mode keeps
//!   no session state on pooled connections behind it and sends every
//!   statement unnamed, through [`tokio_postgres`], from a small pool
//!   ([`deadpool_postgres`], 16 connections at most per backend). It
//!   looks for such a pooler as it opens; without one, it prepares each
//!   statement once per connection, as advisory mode does. Release
//!   wake-ups need a connection that PgBouncer does not pool: see
//!   `listen_url` and [Release wake-ups](#release-wake-ups).
//! - **Timeouts.** Each statement waits at most the request's operation
//!   timeout for a connection and its answer; a connection whose statement
//!   was abandoned is closed, never reused.
//!
//! # Release wake-ups
//! A release, a forced release and the end of a waiting writer's wait
//! wake the waiters of that name in every process (`LISTEN`/`NOTIFY`, on a
//! connection of each backend's own, outside the pool, to `listen_url`
//! when given, else to the main URL). [`PostgresBackend::wake_ups`] says
//! where that connection stands, and [`PostgresBackend::wake_up_queue`]
//! how its queue has fared. Until the connection is trusted, and while a
//! failed one is being opened again, waits poll, at least once a second
//! for a wait that was relying on wake-ups, so a lost notification delays
//! a waiter and never strands it. Through PgBouncer in transaction mode,
//! which accepts `LISTEN` and then loses the notifications, the backend
//! logs a warning after three tries, stops listening, offers no
//! [`wakeups`](distlock_core::backend::Abilities::wakeups), and waits
//! poll; a `listen_url` pointing straight at the server behind PgBouncer
//! gives the wake-ups back. A lease that runs out notifies nobody.
//!
//! # Server restarts and failover
//! In lease mode, locks are rows, so they outlive a restart of the server; a holder whose
//! extensions resume within its lease keeps its lock, and fencing tokens
//! keep increasing. A failover to an asynchronous standby can lose the
//! latest grants. In advisory mode a restart or a failover ends every
//! session, and every lock with it: each holder's `lost()` fires at once;
//! tokens, kept in the token table, keep increasing. Advisory mode's writes
//! commit without waiting for the disk, so a crash may lose the latest
//! tokens; the next one is still above them unless the server's clock was
//! set back across the crash by more than the server was down
//! (`docs/postgres.md`, *Tokens across a crash*).
//!
//! # Election terms
//! Each grant won by [`Election::campaign`](distlock_core::Election::campaign)
//! is recorded as a term in the same statement as the grant, so that
//! [`Election::observe`](distlock_core::Election::observe) returns every
//! leader, the short-lived ones too, in both modes. Plain acquires pay
//! nothing for it. The record is a table beside the mode's own, in its
//! schema: its name with `_terms` added (`distlock_locks_terms`,
//! `distlock_advisory_terms`; a name too long for that is cut and a hash
//! of it added), created when the backend opens. An election's row keeps
//! its last [`TERMS_KEPT`](distlock_core::backend::TERMS_KEPT) terms and
//! stays when the lock's row goes, so that an observer still reads the
//! last terms of an election nobody leads: delete the row of an election
//! you retire.
//!
//! A backend whose role may use the lock table but not create the table
//! of terms beside it still locks, and says so in a warning when it opens;
//! but it keeps no record: observing is `Unsupported`, and a campaign is
//! refused with [`Error::Denied`](distlock_core::Error::Denied), rather
//! than won unrecorded, which observers elsewhere would miss. Open a
//! backend once as a role that may create the table, then this one again.
//!
//! # Fair mode
//! With `fair=true`, whole locks go to waiters in the order they asked,
//! across processes and within one (see
//! [`Capabilities::fair`](distlock_core::backend::Capabilities::fair)).
//! Readers are not covered; a waiting writer keeps new readers out, as
//! without it. A single try never jumps the line: it fails while anyone
//! holds or waits. Off by default, and then nothing changes.
//! - **In lease mode** the line is kept in the lock's row, and the release
//!   grants the first place in its own statement. A waiter that died drops
//!   out a lease after its last attempt, and a grant made to it is passed
//!   on when the place's lease runs out. A client without `fair=true` on
//!   the same table takes no place and hands nothing on: the name is then
//!   free to whoever asks first, until a waiter's next attempt passes it
//!   on.
//! - **In advisory mode** the line is PostgreSQL's own queue of the name's
//!   key, in the order the waiters' statements reached the server. A
//!   wait's first attempt answers only once the server shows its place in
//!   that queue, so a waiter that asks after another was told to wait is
//!   served after it. A waiter costs a connection of its own for the whole
//!   wait, and no statement past the look that sees its place. A
//!   waiter that dies, or stops, holds the line up for a lease at most. A
//!   wait longer than ten leases may lose its turn, once per ten leases.
//!   A waiting statement holds back vacuum's horizon while it waits, as any
//!   running statement does.
//!
//! In fair mode, [`LockClient::list`](distlock_core::LockClient::list)
//! shows each lock's waits for the whole lock in line order
//! ([`Waiters::WholeLock`](distlock_core::Waiters::WholeLock)): readers
//! keep no place, in either mode, and wait unlisted. Lease mode lists the
//! places in the lock's row, with their holders. Advisory mode lists the
//! writers in the server's queue of the name's key, in the order the
//! server will grant them, with how long each has waited by the server's
//! clock, and the host, pid and label that the waiting connection's
//! `application_name` carries while it waits (cut to the 63 bytes the
//! server keeps of it); a transaction lock's writer waiting for the name
//! is listed too, without them.
//!
//! Without `fair=true`, lease mode still lists the waiting writers
//! ([`Waiters::WholeLock`](distlock_core::Waiters::WholeLock)): each
//! leaves a mark in the lock's row that keeps later readers out, and the
//! mark records its host, pid and label and when its wait began by the
//! server's clock. The marks keep no line: whichever writer asks first
//! after a release is served, so they are listed in the order the waits
//! began, and
//! [`WaiterList::serves_in_order`](distlock_core::backend::WaiterList::serves_in_order)
//! is `false` there. Advisory mode without `fair=true` keeps nothing of
//! its waiters: each asks on its own, and they are
//! [`Waiters::Unknown`](distlock_core::Waiters::Unknown).
//!
//! # Advisory mode
//! `mode=advisory` holds each grant as a session advisory lock, the locks
//! sqlx's `PgAdvisoryLock` takes, with distlock's waiting, timeouts,
//! cancellation and loss signal. It needs PostgreSQL 14 or later; opening
//! refuses an older server.
//!
//! - **A connection per grant.** Each grant lives on a connection of its
//!   own, outside the pool, for its whole life; the lock ends when that
//!   connection does. So each lock held, and each waiting writer, costs a
//!   server connection: a process that holds many locks at once needs as
//!   many of the server's `max_connections`.
//! - **Losses.** A connection that ends (terminated by an administrator,
//!   a server restart, a network error) makes the grant's
//!   [`lost`](distlock_core::LockGuard::lost) fire at once. A holder cut
//!   off from the server gives the lock up within the lease less the safety
//!   margin, and the server frees the lock a lease after the holder's last
//!   check, never before. So locks in this mode are not
//!   [process-bound](distlock_core::backend::Capabilities::process_bound):
//!   they expire like leases when their holder stops checking them. A
//!   lease longer than [`MAX_ADVISORY_LEASE`] is refused with
//!   `InvalidConfig` naming `lease` (exit 2 from the CLI), rather than
//!   left unenforced.
//! - **No `min_hold`.** A lock cannot be kept after its release, since it
//!   ends with its connection: an acquire with
//!   [`min_hold`](distlock_core::AcquireOptions::min_hold) fails at once
//!   with `Unsupported`. Lease mode offers it.
//! - **Keys.** A name's lock is the two-`int4` key (`advisory_class`,
//!   objid), and distinct names never share a key. Give distlock a class
//!   that nothing else uses (the application's own advisory locks), and
//!   one class per token table (two tables in one class would give
//!   different names the same key). The one-`bigint` key form is a
//!   different key space, never ours.
//! - **Readers and writers.** Writers are not starved: a waiting writer
//!   keeps new readers out.
//! - **Semaphores** are not offered: asking for a permit is
//!   [`Error::Unsupported`](distlock_core::Error::Unsupported). Use
//!   `mode=lease`.
//! - **`list`** shows every holder in the class, each with its kind, token
//!   and holder; a lock lasts as long as its holder's connection, so
//!   `expires_in` is `None`.
//! - **Forced releases** (`distlock release --force`) terminate every
//!   connection that holds the name's key, and the holders' `lost()` fires
//!   at once. Terminating another role's connection needs membership in
//!   `pg_signal_backend` (or to be that role); a superuser's connections
//!   only a superuser can end.
//! - **No PgBouncer in transaction mode.** A session advisory lock belongs
//!   to one server connection, which PgBouncer in transaction mode hands to
//!   other clients between transactions. Opening usually detects it, and
//!   refuses with [`Error::InvalidConfig`](distlock_core::Error::InvalidConfig)
//!   naming `mode`; a busy pooler can pass the check, so connect advisory
//!   mode straight to the server (or through PgBouncer in session mode).
//! - **Hand-overs** are not offered: a lock passes between the tasks of
//!   one client by a release and a new grant.
//!
//! # Resuming a lock
//! In lease mode, [`LockClient::resume`](distlock_core::LockClient::resume)
//! takes a grant up again after its process restarted, with the same
//! fencing token, for every claim and with or without `fair=true`. It is
//! one `UPDATE` of the name's row, checked by owner: only a grant with the
//! handle's identity, token and claim that is live by the server's
//! `clock_timestamp()` (read once the row is locked) is taken up. Its
//! identity and holder become the new client's and it lasts the new
//! client's lease from the server's now, as after an extension; its token
//! and its place among the holders, and in fair mode the line behind it,
//! stay. The old identity is gone with that write, so the process before
//! the restart, if it still runs, finds its grant gone at its next
//! extension (its `lost()` fires) and cannot release it, and a second
//! resume of the same handle is [`Error::Lost`](distlock_core::Error::Lost).
//!
//! Advisory mode cannot resume: a session advisory lock belongs to the
//! database session that took it and ends with that session, so nothing is
//! left for a restarted process to take up; `resume` answers
//! [`Error::Unsupported`](distlock_core::Error::Unsupported) saying so.
//! Nor can [transaction locks](xact), which end with their transaction.
//!
//! # Transaction locks
//! [`xact::XactLocks`] takes a name inside a transaction you own, on
//! [`tokio_postgres`] or (feature `sqlx`) on `sqlx`, and the lock ends
//! exactly when that transaction commits or rolls back. It is advisory
//! mode's lock of the name, on the same key and token table, taken with
//! `pg_advisory_xact_lock`: the two exclude each other, and its fencing
//! token is above every earlier grant's of the name in either. It works
//! through PgBouncer in transaction mode, bounds its wait with
//! `lock_timeout` under a savepoint (a timeout leaves the transaction
//! usable), and raises its token outside your transaction, so that a
//! rollback never hands a token out twice: the [`xact`] module says why,
//! and what dropping its future leaves.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod advisory;
mod backend;
mod clock;
mod config;
mod deployment;
mod error;
pub mod fencing;
mod lease;
mod pool;
mod pooler;
mod prepared;
mod rows;
mod store;
mod sweep;
mod table;
mod terms;
mod tls;
mod wake;
pub mod xact;

pub use advisory::MAX_ADVISORY_LEASE;
pub use backend::PostgresBackend;
pub use config::{
    DEFAULT_ADVISORY_CLASS, DEFAULT_ADVISORY_TABLE, DEFAULT_SCHEMA, DEFAULT_TABLE, Mode,
    PostgresConfig,
};
/// The pool this backend keeps its connections in, at the version it uses.
pub use deadpool_postgres;
#[allow(deprecated)]
pub use pool::ADMIN_TIMEOUT;
pub use pool::SETUP_TIMEOUT;
/// The driver of the transaction locks' `sqlx` support, at the version
/// they use.
#[cfg(feature = "sqlx")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
pub use sqlx;
pub use tls::SslMode;
/// The driver this backend is built on, at the version it uses.
pub use tokio_postgres;
pub use wake::{WakeUpQueue, WakeUps};

//! distlock's PostgreSQL backend: one row per lock, changed by single
//! statements judged against the server's clock.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use distlock_core::{LockClient, LockName, LockOptions};
//! use distlock_postgres::PostgresBackend;
//!
//! # async fn run() -> distlock_core::Result<()> {
//! let backend = PostgresBackend::open("postgres://app:secret@db:5432/app?table=locks").await?;
//! let client = LockClient::new(Arc::new(backend), LockOptions::default());
//! let guard = client
//!     .acquire(&LockName::new("nightly-report")?, Duration::from_secs(10))
//!     .await?;
//! // … work, passing guard.fencing_token() to what the lock protects …
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Opening
//! `postgres://` or `postgresql://`, as libpq reads it. distlock reads four
//! options of its own and passes every other one to the driver
//! (`connect_timeout`, `application_name`, `host`, …):
//!
//! | option | default | meaning |
//! | --- | --- | --- |
//! | `table` | `distlock_locks` | the lock table |
//! | `schema` | `public` | its schema, created if missing |
//! | `mode` | `lease` | `lease` is the only mode yet; `advisory` is refused as not supported |
//! | `listen_url` | the main URL | where the connection that listens for releases goes: a direct connection to the same server and database (see [Release wake-ups](#release-wake-ups)) |
//!
//! The user, the password and secret options never appear in errors, logs
//! or `Debug` output. Connections are unencrypted for now (the driver runs
//! without TLS), so reach the server over a trusted network.
//!
//! # Works through PgBouncer in transaction mode
//! The driver is [`tokio_postgres`], because it can send every statement
//! unnamed (`Client::query_typed`: Parse, Bind, Execute and Sync with an
//! unnamed statement, in one round trip). PgBouncer 1.18, Debian 12's,
//! predates prepared-statement support in transaction-pooling mode, where
//! consecutive statements may run on different server connections, so a
//! named prepared statement would go missing. The backend also keeps no
//! session state on pooled connections: no `SET`, no temporary tables, no
//! `LISTEN`, no session advisory locks. Connections come from a small
//! pool ([`deadpool_postgres`], 16 at most per backend). Release wake-ups
//! need a connection that PgBouncer does not pool: see `listen_url` below.
//!
//! # The table
//! One row per name, created with its table on first use (concurrent
//! creators are serialized by a transaction-scoped advisory lock). The
//! table's comment records the layout's version, so that a later release
//! can migrate; a table of that name that distlock did not make is refused.
//!
//! | column | value |
//! | --- | --- |
//! | `name` | `bytea` primary key: the name's exact UTF-8 bytes, NUL included |
//! | `kind` | `exclusive`, `shared` or `semaphore`: what the live holders hold |
//! | `permit_limit` | a semaphore's limit |
//! | `fencing_token` | `bigint`, the latest token granted on the name, of any kind; kept across releases |
//! | `holders` | `jsonb` array of grants, `{id, token, at, exp, holder}`, times in the server's µs since the epoch |
//! | `waiting` | `jsonb` array of waiting writers' marks, `{id, exp}` |
//!
//! # How it works
//! - **Acquire** is one `INSERT … ON CONFLICT (name) DO UPDATE … WHERE`
//!   statement: it creates the row holding our grant, or adds our grant to
//!   the row when its live holders admit us; a grant or a mark lives while
//!   its expiry is after the server's `clock_timestamp()`, never the
//!   client's clock. A writer is admitted when no holder lives, a reader
//!   when no writer holds or waits (at most 1,000 readers), a permit when
//!   fewer than its limit hold the name. An attempt that was not granted
//!   reads why in a second statement (a kind conflict, or when the first
//!   lease ends), and there a waiting writer marks itself so that later
//!   readers wait behind it.
//! - **Fencing tokens** are `greatest(previous + 1, server time in µs)` at
//!   each grant of any kind, so they keep increasing even after the row was
//!   deleted.
//! - **Extend and release** act only on a live grant with our random grant
//!   identity. Extending any number of leases is one statement.
//! - **Waiting** is woken by releases (below); without a wake-up, a waiter
//!   tries again when the first holder's lease ends, or polls with core's
//!   jittered backoff while wake-ups are off.
//! - **Timeouts.** Each statement waits at most the request's operation
//!   timeout for a connection and its answer; a connection whose statement
//!   was abandoned is closed, never reused.
//!
//! # Release wake-ups
//! A release, a forced release and the end of a waiting writer's wait
//! notify (`pg_notify`) inside their own statement, which the server sends
//! when the statement commits. A table's names are hashed onto 64
//! channels, and each backend keeps one connection of its own, outside the
//! pool, that `LISTEN`s only on the channels of the names its waiters wait
//! for: a release reaches the processes that wait for that name, or for a
//! name sharing its channel. That connection goes to `listen_url` when
//! given, else to the main URL.
//!
//! The connection is trusted once a probe notification, sent through the
//! pool as releases are, comes back over it; [`PostgresBackend::wake_ups`]
//! says where it stands. Until then, and while a failed connection is
//! being opened again (with backoff, 100 ms to 5 s), waits poll, at least
//! once a second for a wait that was relying on wake-ups, so a lost
//! notification delays a waiter and never strands it. Through PgBouncer in
//! transaction mode, which accepts `LISTEN` and then loses the
//! notifications, the probe never comes back: after three tries the
//! backend logs a warning, stops listening, reports no
//! [`release_wakeups`](distlock_core::Capabilities::release_wakeups), and
//! waits poll. A `listen_url` pointing straight at the server behind
//! PgBouncer gives the wake-ups back. A lease that runs out notifies
//! nobody.
//!
//! # Server restarts and failover
//! Locks are rows, so they outlive a restart of the server; a holder whose
//! extensions resume within its lease keeps its lock, and fencing tokens
//! keep increasing. A failover to an asynchronous standby can lose the
//! latest grants.
//!
//! # Modes
//! `mode=lease`, the default, is the only mode yet; `mode=advisory`
//! (session advisory locks on a pinned connection) is refused as not
//! supported. Once it exists, it will not pass through PgBouncer in
//! transaction mode, which hands a server connection, and the session
//! advisory locks on it, to other clients between transactions.

mod backend;
mod config;
mod error;
mod mark;
mod pool;
mod rows;
mod statements;
mod table;
mod wake;

pub use backend::{ADMIN_TIMEOUT, PostgresBackend};
pub use config::{DEFAULT_SCHEMA, DEFAULT_TABLE, Mode, PostgresConfig};
/// The pool this backend keeps its connections in, at the version it uses.
pub use deadpool_postgres;
/// The driver this backend is built on, at the version it uses.
pub use tokio_postgres;
pub use wake::WakeUps;

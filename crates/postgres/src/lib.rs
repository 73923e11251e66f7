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
//! | `listen_url` | none | a direct (not pooled) connection for release wake-ups; accepted and kept, not used yet |
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
//! pool ([`deadpool_postgres`], 16 at most per backend).
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
//! - **Waiting** polls, with core's jittered backoff, never later than the
//!   first holder's lease ends; release wake-ups through `LISTEN`/`NOTIFY`
//!   are not implemented yet.
//! - **Timeouts.** Each statement waits at most the request's operation
//!   timeout for a connection and its answer; a connection whose statement
//!   was abandoned is closed, never reused.

mod backend;
mod config;
mod error;
mod mark;
mod pool;
mod rows;
mod statements;
mod table;

pub use backend::{ADMIN_TIMEOUT, PostgresBackend};
pub use config::{DEFAULT_SCHEMA, DEFAULT_TABLE, Mode, PostgresConfig};
/// The pool this backend keeps its connections in, at the version it uses.
pub use deadpool_postgres;
/// The driver this backend is built on, at the version it uses.
pub use tokio_postgres;

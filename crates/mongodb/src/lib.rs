//! distlock's MongoDB backend: one document per lock, changed atomically by
//! single commands judged against the server's clock.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use distlock_core::{LockClient, LockName, LockOptions};
//! use distlock_mongodb::MongoBackend;
//!
//! # async fn run() -> distlock_core::Result<()> {
//! let backend = MongoBackend::builder("mongodb://db1,db2,db3/app?replicaSet=rs0")
//!     .collection("locks")
//!     .build()
//!     .await?;
//! let client = LockClient::new(Arc::new(backend), LockOptions::default());
//! let guard = client
//!     .acquire(&LockName::new("nightly-report")?, Duration::from_secs(10))
//!     .await?;
//! // … work, passing guard.fencing_token() to what the lock protects …
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! The driver is re-exported as [`mongodb`], so that a `Client`,
//! `Database` or `WriteConcern` you pass in is of the matching version.
//!
//! Besides named locks, the crate offers **entity locks**
//! ([`EntityLocks`]): a pessimistic lock kept on the entity's own document
//! in your collection, taken together with a read of the entity and
//! released together with the write of its new value, and optimistic
//! updates as the alternative. See the [`entity`] module, and
//! `docs/entity-locks.md` for when to use which. The rest of this page is
//! about named locks.
//!
//! # The document
//! One document per lock, in one collection (default `distributed_locks`):
//!
//! | field | value |
//! | --- | --- |
//! | `_id` | the lock name, verbatim, as a string |
//! | `lockId` | the grant's 128-bit identity as 32 lowercase hex digits; absent once released |
//! | `fencingToken` | int64, `max(previous + 1, server time in ms)` at each grant; kept across releases |
//! | `acquiredAt` | the server's `$$NOW` at the grant |
//! | `expiresAt` | the server's `$$NOW` plus the lease, moved at each extension; the server's now at release |
//! | `holder` | `{ host, pid, label }` of the grant, for inspection |
//!
//! Every value a caller supplies goes into update pipelines wrapped in
//! `$literal`, so a name such as `$$NOW` or `$x` is stored as written.
//!
//! # Operations
//! - **Acquire** is one `findOneAndUpdate` upsert whose pipeline grants
//!   only when the document has no `lockId` or its `expiresAt` is not after
//!   `$$NOW`, and returns the document after the update: we won exactly when
//!   the returned `lockId` is ours. Two first upserts racing on a new name
//!   make one of them fail with a duplicate key error, which is reported as
//!   "held, retry now", never as an error.
//! - **Extend** updates `expiresAt` only where `_id`, our `lockId` match and
//!   the lease has not expired by `$$NOW`, so a lease somebody else has held
//!   since is never revived. Many leases are extended by one `updateMany`
//!   per lease period and size bound; only when fewer matched than were
//!   sent does a `find` say which ones were lost.
//! - **Release** sets `expiresAt` to the server's now and removes `lockId`,
//!   again only where `_id` and our `lockId` match. The document stays, so
//!   its fencing token survives.
//! - **Force release** does the same whoever holds the lock; the holder's
//!   next extension is refused and its guard reports the loss.
//!
//! A TTL index on `expiresAt` (created once per backend, idempotently;
//! a failure is logged) lets the server delete idle documents. Nothing
//! depends on it: an expired document is free by `$$NOW` whether or not the
//! TTL monitor has run, and a deleted one is recreated with a token above
//! every earlier one (see below).
//!
//! # Clock
//! Expiry is judged only by the server, with `$$NOW`; the clients' clocks
//! are never compared with the stored times. The holder gives a lease up on
//! its own monotonic clock (the lease minus the safety margin after the
//! last successful extension was *sent*), so it stops before the server can
//! grant the lock again, as long as the two clocks run at about the same
//! rate. The `retry_after` hint given to waiters is the stored expiry less
//! an estimate of the server's clock (from the `hello` reply and our own
//! grants, advanced by the local monotonic clock); it only paces waiting.
//!
//! # Fencing tokens
//! A token is `max(previous + 1, server time in milliseconds)`, computed in
//! the pipeline. It strictly increases per name across releases, and also
//! across the loss of the document (TTL deletion, a restore) or of the
//! server's data, as long as the server's clock does not go back by more
//! than the time since the last grant.
//!
//! # Durability
//! With the default write concern `majority`, every acknowledged grant,
//! extension and release survives the failover of the primary: a new
//! primary has it, so it never grants the same lock twice. With `w: 1` a
//! grant acknowledged by a primary that is then replaced before the write
//! replicates is rolled back: the new primary may grant the lock to another
//! process while the first still believes it holds it (its next extension is
//! refused, so it learns within one extension cadence). Use `w: 1` only for
//! a single server, or where such a double grant is tolerable; fencing
//! tokens can still decrease after such a rollback only if the clock went
//! back.
//!
//! # Timeouts
//! Building the backend checks that the server answers, bounded by the
//! connect timeout (default 5 s, also used as the server-selection
//! timeout). Each command carries a server-side bound (`maxTimeMS`, and a
//! `wtimeout` on the default write concern), and the lock client bounds
//! every call with its operation timeout, which is shorter than the lease:
//! a hung primary makes the holder report the lease lost before the lease
//! runs out.
//!
//! # Wake-ups
//! Where change streams work (replica sets and sharded clusters), each
//! backend runs one change stream on the lock collection, filtered to the
//! names this process waits for, and wakes the waiters of a name when its
//! `lockId` is removed or its document deleted. On a standalone server,
//! waiters poll with jittered backoff, never later than the lease's end.
//!
//! # Cancel safety
//! Every backend operation is one command (plus, rarely, one read). If its
//! future is dropped, the command was either never sent, or sent and
//! applied as a whole by the server; nothing is half-done. An acquisition
//! applied after its caller stopped waiting is a grant nobody claims: the
//! lock client runs each attempt in a task of its own and releases such a
//! grant by its identity, and otherwise it ends when its lease does.
//!
//! # Credentials
//! Errors and `Debug` output never contain the password of the URL: URLs
//! are shown with their user information replaced by `***`.

mod backend;
mod builder;
mod clock;
mod document;
pub mod entity;
mod error;
mod redact;
mod watch;

pub use mongodb;

pub use crate::backend::MongoBackend;
pub use crate::builder::{
    Connection, DEFAULT_COLLECTION, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DATABASE,
    DEFAULT_OPERATION_TIMEOUT, MongoBackendBuilder, split_collection_option,
};
pub use crate::entity::{EntityGuard, EntityLocks, EntityLocksBuilder, Versioned};

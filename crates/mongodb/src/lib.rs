//! distlock's MongoDB backend: one document per lock, changed atomically by
//! single commands judged against the server's clock.
//!
//! ```no_run
//! use std::time::Duration;
//! use distlock_core::LockClient;
//! use distlock_mongodb::MongoBackend;
//!
//! # async fn run() -> distlock_core::Result<()> {
//! let backend =
//!     MongoBackend::open("mongodb://db1,db2,db3/app?replicaSet=rs0&collection=locks").await?;
//! let client = LockClient::builder().build(backend)?;
//! let guard = client
//!     .acquire_with("nightly-report", Duration::from_secs(10))
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
//! One document per lock name, in one collection (default
//! `distributed_locks`). An exclusive grant has the shape every version of
//! this backend wrote:
//!
//! | field | value |
//! | --- | --- |
//! | `_id` | the lock name, verbatim, as a string |
//! | `lockId` | the grant's 128-bit identity as 32 lowercase hex digits; absent once released |
//! | `fencingToken` | int64, `max(previous + 1, server time in ms)` at each grant of any kind; kept across releases |
//! | `acquiredAt` | the server's `$$NOW` at the latest grant |
//! | `expiresAt` | the server's `$$NOW` plus the lease, moved at each extension; the server's now at release |
//! | `holder` | `{ host, pid, label }` of the latest grant, for inspection |
//! | `terms` | an election's last 32 terms, `{ term, previous, holder }` each; only campaigns write it (see below) |
//! | `queue` | in fair mode, the waiting writers' places, first come first (see below) |
//! | `passedTo` | in fair mode, the place the latest write passed the lock on to, for its waiter's wake-up |
//!
//! Readers ([`Claim::Shared`](distlock_core::Claim::Shared)) and permits
//! ([`Claim::Permit`](distlock_core::Claim::Permit)) are entries of a
//! `holders` array, `{id, fencingToken, acquiredAt, expiresAt, holder}`
//! each, while `lockId` is `"shared"` or `"permits"` (a semaphore also
//! keeps its `limit`) and `expiresAt` is the latest entry's expiry, so
//! "held until `expiresAt`" is true of every document. Writers waiting for
//! readers keep `{id, expiresAt}` marks in `waiting`, which hold new
//! readers back until the writer is served, gives up, or its mark expires
//! one lease after its last attempt. At most 1,000 readers hold one name at
//! once.
//!
//! Every value a caller supplies goes into update pipelines wrapped in
//! `$literal`, so a name such as `$$NOW` or `$x` is stored as written.
//!
//! # Operations
//! - **Acquire** is one `findOneAndUpdate` upsert whose pipeline grants
//!   only when nothing that excludes the request lives by `$$NOW`, and
//!   returns the document after the update: we won exactly when the
//!   returned `lockId` (or, for a reader or a permit, an entry) is ours.
//!   Two first upserts racing on a new name make one of them fail with a
//!   duplicate key error, which is reported as "held, retry now", never as
//!   an error. A name held as another kind, or as a semaphore of another
//!   limit, is [`Error::KindConflict`](distlock_core::Error::KindConflict).
//! - **Extend** updates the expiry only where `_id` and our `lockId` (or
//!   our live entry) match and the lease has not expired by `$$NOW`, so a
//!   lease somebody else has held since is never revived. Many leases are
//!   extended by one `updateMany` per lease period, kind of document and
//!   size bound; only when the count cannot prove them all extended does a
//!   read say which ones were lost.
//! - **Release** ends only our grant or entry; the document stays, so its
//!   fencing token survives.
//! - **Force release** removes every holder of any kind; each holder's
//!   next extension is refused and its guard reports the loss.
//!
//! A TTL index on `expiresAt` (created once per backend, idempotently;
//! a failure is logged) lets the server delete idle documents. Its
//! partial filter `{queue: null}` leaves out every document with a fair
//! line, so that a line outlives an expired grant in front of it. Nothing
//! depends on it: an expired document is free by `$$NOW` whether or not the
//! TTL monitor has run, and a deleted one is recreated with a token above
//! every earlier one (see below).
//!
//! # Election terms
//! [`Election::observe`](distlock_core::Election::observe) sees every term
//! because a campaign's grant appends its term (`term` = its fencing token,
//! `previous` = the term recorded before it, `holder` with the campaign's
//! value) to the document's `terms` array in the same pipeline that grants
//! it, keeping the last [`TERMS_KEPT`](distlock_core::backend::TERMS_KEPT). Only
//! campaigns write the record, under 45 KiB per election; other
//! grants carry it over in the command they send anyway, so a plain lock
//! pays nothing for it, and a name that never saw a campaign has none.
//! Where the TTL index deletes a document that was left free, the record
//! goes with it, and the next campaign starts a new one (its first term's
//! `previous` is unknown): an observer that had not read the deleted terms
//! yet misses them without being told. `docs/mongodb.md` has the details.
//!
//! # Clock
//! Expiry is judged only by the server, with `$$NOW`; the clients' clocks
//! are never compared with the stored times. The holder gives a lease up on
//! its own monotonic clock (the lease minus the safety margin after the
//! last successful extension was *sent*), so it stops before the server can
//! grant the lock again, as long as the two clocks run at about the same
//! rate and the server's clock does not step forward (a step forward ends
//! the lease early on the server, and the holder learns at its next
//! extension; fencing tokens cover the gap). The `retry_after` hint given to waiters is the stored expiry less
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
//! `lockId` is removed, its document deleted, or a write says in `freed`
//! that it may let a waiter in (a permit's release, a writer that stopped
//! waiting). On a standalone server,
//! waiters poll with jittered backoff, never later than the lease's end.
//!
//! # Fair mode
//! With [`fair(true)`](MongoConfig::fair) (or `fair=true` in the
//! URL), whole locks go to waiters in the order they asked, across
//! processes. A waiting writer that finds the lock held adds a place,
//! `{id, expiresAt, lease, holder, recordsTerm}`, to the document's
//! `queue`, and renews it within half its lease; a place not renewed for
//! its lease is dropped by `$$NOW`. The release's update grants the lock
//! to the first live place (a new fencing token, the place's lease from the
//! server's now, its holder, its term if it campaigns), and names the
//! place in `passedTo`: only the change stream of the waiter's backend
//! reports that write, and only that waiter asks the server; its attempt
//! takes the grant over under its own identity. A lock whose holder's
//! lease ran out is passed on by the next attempt of any waiter. A single
//! try is granted only when nobody holds or waits. A waiter that gives up
//! leaves the line in one update, passing on a grant made to it meanwhile;
//! a waiter that died holds the line up for its lease at most (or half the
//! next waiter's lease, if that is longer). Readers wait while a writer is
//! in line. `docs/mongodb.md` has the costs.
//!
//! # Cancel safety
//! Every backend operation is one command (plus, rarely, one read). If its
//! future is dropped, the command was either never sent, or sent and
//! applied as a whole by the server; nothing is half-done. An acquisition
//! applied after its caller stopped waiting is a grant nobody claims: the
//! lock client runs each attempt in a task of its own and releases such a
//! grant by its identity, and otherwise it ends when its lease does. A
//! waiting writer's mark left by such an attempt is removed when the wait
//! ends, and otherwise expires one lease after it was written.
//!
//! # Credentials
//! Errors and `Debug` output never contain the password of the URL: URLs
//! are shown with their user information replaced by `***`.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod bulk;
mod clock;
mod config;
mod counter;
mod deployment;
mod document;
pub mod entity;
mod error;
mod exclusive;
mod fair;
pub mod fencing;
mod holders;
mod listing;
mod redact;
mod reply;
mod setup;
mod terms;
mod ttl;
mod url_options;
mod waiting;
mod watch;

pub use mongodb;

pub use crate::backend::MongoBackend;
pub use crate::config::{
    Connection, DEFAULT_COLLECTION, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DATABASE,
    DEFAULT_OPERATION_TIMEOUT, MongoConfig,
};
pub use crate::entity::{EntityGuard, EntityLocks, EntityLocksBuilder, Versioned};
pub use crate::url_options::split_collection_option;

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
//! How it works (the document and its fields, the command of each
//! operation, the record of election terms, the change stream of wake-ups,
//! fair mode's line, the TTL index) and how to run it against a replica set
//! and test it is in `docs/mongodb.md` in the repository; this page says
//! what a caller can rely on. It needs MongoDB 5.0 or later.
//!
//! # Opening
//! [`MongoBackend::open`], `distlock::connect` and the `distlock` command
//! take the same URLs:
//! `mongodb://user:pass@db1,db2/app?replicaSet=rs0&collection=locks`, or
//! `mongodb+srv://…`. The path names the database (default `distlock`);
//! the `collection` option (default `distributed_locks`) and `fair` are
//! distlock's own and are removed before the URL goes to the driver; every
//! other option is the driver's. An option that is neither (a misspelling
//! such as `w-timeout`) is refused by name before connecting, with a
//! pointer to the driver's list, whatever the driver version; names match
//! in any case, as the connection-string specification says. Values are
//! %-decoded as the driver decodes them: a `+` is a plus sign, and a space
//! is `%20`.
//!
//! In code, [`MongoConfig::parse`] reads the same URL and
//! [`MongoConfig::new`] takes a database you already have; either is
//! adjusted (the collection, the write concern, timeouts, wake-ups, fair
//! mode) and given to [`MongoBackend::connect`].
//!
//! # What a caller can rely on
//! - **Every kind of claim**: the whole lock, a reader's share
//!   ([`Claim::Shared`](distlock_core::Claim::Shared)) and a semaphore's
//!   permit ([`Claim::Permit`](distlock_core::Claim::Permit)), all judged
//!   by the server's clock. A name held as another kind, or as a semaphore
//!   of another limit, is
//!   [`Error::KindConflict`](distlock_core::Error::KindConflict). A waiting
//!   writer keeps later readers out.
//! - **Any name**, stored verbatim as the document's `_id`; every value a
//!   caller supplies is taken literally, so a name such as `$$NOW` or `$x`
//!   is stored as written.
//! - **Only the holder extends or releases**: each command matches the
//!   grant's own random identity, and a lease that expired or was taken
//!   over is never revived. A forced release ends every holder of the name;
//!   each holder's next extension is refused and its guard reports the
//!   loss.
//! - **Resuming after a restart**: a guard's
//!   [`handle`](distlock_core::LockGuard::handle), kept by a process that
//!   restarted while it held the lock, is taken up by
//!   [`LockClient::resume`](distlock_core::LockClient::resume) for every
//!   kind of claim, in fair mode too (a grant passed on to a waiter
//!   included): one command, filtered on the name, the grant's identity
//!   and token and its end by `$$NOW`, gives that very grant the new
//!   client's identity, lease and holder, with the same token. It resumes
//!   once: the handle is spent, and the old identity holds nothing. Entity
//!   locks cannot be resumed (see [`entity`]).
//! - **Cancel safety.** Every backend operation is one command (plus,
//!   rarely, one read). If its future is dropped, the command was either
//!   never sent, or sent and applied as a whole by the server; nothing is
//!   half-done. An acquisition applied after its caller stopped waiting is
//!   a grant nobody claims: the lock client releases it by its identity,
//!   and otherwise it ends when its lease does.
//! - **Credentials.** Errors and `Debug` output never contain the password
//!   of the URL: URLs are shown with their user information replaced by
//!   `***`.
//!
//! # Clock
//! Expiry is judged only by the server, with `$$NOW`; the clients' clocks
//! are never compared with the stored times. The holder gives a lease up on
//! its own monotonic clock (the lease minus the safety margin after the
//! last successful extension was *sent*), so it stops before the server can
//! grant the lock again, as long as the two clocks run at about the same
//! rate and the server's clock does not step forward (a step forward ends
//! the lease early on the server, and the holder learns at its next
//! extension; fencing tokens cover the gap). On a replica set or a sharded
//! cluster, the clocks of every node that can run the commands (each
//! primary-eligible member, each router) must agree to within the safety
//! margin: `docs/mongodb.md` says what happens when they do not.
//!
//! # Fencing tokens
//! A token is `max(previous + 1, server time in milliseconds)`, from one
//! counter per name that every grant of any kind advances. It strictly
//! increases per name across releases, and also across the loss of the
//! document (TTL deletion, a restore) or of the server's data, as long as
//! the server's clock does not go back by more than the time since the
//! last grant.
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
//! Where change streams work (replica sets and sharded clusters), a
//! release wakes the waiters of its name at once, through one change
//! stream per backend. On a standalone server, or with
//! [`release_wakeups(false)`](MongoConfig::release_wakeups), waiters poll
//! with jittered backoff, never later than the lease's end.
//!
//! # Election terms
//! [`Election::observe`](distlock_core::Election::observe) sees every term,
//! the short-lived ones too: a campaign's grant records its term in the
//! same command that grants it, keeping the last
//! [`TERMS_KEPT`](distlock_core::backend::TERMS_KEPT). A plain lock pays
//! nothing for it. Where the TTL index deletes a document that was left
//! free, the record goes with it, and the next campaign starts a new one:
//! an observer that had not read the deleted terms yet misses them without
//! being told.
//!
//! # Fair mode
//! With [`fair(true)`](MongoConfig::fair) (or `fair=true` in the
//! URL), whole locks go to waiters in the order their first attempts
//! reached the server, across processes, and a release passes the lock to
//! the first waiter in its own write, waking only that waiter's process. A
//! single try is granted only when nobody holds or waits. A waiter that
//! gives up leaves the line at once; a waiter that died holds the line up
//! for a lease and a quarter of its own at most (or half the next waiter's
//! lease, if that is longer). A waiter in another process holds the lock
//! passed on to it as soon as the release's change event reaches it, with
//! no command of its own. Readers and permits are not covered, but readers wait while a
//! writer is in line.
//!
//! # Limits
//! - At most 1,000 readers hold one name at once; the next reader waits,
//!   as if the name were held, until one leaves. A semaphore has at most
//!   1,000 permits.
//! - A task that holds a reader's share and asks for another share of the
//!   same name while a writer waits deadlocks until the second acquire
//!   times out, as `std::sync::RwLock` can. Take one share per task and
//!   name.
//! - On a sharded cluster, leave the lock collection unsharded or shard it
//!   on `_id`.

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
mod grant;
mod holders;
mod listing;
mod redact;
mod reply;
mod resume;
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

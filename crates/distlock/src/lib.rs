//! Distributed locks for Rust services that run as many instances: leases
//! that hold across every process sharing a backend, kept alive in the
//! background, with fencing tokens and a signal when a lease is lost.
//!
//! ```toml
//! [dependencies]
//! distlock = "0.1"                       # file and memory backends
//! # distlock = { version = "0.1", features = ["postgres"] }
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! # A lock in two statements
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock::Error> {
//! # let dir = std::env::temp_dir().join(format!("distlock-doc-{}", std::process::id()));
//! # let url = format!("file://{}", dir.display());
//! let client = distlock::connect(&url).await?; // "file:///var/lock/app", "postgres://…", …
//! let guard = client.acquire("nightly-report").await?; // waits, as a Mutex does
//!
//! // … work, passing guard.fencing_token() to what the lock protects …
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`LockClient::acquire`] waits with no deadline. To wait a while, take a
//! reader's share or a semaphore's permit, or give up on a signal, pass
//! [`AcquireOptions`] (or just a [`Duration`](std::time::Duration)) to
//! [`acquire_with`](LockClient::acquire_with);
//! [`try_acquire`](LockClient::try_acquire) never waits, and
//! [`with_lock`](LockClient::with_lock) runs a closure under the lock.
//!
//! # Backends
//! [`connect`] opens the backend its URL names. Server backends are
//! features of the crate, off by default:
//!
//! | URL | feature | store |
//! |---|---|---|
//! | `file:///dir` (`file://`: the default directory) | `file` (default) | OS file locks on one machine |
//! | `memory://` | always | this process only: tests and examples |
//! | `mongodb://…`, `mongodb+srv://…` | `mongodb` | MongoDB 5.0+ replica sets and sharded clusters |
//! | `postgres://…`, `postgresql://…` | `postgres` | PostgreSQL, lease or advisory mode; and locks held by your own transaction (`distlock::postgres::xact`; on sqlx with `postgres-sqlx`) |
//! | `etcd://…`, `etcds://…` | `etcd` | etcd v3 |
//! | `memcache://…` | `memcached` | memcached (an efficiency lock) |
//! | `s3://bucket/prefix`, `gs://…`, `az://…` | `objectstore` (or `objectstore-s3`, `-gcs`, `-azure`) | an object in a bucket per lock, on conditional writes (S3, GCS, Azure Blob) |
//! | `redis://…`, `rediss://…` | `redis` | one Redis server, a quorum of them (`?mode=quorum`) or a Redis Cluster (`?mode=cluster`) (see its guarantees) |
//!
//! ```no_run
//! # async fn run() -> Result<(), distlock::Error> {
//! // One machine's processes, through lock files in a private directory.
//! let local = distlock::connect("file:///var/lock/my-service").await?;
//! # #[cfg(feature = "postgres")] {
//! // PostgreSQL: a row per lock judged by the server's clock, or
//! // `mode=advisory` for session advisory locks.
//! let postgres = distlock::connect("postgres://app@db/app?table=locks").await?;
//! # }
//! # #[cfg(feature = "mongodb")] {
//! // MongoDB: a document per lock, written with `w: majority`.
//! let mongodb = distlock::connect("mongodb://db1,db2,db3/app?replicaSet=rs0").await?;
//! # }
//! # #[cfg(feature = "etcd")] {
//! // etcd: a key per holder and waiter, served in revision order.
//! let etcd = distlock::connect("etcd://m1:2379,m2:2379,m3:2379?prefix=app/").await?;
//! # }
//! # #[cfg(feature = "memcached")] {
//! // memcached: an efficiency lock, over a quorum of three servers here.
//! let memcached = distlock::connect("memcache://c1,c2,c3?mode=quorum").await?;
//! # }
//! # #[cfg(feature = "redis")] {
//! // Redis: one server, a key per lock, owner-checked in server-side scripts.
//! let redis = distlock::connect("redis://cache:6379/0?prefix=app:").await?;
//! # }
//! # Ok(())
//! # }
//! ```
//!
//! Each backend's own crate documents its clock, failure modes and
//! guarantees, and `examples/` in this crate has a runnable example for
//! each (`cargo run -p distlock --features postgres --example postgres`).
//!
//! Client options may ride in the URL's query beside the backend's own:
//! `lease`, `extend_every`, `safety_margin`, `operation_timeout`,
//! `backoff_min`, `backoff_max`, `local_hand_overs`, `min_local_run`,
//! `at_risk_below` and `label` (durations as `30s`, `500ms` or bare seconds). For example
//! `postgres://app@db/app?table=locks&lease=10s&label=reports`. Or set them
//! with [`LockClient::builder`] and [`connect_with`]. Every backend reads
//! its query the same way: values are %-decoded and a `+` is a plus (a
//! space is `%20`), as the drivers read them; an option given twice, or
//! one that neither distlock nor the backend's driver knows, is refused
//! by name.
//!
//! ```no_run
//! # async fn run() -> Result<(), distlock::Error> {
//! use std::time::Duration;
//! use distlock::{AcquireOptions, LockClient};
//!
//! let builder = LockClient::builder().lease(Duration::from_secs(10));
//! # #[cfg(feature = "mongodb")]
//! let locks = distlock::connect_with(builder, "mongodb://db1,db2,db3/app?replicaSet=rs0").await?;
//! # #[cfg(not(feature = "mongodb"))]
//! # let locks = distlock::connect_with(builder, "memory://").await?;
//! let reader = locks
//!     .acquire_with("config", AcquireOptions::new().shared().timeout(Duration::from_secs(5)))
//!     .await?;
//! # drop(reader);
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//! - A lease is judged by the store's clock where it has one; the holder's
//!   keeper extends every held lease in batches, and
//!   [`LockGuard::lost`] fires when a lease can no longer be relied on.
//! - Every grant carries a fencing token, strictly greater than every
//!   earlier token of its name: hand it to what the lock protects, so a
//!   holder that paused past its lease is turned away.
//! - Losing a race is `Ok(None)` from a try, never an error; every error is
//!   an [`Error`] whose [`is_transient`](Error::is_transient) tells whether
//!   retrying may help.
//!
//! The project's README states the guarantees and what each rests on;
//! `docs/guarantees.md` says how the chaos campaign checks them
//! (RELIABILITY.md), `docs/guide.md` says what a client does in full, each
//! backend's `docs/<backend>.md` says how it works, BENCHMARKS.md holds
//! the benchmarks, and `docs/writing-a-backend.md` is the contract a
//! backend meets.
//!
//! # Without an async runtime
//! [`blocking`] has the same client and guards behind calls that block,
//! with a runtime of their own.
//!
//! # Testing code that takes locks
//! With the `test-util` feature, `distlock::testing::TestBackend` is a
//! backend a test controls: it loses a held lock on demand, fails the next
//! calls, delays calls, and runs on Tokio's paused clock.
//!
//! # Writing a backend
//! What only backend authors need lives in [`backend`].

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod blocking;
mod connect;
mod url;

pub use distlock_core::{
    AcquireOptions, Claim, Election, Error, Holder, IntoLockClaim, IntoLockName, Leader,
    LeaderHealth, Leadership, LockClient, LockClientBuilder, LockContext, LockGuard, LockInfo,
    LockKind, LockName, LockOptions, LockOptionsBuilder, LockSet, LossReason, LostSignal,
    MAX_NAME_LEN, MAX_PERMITS, MemoryBackend, Observer, Payload, Permits, Result, ResumeHandle,
    RiskReason, RiskSignal, StaleLeadership, TryOptions, Waiter, Waiters,
};

pub use crate::connect::{connect, connect_with};
pub use crate::url::{BackendUrl, default_url, open};
pub use distlock_core::backend::redact;

/// What backend authors need, and what a [`LockClient`] hands its backend;
/// users of locks need none of it. This is `distlock_core::backend`, whole.
pub use distlock_core::backend;

/// The metrics distlock records through the `metrics` facade, with the
/// `metrics` feature: their names, labels and meaning.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use distlock_core::metrics;
/// A backend a test controls: lose a held lock, fail the next calls, delay
/// calls, on Tokio's paused clock.
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use distlock_core::testing;
/// The etcd backend.
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use distlock_etcd as etcd;
/// The file backend: the embedded default.
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub use distlock_file as file;
/// The memcached backend.
#[cfg(feature = "memcached")]
#[cfg_attr(docsrs, doc(cfg(feature = "memcached")))]
pub use distlock_memcached as memcached;
/// The MongoDB backend, with entity locks.
#[cfg(feature = "mongodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "mongodb")))]
pub use distlock_mongodb as mongodb;
/// The object-storage backend (S3, GCS, Azure Blob).
#[cfg(any(
    feature = "objectstore-s3",
    feature = "objectstore-gcs",
    feature = "objectstore-azure"
))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(
        feature = "objectstore-s3",
        feature = "objectstore-gcs",
        feature = "objectstore-azure"
    )))
)]
pub use distlock_objectstore as objectstore;
/// The PostgreSQL backend, in lease or advisory mode.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use distlock_postgres as postgres;
/// The Redis backend.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use distlock_redis as redis;

/// The README's examples, compiled and run as doc tests (the README and the
/// guides live outside the package, so only tests read them).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

/// The guides' examples, compiled as doc tests.
#[cfg(all(doctest, feature = "mongodb"))]
#[doc = include_str!("../../../docs/mongodb.md")]
#[doc = include_str!("../../../docs/entity-locks.md")]
struct MongoDbGuideDoctests;

/// The memcached guide's example, compiled as a doc test.
#[cfg(all(doctest, feature = "memcached"))]
#[doc = include_str!("../../../docs/memcached.md")]
struct MemcachedGuideDoctests;

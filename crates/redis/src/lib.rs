//! distlock's Redis backend, on one Redis server, on a quorum of
//! independent ones, or on a Redis Cluster: every decision is one
//! server-side script on one name's keys, judged by the server's clock.
//!
//! ```no_run
//! # async fn run() -> Result<(), distlock_core::Error> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use distlock_core::{LockClient, LockOptions};
//! use distlock_redis::RedisBackend;
//!
//! let backend = RedisBackend::open("redis://cache:6379/0?prefix=app:").await?;
//! let locks = LockClient::new(Arc::new(backend), LockOptions::default());
//! let guard = locks.acquire_with("nightly-report", Duration::from_secs(10)).await?;
//! // … pass guard.fencing_token() to what the lock protects …
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! How it works (the keys of a name, the scripts, hand-overs without a
//! command, `wait_replicas`, what each name costs the server, quorum mode's
//! votes and roll-backs, cluster routing) and how it is tested is in
//! `docs/redis.md` in the repository; this page says what a caller can rely
//! on. It needs Redis 7.0 or later.
//!
//! # Opening
//! `redis://[user:password@]host[:port][/db][?prefix=…]` names the server
//! (port 6379), the database (0) and the prefix of every key and channel
//! (`distlock:`; it may not hold `{` or `}`). `rediss://` connects with
//! TLS, checking the server's certificate against the system's roots, or
//! with `?ca=PATH` against the CA certificates in that PEM file alone.
//! `?wait_replicas=N` (one server only) counts a grant or an extension
//! only once N replicas acknowledged it (`WAIT`); it turns hand-overs off.
//! `?token_keep=7d` (`s`, `m`, `h` or `d`; one minute at least, 30 days by
//! default) sets how long a name's token counter, and an election's record
//! of terms, outlive its last grant, in every mode: shorter bounds what
//! per-entity names cost the server, and after it a name's tokens come
//! from the server's clock alone. A password alone is
//! `redis://:password@host`.
//! `redis://h1:p1,h2:p2,h3:p3?mode=quorum` names three or more independent
//! servers for [quorum mode](#quorum-mode), and
//! `redis://h1:p1[,h2:p2…]?mode=cluster` one or more nodes of a Redis
//! Cluster for [cluster mode](#cluster-mode). Any other option is
//! [`Error::InvalidConfig`] naming it. The user and password are
//! never printed. [`RedisBackend::open`] takes the URL,
//! [`RedisBackend::connect`] a [`RedisConfig`] made with
//! [`RedisConfig::parse`] and adjusted in code.
//!
//! # What a caller can rely on
//! - **The server's clock decides.** Every decision (acquire, extend,
//!   release, hand-over, the end of a wait, a forced release) is one
//!   server-side script on one name's keys, which reads the server's
//!   `TIME`; expiry is the server's (`PX`), never the client's clock.
//! - **Only the holder extends or releases** its grant: both act only
//!   while the stored identity is the lease's, never with a plain `DEL`, so
//!   a holder whose lease ran out cannot touch the next holder's grant.
//!   `force_release` deletes a name's grants and wakes its waiters; holders
//!   learn at their next extension.
//! - **Any name is safe.** The name never appears in a key or a script's
//!   text (keys carry its SHA-256), all of a name's keys share one Redis
//!   Cluster slot, and no name can choose another's slot.
//! - **Fencing tokens** are `max(previous + 1, the server's time in µs)`
//!   at every grant of every kind, so they keep increasing after the
//!   counter is lost (a restart without persistence, an eviction, the end
//!   of `token_keep`) or comes back older (a restart from a snapshot), as
//!   long as the server's clock does not step back by more than the time
//!   since.
//! - **Readers and writers** share a name: a writer is granted when no one
//!   holds it, a reader when no writer holds it and **no writer waits**. A
//!   writer that vanished while waiting holds readers back for a lease at
//!   most. At most 1,000 readers hold a name.
//! - **Semaphores** admit up to their limit, each permit its own grant.
//!   A permit asked for on a lock, a lock on a semaphore, or a permit with
//!   another limit than the holders' is [`Error::KindConflict`].
//! - **Hand-over** to the next task of the same client (on one server
//!   without `wait_replicas`, and in cluster mode) never leaves the lock
//!   free in between, and the next grant's token is higher. After a
//!   hand-over made without a server command, `list` (and an election's
//!   `leader`) may show a token up to 63 below the holder's, never another
//!   holder, until the holder's next extension (at most the extension
//!   cadence).
//! - **Wake-ups.** A release wakes the waiters of its name at once. While
//!   the subscriber connection is down, [`Wakeups::watch`] answers `None`,
//!   waits poll at least once a second, and every waiter is woken once when
//!   it goes down and when it is back.
//! - **`list`** walks the prefix with `SCAN` (never `KEYS`); values under
//!   the prefix that are not ours are skipped.
//! - **Who waits.** `LockClient::list` shows each lock's waiting writers
//!   ([`Waiters::WholeLock`]), in every mode, with their host, pid and
//!   label and how long they have waited by the server's clock, longest
//!   first. A writer's wait leaves a mark that keeps later readers out,
//!   and the mark records who waits; a reader or a permit leaves none, so
//!   it waits unlisted. Redis keeps no line: whichever waiter asks first
//!   after a release is served, so the list is the order the waits began,
//!   not the order they will be served
//!   ([`WaiterList::serves_in_order`] is `false`). In quorum mode a waiter
//!   is listed when a majority of the servers hold its mark.
//! - **Timeouts.** Every call ends within the request's operation timeout
//!   ([`Capabilities::bounds_calls`]); `list`, `force_release`, the read of
//!   an election's terms and `server_info` within the client's operation
//!   timeout too, which core gives them.
//! - **Elections** on one server and in cluster mode record every term
//!   with its grant, so [`Election::observe`] sees every leader; quorum
//!   mode keeps no record, so observing is [`Error::Unsupported`] there
//!   (`leader()` works).
//!
//! # Resuming a lock
//! `LockClient::resume` takes a held grant up by its handle, in every mode
//! and for every claim the mode grants. One script per server,
//! owner-checked on the handle's identity and token and judged by the
//! server's clock, stores the grant under the new identity with the same
//! token, to last the lease from the server's now. The old identity is
//! gone, so a second resume of the handle is [`Error::Lost`], and the old
//! holder, if it still runs, loses the lock at its next extension (until
//! then it still believes it holds). A grant handed over without a command
//! is resumable once its next extension has written its token on the
//! server (until then its handle is lost); the resumed grant reserves no
//! tokens, and no later grant repeats one the old process reserved. With
//! `wait_replicas` a resume counts once the replicas have it. Quorum
//! mode's resumes are below.
//!
//! # Quorum mode
//! With `?mode=quorum` and N ≥ 3 independent servers (not replicas of one
//! another), each server keeps its own copy of every lock, and a lock is
//! held while a majority holds it:
//! - **A grant** counts only when a majority granted within the lease,
//!   less the time the attempt took and a drift margin of 1% of the lease;
//!   otherwise the copies it made are deleted again. A slow or absent
//!   server holds nobody up, and a server away when the backend opens is
//!   connected to in the background.
//! - **An extension** succeeds on a majority; the lease is lost when so
//!   many servers refuse that no majority can remain. Once a majority has
//!   extended it, a server that lost its copy (restarted without
//!   persistence, say) gets it back, with the grant's token, where nothing
//!   holds the name there: a grant someone else made on that server is
//!   never overwritten.
//! - **Fencing tokens.** A grant's token is greater than every earlier
//!   grant's while, for the two grants, one server that both majorities
//!   share keeps its counter; where every such server lost it (a restart
//!   without persistence), it is still greater as long as the servers'
//!   clocks differ by less than the time between the grants.
//! - **Kinds.** Exclusive and shared locks; semaphores are
//!   [`Error::Unsupported`]: a server counts the permits it holds, and the
//!   permits of different majorities could add up past the limit. No
//!   hand-over: a release and a new acquisition take its place.
//! - **Resuming** swaps the copies on every server and holds when a
//!   majority swapped within the lease; otherwise the copies swapped are
//!   released by the new identity and the resume is [`Error::Lost`]. Two
//!   resumes of one handle never both hold; with a server down, both may
//!   lose. Servers that lacked the copy get it back from the resumed
//!   grant's extensions.
//! - **Wake-ups** are on while a majority of the servers' subscriber
//!   connections is open. **`list`** shows each grant that a majority
//!   holds, once.
//! - It survives the loss of a minority of servers. A server that came
//!   back empty (restarted without persistence) abstains for a lease,
//!   however soon it is back, so a lock whose grant rested on its lost copy
//!   and one other is not granted again; meanwhile grants need the other
//!   servers, and a new deployment's first lease grants only what every
//!   server grants. The holder's next extension gives the restarted server
//!   its copies back, so restarts of every server in turn, each after an
//!   extension has passed since the last, keep a lock held throughout; a
//!   majority that lost its copies between two extensions loses the lock.
//!   A restart from an older snapshot is not covered: run the servers
//!   without persistence, or with `appendfsync always`.
//!
//! # Cluster mode
//! With `?mode=cluster`, the URL's hosts are seeds: nodes of one Redis
//! Cluster (database 0 only; `wait_replicas` is refused). Each name lives
//! on the master of its keys' slot and gets exactly what one server
//! gives, every kind and hand-over included, with that master's clock:
//! - **Slot moves.** While a name's slot moves, its calls wait for the
//!   move until their timeout: a move longer than the lease less the safety
//!   margin loses that slot's locks, reported as lost.
//! - **Wake-ups** are heard while any seed's subscriber connection is open.
//! - **Failover** inside the cluster is asynchronous replication, as for
//!   one server with replicas: a promoted replica may lack a grant.
//!
//! # What Redis can and cannot promise
//! - **Failover.** Replication is asynchronous: a primary can acknowledge a
//!   grant and fail before any replica has it, and the promoted replica
//!   then grants the lock to someone else while the first holder still
//!   believes it holds it, until its next extension is refused.
//!   `?wait_replicas=N` narrows that: a failover to a replica that
//!   acknowledged keeps the lock. It does not make Redis consistent: a
//!   failover can still promote a replica that was not among the N (with
//!   more replicas than N), and every call of the backend waits behind the
//!   `WAIT` on its connection.
//! - **Restarts.** Without persistence, or with snapshots only, a
//!   restarted server has forgotten the locks taken since: holders learn
//!   it at their next extension (`lost()` fires), and tokens still
//!   increase. With `appendonly yes` and `appendfsync always`, every
//!   acknowledged grant survives a restart; with `everysec`, the last
//!   second's may not.
//! - **Memory.** Only `noeviction` keeps held locks: every key of this
//!   backend has an expiry, so the `volatile-*` policies may evict them as
//!   readily as the `allkeys-*` ones (`volatile-ttl` picks the keys
//!   closest to expiry first), with the same effect as a restart while
//!   the holder still believes it holds. Under `noeviction`, a
//!   server at `maxmemory` refuses new grants (and readers' and permits'
//!   extensions) with a clear `OOM` error, while releases and exclusive
//!   extensions go through. A read-only replica answers `READONLY`, which
//!   the error names.
//!
//! In each case the fencing token turns a stale holder away at a resource
//! that checks it. Where a lock must never be held twice, use etcd,
//! PostgreSQL or MongoDB.
//!
//! [`Error::InvalidConfig`]: distlock_core::Error::InvalidConfig
//! [`Error::Unsupported`]: distlock_core::Error::Unsupported
//! [`Error::KindConflict`]: distlock_core::Error::KindConflict
//! [`Error::Lost`]: distlock_core::Error::Lost
//! [`Wakeups::watch`]: distlock_core::backend::Wakeups::watch
//! [`Capabilities::bounds_calls`]: distlock_core::backend::Capabilities::bounds_calls
//! [`Election::observe`]: distlock_core::Election::observe
//! [`Waiters::WholeLock`]: distlock_core::Waiters::WholeLock
//! [`WaiterList::serves_in_order`]: distlock_core::backend::WaiterList::serves_in_order

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod cluster;
mod config;
mod deployment;
mod error;
mod grant;
mod keys;
mod link;
mod node;
mod quorum;
mod replicas;
mod reply;
mod scripts;
mod slots;
mod wake;

pub use backend::RedisBackend;
pub use config::{
    DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_TOKEN_KEEP, MIN_QUORUM_SERVERS, MIN_TOKEN_KEEP, Mode,
    RedisConfig, RedisServer,
};
/// The Redis client this backend is built on, at the version it uses.
pub use redis;

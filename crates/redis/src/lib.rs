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
//! # Opening
//! `redis://[user:password@]host[:port][/db][?prefix=…]` names the server
//! (port 6379), the database (0) and the prefix of every key and channel
//! (`distlock:`; it may not hold `{` or `}`). `rediss://` connects with
//! TLS, checking the server's certificate against the system's roots, or
//! with `?ca=PATH` against the CA certificates in that PEM file alone.
//! `?wait_replicas=N` (one server only) counts a grant or an extension
//! only once N replicas acknowledged it (`WAIT`, sent in one pipeline with
//! the script or extensions it confirms, on their connection).
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
//! # Keys
//! A name's keys are `<prefix>{<tag>}:<role>`, where the tag is the
//! SHA-256 of the name, all 64 hex digits. Redis Cluster hashes only the
//! tag, so all of a name's keys share a slot and one script can touch them
//! all; no name can choose another's slot, and the name itself never
//! appears in a key or a script's text: it travels as an argument, and is
//! stored, as JSON with the holder, in each grant's record for `list`.
//!
//! | role | type | holds |
//! |---|---|---|
//! | `x` | string, expiring with the lease (`PX`) | the exclusive grant: identity, token, record |
//! | `s` | sorted set | readers' or permits' identities, scored by expiry (ms on the server's clock) |
//! | `i` | hash | for `s`: the kind, the limit, and each grant's token and record |
//! | `w` | sorted set | waiting writers' marks, scored by expiry |
//! | `t` | string | the name's latest fencing token, kept 30 days after its last grant |
//! | `released` | pub/sub channel | one message per release |
//!
//! # How it works
//! - **Scripts.** Acquire, extend, release, hand-over, the end of a wait,
//!   a forced release and `list`'s read are each one Lua script, sent with
//!   `EVALSHA` and loaded again once when the server answers `NOSCRIPT`.
//!   Each reads the server's `TIME`; expiry is the server's (`PX`, and
//!   sorted-set scores compared with `TIME`), never the client's clock.
//! - **Acquire.** A free name stores the grant's random 128-bit identity
//!   with the lease as its expiry and returns the next fencing token; a
//!   held name returns the holder's time left, so a waiter without
//!   wake-ups retries no later than that. A reader or a permit joins the
//!   name's sorted set, scored by its expiry, and expired members are
//!   dropped first.
//! - **Extend and release** act only while the stored identity is the
//!   lease's, never with a plain `DEL`: a holder whose lease ran out
//!   cannot touch the next holder's grant. Extending any number of leases
//!   is one pipeline of scripts, one round trip.
//! - **Fencing tokens** are `max(previous + 1, the server's time in µs)`
//!   at every grant of every kind, so they keep increasing after the
//!   counter is lost (a restart without persistence, an eviction) or comes
//!   back older (a restart from a snapshot), as long as the server's clock
//!   does not step back by more than the time since.
//! - **Readers and writers** share a name: a writer is granted when no one
//!   holds it, a reader when no writer holds it and **no writer waits**.
//!   A waiting writer's mark lasts a lease from its latest attempt, so a
//!   writer that vanished holds readers back for a lease at most; its grant
//!   or the end of its wait removes it. At most 1,000 readers hold a name.
//! - **Semaphores** admit up to their limit, each permit its own grant.
//!   A permit asked for on a lock, a lock on a semaphore, or a permit with
//!   another limit than the holders' is [`Error::KindConflict`].
//! - **Hand-over** to the next task of the same client is one script that
//!   ends the old exclusive grant and makes the next, with a new identity
//!   and a higher token, so the lock is never free in between. That script
//!   takes 64 tokens from the counter, not 1: the grant gets the first,
//!   and the next 63 hand-overs of the lock in this process need no
//!   server command (see [below](#hand-overs-without-a-command)).
//! - **Wake-ups.** A release that someone waits for (an attempt found the
//!   grant held, and marked it for as long as the holder had left), a
//!   forced release, a reader's or permit's release and a writer that
//!   stops waiting publish on the name's channel. One subscriber
//!   connection per server subscribes to the channels of the names this
//!   process waits for. While it is down, [`Wakeups::watch`] answers
//!   `None`, waits poll at least once a second, and every waiter is woken
//!   once when it goes down and when it is back.
//! - **`list`** walks the prefix with `SCAN` (never `KEYS`) and reads each
//!   name's live grants in one script; values under the prefix that are
//!   not ours are skipped. `force_release` deletes a name's grants and
//!   wakes its waiters; holders learn at their next extension.
//! - **Timeouts.** Every call ends within the request's operation timeout
//!   ([`Capabilities::bounds_calls`]); `list`, `force_release`, the read of
//!   an election's terms and `server_info` within the client's operation
//!   timeout too, which core gives them.
//!
//! # Hand-overs without a command
//! In single and cluster mode (never in quorum mode, nor with
//! `wait_replicas`, which hand nothing over), a hand-over sends nothing
//! when all of these hold: this backend made the old grant by a hand-over
//! through the server, or took it over as below; the server last
//! confirmed the lease (the script, or an extension by the whole lease,
//! timed from when it was sent) at most half a lease ago on this process's
//! monotonic clock; the next grant asks for the same lease, name and
//! holder (label included); and a reserved token is left. Then:
//! - the key stays as it is, under the identity the script stored; the
//!   next grant's extensions and its release check that identity, and the
//!   old grant can no longer extend, release or hand over (it is refused
//!   without a command);
//! - the next grant's token is the next reserved one: above the old
//!   grant's, and below every token the counter gives anyone later, which
//!   is at least the last reserved one plus one;
//! - core is told when the server last confirmed the lease, so the next
//!   grant ends when the old one would have, and the keeper extends it on
//!   the old one's schedule: a lease deleted, evicted or forced away
//!   meanwhile is reported lost at its next extension, as any other;
//! - **`list`** shows the token the key stores, which lags behind the
//!   current grant's until that grant's next extension writes it (in the
//!   same script, only when larger). The holder and label shown are always
//!   the current grant's, since a grant for another record goes through
//!   the server. Between, `list` (and an election's `leader`) may show a
//!   token up to 63 below the holder's, for at most the extension cadence.
//!
//! Tokens count the server's microseconds: a block spans 64 of them. Where
//! the counter is lost (a restart without persistence, an eviction), the
//! next token comes from the server's clock, and exceeds the reserved ones
//! unless that grant comes within 64 µs of the hand-over that reserved
//! them, by the server's clock.
//!
//! # Quorum mode
//! With `?mode=quorum` and N ≥ 3 independent servers (not replicas of one
//! another), each server keeps its own copy of every lock, made by the
//! same scripts, and a lock is held while a majority holds it:
//! - **Acquire** asks every server at once, and counts only when a
//!   majority granted within the lease, less the time the attempt took and
//!   a drift margin of 1% of the lease; otherwise the copies it made are
//!   deleted again. It is decided as soon as the answers in decide it,
//!   so a slow or absent server holds nobody up; each server's call goes
//!   on as a task of its own. Each server gets at most a quarter of the
//!   lease to answer, and a server away when the backend opens is
//!   connected to in the background.
//! - **Extend** succeeds on a majority; the lease is lost when so many
//!   servers refuse that no majority can remain. **Release** and a forced
//!   release go to every server.
//! - **Fencing tokens.** Each granting server issues its own token; the
//!   grant's is the largest of its majority's, and the counters of that
//!   majority are raised to it before the grant is returned. A grant's
//!   token is therefore greater than every earlier grant's while, for the
//!   two grants, one server that both majorities share keeps its counter;
//!   where every such server lost it (a restart without persistence), the
//!   token comes from that server's `TIME`, and is still greater as long
//!   as the servers' clocks differ by less than the time between the
//!   grants.
//! - **Kinds.** Exclusive and shared locks; semaphores are
//!   [`Error::Unsupported`] (each server counts only its own permits, so
//!   permits held by different majorities could exceed the limit). No
//!   hand-over: a release and a new acquisition take its place.
//! - **Wake-ups** come from a subscriber connection to every server, and
//!   are on while a majority of them is open. **`list`** shows each grant
//!   that a majority holds, once.
//! - It survives the loss of a minority of servers. A server that came
//!   back empty (restarted without persistence) abstains for a lease,
//!   however soon it is back: its grant counts only when every server
//!   granted, so a lock whose grant rested on its lost copy and one other
//!   is not granted again. Meanwhile grants need the other servers, and a
//!   new deployment's first lease grants only what every server grants.
//!   A restart from an older snapshot is not covered: run the servers
//!   without persistence, or with `appendfsync always`.
//!
//! # Cluster mode
//! With `?mode=cluster`, the URL's hosts are seeds: nodes of one Redis
//! Cluster (database 0 only; `wait_replicas` is refused). Each name lives
//! on the master of its keys' slot and gets exactly what one server
//! gives, every kind and hand-over included:
//! - **Routing** is the `redis` crate's cluster client: each script goes
//!   to its slot's master, `MOVED` and `ASK` are followed, and `NOSCRIPT`
//!   loads the script on every node.
//! - **Extensions** are one pipeline per master, sent at once; a batch
//!   that meets a moved slot is sent again lease by lease. No server clock
//!   is reported: each master has its own.
//! - **Slot moves.** While a name's slot moves, Redis answers `TRYAGAIN`
//!   to its scripts, retried until the call's timeout: a move longer than
//!   the lease less the safety margin loses that slot's locks.
//! - **Wake-ups.** A release's `PUBLISH`, when someone waits for it,
//!   crosses the cluster bus to every node: one subscriber connection per seed, heard while any is open.
//! - **`list`** walks every master with `SCAN`.
//! - **Failover** inside the cluster is asynchronous replication, as for
//!   one server with replicas: a promoted replica may lack a grant.
//!
//! docs/redis.md states the rules, the token guarantee and its assumptions
//! in full, for quorum and cluster modes.
//!
//! # What Redis can and cannot promise
//! - **Failover.** Replication is asynchronous: a primary can acknowledge a
//!   grant and fail before any replica has it, and the promoted replica
//!   then grants the lock to someone else while the first holder still
//!   believes it holds it, until its next extension is refused.
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
//! [`Wakeups::watch`]: distlock_core::backend::Wakeups::watch
//! [`Capabilities::bounds_calls`]: distlock_core::backend::Capabilities::bounds_calls

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod cluster;
mod config;
mod deployment;
mod error;
mod handed_over;
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

//! distlock's PostgreSQL backend: one row per lock, changed by single
//! statements judged against the server's clock (`mode=lease`, the
//! default), or session advisory locks on a connection pinned to each
//! grant (`mode=advisory`).
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
//! # Lease mode works through PgBouncer in transaction mode
//! The driver is [`tokio_postgres`], because it can send every statement
//! unnamed (`Client::query_typed`: Parse, Bind, Execute and Sync with an
//! unnamed statement, in one round trip). PgBouncer 1.18, Debian 12's,
//! predates prepared-statement support in transaction-pooling mode, where
//! consecutive statements may run on different server connections, so a
//! named prepared statement would go missing. The backend also keeps no
//! session state on pooled connections: no `SET`, no temporary tables, no
//! `LISTEN`, no session advisory locks. (This holds for lease mode;
//! [advisory mode](#advisory-mode) needs a direct connection, and prepares
//! its statements once per connection.)
//! Connections come from a small pool ([`deadpool_postgres`], 16 at most per backend). Release wake-ups
//! need a connection that PgBouncer does not pool: see `listen_url` below.
//!
//! # The table (lease mode)
//! One row per name in use (see [Rows of unused names](#rows-of-unused-names)),
//! the table created on first use (concurrent
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
//! | `waiting` | `jsonb` array of waiting writers' marks, `{id, exp}`, and in [fair mode](#fair-mode) their places in line |
//!
//! # How lease mode works
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
//!   deleted (see [Rows of unused names](#rows-of-unused-names)).
//! - **Extend and release** act only on a live grant with our random grant
//!   identity. Extending any number of leases is one statement.
//! - **Waiting** is woken by releases (below); without a wake-up, a waiter
//!   tries again when the first holder's lease ends, or polls with core's
//!   jittered backoff while wake-ups are off.
//! - **Timeouts.** Each statement waits at most the request's operation
//!   timeout for a connection and its answer; a connection whose statement
//!   was abandoned is closed, never reused.
//!
//! # Rows of unused names
//! A name's row lasts only while it is used, so that names used once (one
//! per order, per user, per job) do not grow the table, nor the work of
//! `list`, without bound. In lease mode a row is unused when no grant and
//! no waiting writer's mark in it lives; in advisory mode, when no session
//! holds the name's key or its writers' intent key. The release that
//! leaves a row unused deletes it in the same statement; rows it cannot
//! (a lease that ran out unreleased, a mark that outlived its wait, a
//! grant of the name under way elsewhere as it was released) are deleted
//! by a sweep each backend runs about once a minute, 100 rows per
//! statement, skipping rows other statements have locked.
//! [`PostgresBackend::remove_idle_rows`] sweeps on demand.
//!
//! The next grant of the name makes its row again, and its token is still
//! above every token of the deleted row. That rests on the server's clock
//! (`clock_timestamp()`) never running backwards, by these steps:
//!
//! - a row is deleted only while the server's clock, read in the deleting
//!   statement, is past the row's token (a token runs ahead of the clock
//!   only for a name granted more than a million times a second; such a
//!   row is kept until the clock passes it);
//! - a new row's token is at least the server's clock read by the grant
//!   that makes it, and that reading comes after the deletion committed.
//!   In lease mode each acquire takes a per-name gate, a transaction-level
//!   advisory lock in the one-`bigint` key space, shared, before it reads
//!   the clock, and a deletion takes it exclusively, without waiting, so
//!   the two never overlap: a deletion that finds the gate taken leaves
//!   the row to a later sweep. In advisory mode a grant's token is bumped
//!   on a row its statement sees, so the row existed before the statement
//!   began, and a row made after a deletion comes after it.
//!
//! A deletion never takes a row from a holder or a waiter: its checks and
//! the delete are one statement, and in advisory mode a grant counts only
//! once its statement has bumped the token on the name's row, which a
//! session that took the key as the row was deleted cannot do. A failover
//! to an asynchronous standby can lose recent deletions with the rest,
//! which only brings rows back.
//!
//! # Election terms
//! Each grant won by [`Election::campaign`](distlock_core::Election::campaign)
//! is recorded as a term, so that
//! [`Election::observe`](distlock_core::Election::observe) returns every
//! leader, the short-lived ones too. The record is a table beside the
//! mode's own, in its schema: its name with `_terms` added
//! (`distlock_locks_terms`, `distlock_advisory_terms`; a name too long
//! for that is cut and a hash of it added), created when the backend
//! opens, also beside a table made by an earlier release. It has a row
//! per election that ever had a term: `name` (`bytea`, primary key) and
//! `terms`, a `jsonb` array of the last [`TERMS_KEPT`](distlock_core::backend::TERMS_KEPT)
//! (32) terms, oldest first, each its token, the term before it, and the
//! holder with the campaign's value whole (at most 1 KiB).
//!
//! - **Written with the grant.** A campaign's acquire is its own
//!   statement: the grant, and, only when it grants, the term appended
//!   (and terms past 32 dropped) by a common table expression of the same
//!   statement, so the record holds a term exactly when it was granted.
//!   In advisory mode the append is in the statement that bumps the token
//!   while the session holds the lock; a statement that fails ends its
//!   session, and the lock with it. The election's row is locked and read
//!   at its latest version (`INSERT … ON CONFLICT DO UPDATE`), so each
//!   term names the one recorded just before it.
//! - **What it costs.** Plain acquires send the statements they always
//!   did: only campaigns write the record, one round trip as before, and
//!   observers read it with one statement. Each election's row holds at
//!   most 32 terms, some 40 KiB with the longest values, and stays when
//!   the lock's row goes (see [Rows of unused names](#rows-of-unused-names)),
//!   so that an observer still reads the last terms of an election nobody
//!   leads; delete the row of an election you retire.
//! - **Without the privilege to create it.** A backend whose role may use
//!   the lock table but not create the table of terms beside it still
//!   locks, and says so in a warning when it opens; but it keeps no
//!   record: observing is `Unsupported`, and a campaign is refused with
//!   [`Error::Denied`](distlock_core::Error::Denied), rather than won
//!   unrecorded, which observers elsewhere would miss. Open a backend
//!   once as a role that may create the table, then this one again.
//!
//! # Fair mode
//! With `fair=true`, whole locks go to waiters in the order they asked,
//! across processes and within one: each waiting task takes a place in the
//! store, and the release hands the lock to the first place itself (see
//! [`Capabilities::fair`](distlock_core::backend::Capabilities::fair)). This
//! section is lease mode's; advisory mode's line is the server's own (see
//! [Fair mode in advisory mode](#fair-mode-in-advisory-mode)).
//!
//! - **What is stored.** A waiter's place is an entry of the row's
//!   `waiting` array, `{id, exp, lease, holder}` (and `term` for a
//!   campaign), kept in the order places were taken, each under the row's
//!   lock. A place lives a lease from its waiter's latest attempt, by the
//!   server's clock. Readers wait while a place lives.
//! - **The hand-off.** The statement that releases (or ends a wait whose
//!   place was granted) grants the first live place when no holder is
//!   left: a grant under the place's identity, with the next fencing
//!   token, the place's lease from the server's now and its holder, and,
//!   for a campaign, its term appended in the same statement. Its
//!   notification wakes the waiter, whose next attempt takes the grant
//!   over under its own identity, for a lease from then. A holder whose
//!   lease ran out is passed on by the next attempt of any waiter of the
//!   name, which tries again when the first holder's lease ends.
//! - **What a waiter costs.** One statement per attempt: the first takes
//!   the place, and the next renew it every half lease, or ask when the
//!   holder's lease ends. A release that grants a place names it in its
//!   notification (`pg_notify`, as in [Release wake-ups](#release-wake-ups)):
//!   only the process whose waiter has that place acts on it, and its
//!   other waiters of the name answer from memory, without a statement.
//!   A release that grants nobody, a lost listening connection or an
//!   overflowing queue of notifications has every waiter ask again.
//! - **What a dead waiter costs.** A place never renewed drops out a lease
//!   after its last attempt; a grant made to a place nobody claims runs
//!   out after the place's lease, and the next waiter's attempt passes it
//!   on. A single try takes no place, and is granted only when nobody
//!   holds the name or waits in line.
//! - **Every client of a name must be fair.** A client without
//!   `fair=true` on the same table takes no place, and its release hands
//!   nothing on: the name is then free to whoever asks first, until a
//!   waiter's next attempt passes it on.
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
//! backend logs a warning, stops listening, offers no
//! [`wakeups`](distlock_core::backend::Abilities::wakeups), and waits poll. A `listen_url` pointing straight at the server behind
//! PgBouncer gives the wake-ups back. A lease that runs out notifies
//! nobody.
//!
//! The listening connection is read as fast as notifications come, so
//! that it never fills the server's notification queue (which would stop
//! every release in the database from notifying), into a queue that keeps
//! each name released once, however often it was announced, and at most
//! 1,024 names: past that, the names are forgotten and every waiter of the
//! backend tries once more instead. A notification wakes the waiters of
//! its name through an index by the name's hash, whatever the number of
//! names waited for. [`PostgresBackend::wake_up_queue`] says how the
//! queue has fared.
//!
//! # Server restarts and failover
//! In lease mode, locks are rows, so they outlive a restart of the server; a holder whose
//! extensions resume within its lease keeps its lock, and fencing tokens
//! keep increasing. A failover to an asynchronous standby can lose the
//! latest grants. In advisory mode a restart or a failover ends every
//! session, and every lock with it: each holder's `lost()` fires at once;
//! tokens, kept in the token table, keep increasing.
//!
//! # Advisory mode
//! `mode=advisory` holds each grant as a session advisory lock
//! (`pg_try_advisory_lock`, or `pg_try_advisory_lock_shared` for a
//! reader), the locks sqlx's `PgAdvisoryLock` takes, with distlock's
//! waiting, timeouts, cancellation and loss signal. It needs PostgreSQL 14
//! or later; opening refuses an older server.
//!
//! - **A connection per grant.** Each grant lives on a connection of its
//!   own, outside the pool, which the grant keeps for its whole life; the
//!   lock ends when that connection does. Released connections are kept
//!   for later attempts (8 at most, one opened ahead). So each lock held,
//!   and each waiting writer, costs a server connection: a process that
//!   holds many locks at once needs as many of the server's
//!   `max_connections`.
//! - **Prepared statements.** Since its connections are its own from
//!   open to close, this mode prepares each of its statements once per
//!   connection, as a named prepared statement, and then only binds and
//!   executes it, as sqlx does. A statement the connection lost (someone
//!   ran `DEALLOCATE` or `DISCARD ALL` on it) is prepared again, once.
//! - **Losses.** A connection that ends (terminated by an administrator,
//!   a server restart, a network error) makes the grant's
//!   [`lost`](distlock_core::LockGuard::lost) fire at once. A connection
//!   that goes silent (a network partition) is caught by the extension,
//!   which in this mode checks the grant's connection with one round trip
//!   each extension period: with no check answered within the lease minus
//!   the safety margin, the holder gives the lock up. The server, for its
//!   part, ends a holder's connection after one lease without a statement
//!   (`idle_session_timeout` is set to the lease on it), so a partitioned
//!   or stopped holder frees the lock a lease after its last check, never
//!   before it gave the lock up, and long before TCP would notice. So
//!   locks in this mode are not [process-bound](distlock_core::backend::Capabilities::process_bound):
//!   they expire like leases when their holder stops checking them. The
//!   server also probes the connection of a holder cut off in the middle
//!   of a statement, after a lease (`tcp_keepalives_idle`, which Linux
//!   caps at 32,767 s): a lease longer than [`MAX_ADVISORY_LEASE`] is
//!   refused with `InvalidConfig` naming `lease` (exit 2 from the CLI),
//!   rather than left unenforced.
//! - **No `min_hold`.** A lock cannot be kept after its release, since it
//!   ends with its connection: an acquire with
//!   [`min_hold`](distlock_core::AcquireOptions::min_hold) fails at once
//!   with `Unsupported`. Lease mode offers it.
//! - **Keys.** A name's lock is the two-`int4` key (`advisory_class`,
//!   objid). The table gives each name its objid (even, non-negative):
//!   tried first at a hash of the name, and at the next even numbers when
//!   another name has it. A unique constraint decides races, so distinct
//!   names never share a key, however their hashes fall, and every process
//!   reads the same key for a name. The class keeps distlock's keys apart
//!   from the application's own advisory locks: give distlock a class
//!   that nothing else uses, and one class per token table (two tables in
//!   one class would give different names the same key). The
//!   one-`bigint` key form is a different key space, never ours.
//! - **The token table.** One row per name in use (see
//!   [Rows of unused names](#rows-of-unused-names)): `name` (`bytea`, primary key,
//!   the exact bytes, NUL included), `objid` (unique), `fencing_token`,
//!   and `holders`, which records each grant's token and holder under its
//!   connection's server process id, for `list`. Each grant bumps the
//!   token to `greatest(previous + 1, server time in µs)` in the same
//!   statement as the lock, only when granted, so tokens keep increasing
//!   across every grant of both kinds.
//! - **Readers and writers.** Writers are not starved: a writer that waits
//!   holds its name's intent key (objid + 1) shared on its waiting
//!   connection, and a reader does not try while any writer's intent is
//!   held (it reads `pg_locks`). A writer's intent ends with its grant,
//!   when it stops waiting, or with its connection (the server ends that
//!   one, too, after a lease of silence).
//! - **Semaphores** are not offered: asking for a permit is
//!   [`Error::Unsupported`](distlock_core::Error::Unsupported). Use
//!   `mode=lease`.
//! - **Releases** unlock on the grant's connection and notify waiters in
//!   the same statement, as in lease mode. Waiters also try again at least
//!   once a second, since a holder whose connection ended frees the lock
//!   without a notification.
//! - **`list`** shows every holder in the class, from `pg_locks` joined
//!   with the token table, each with its kind, token and holder; a lock
//!   lasts as long as its holder's connection, so `expires_in` is `None`.
//! - **Forced releases** (`distlock release --force`) terminate, with
//!   `pg_terminate_backend`, every connection that holds the name's key,
//!   found in `pg_locks`, and wait up to 2 s for each to end. The holders'
//!   `lost()` fires at once. Terminating another role's connection needs
//!   membership in `pg_signal_backend` (or to be that role); a
//!   superuser's connections only a superuser can end.
//! - **No PgBouncer in transaction mode.** A session advisory lock
//!   belongs to one server connection, which PgBouncer in transaction mode
//!   hands to other clients between transactions: a release could then
//!   run on another server connection and leave the lock held. Opening
//!   checks for it, and refuses with [`Error::InvalidConfig`](distlock_core::Error::InvalidConfig)
//!   naming `mode`: two connections of the backend take the same key,
//!   which behind such a pooler usually lands on the same server
//!   connection (advisory locks are re-entrant there) or unlocks on
//!   another. "Usually": a busy pooler can pass the check, so connect
//!   advisory mode straight to the server (or through PgBouncer in session
//!   mode). Each check of a held lock also compares the server process id
//!   with the one the grant was made on, and reports the lock lost when
//!   they differ.
//! - **Hand-overs** are not offered: a lock passes between the tasks of
//!   one client by a release and a new grant.
//!
//! # Fair mode in advisory mode
//! `fair=true` serves whole locks to waiters in the order they asked,
//! across processes and within one, by the server's doing (see
//! [`Capabilities::fair`](distlock_core::backend::Capabilities::fair)). Readers
//! are not covered; a waiting writer keeps new readers out, as without
//! it. A single try never jumps the line: it fails while anyone holds or
//! waits. Off by default, and then nothing changes.
//!
//! In advisory mode the line is PostgreSQL's own queue of the name's key,
//! which its lock manager keeps in the order of arrival:
//! - **Waiting.** A writer's first waiting attempt that finds the lock held
//!   keeps its connection (holding the writer's intent, as above), and a
//!   task of the wait runs `pg_advisory_lock` on it. A release hands the
//!   lock to the first in line inside its `pg_advisory_unlock`; the
//!   waiter's statement then bumps the token, and appends a campaign's
//!   term, in the statement that was granted, and its task wakes the wait
//!   in its own process. The wait's next attempt takes the grant over with
//!   one round trip on that connection, which starts the server's idle
//!   timer (the lease) from that attempt. Nothing is stored beyond what
//!   advisory mode stores.
//! - **What a waiter costs:** a connection of its own for the whole wait,
//!   and no statement while it waits. Releases still notify, for readers
//!   and other clients: the name's waiters in each process then look at
//!   their place, without asking the server.
//! - **A waiter that dies:** its connection closes, and the server, which
//!   checks a waiting connection every second
//!   (`client_connection_check_interval`, on Linux servers), drops its
//!   place; elsewhere it drops out when its turn comes. A waiter that
//!   stops but keeps its connection (a stopped process) keeps its place;
//!   when its turn comes it is granted, and the server ends its connection
//!   after one lease of silence (`idle_session_timeout`), which passes the
//!   lock on. Either way the line is held up for a lease at most.
//! - **Leaving the line.** A wait that ends (its timeout, a cancellation,
//!   a dropped future) cancels its statement from another connection at
//!   once, and releases a grant that came meanwhile; a cancelled waiter's
//!   connection is closed rather than kept.
//! - **`lock_timeout`.** PostgreSQL cannot renew a place without taking it
//!   out of the queue, and the wait's deadline is kept by the client,
//!   which cancels. So a place waits under a `lock_timeout` of ten leases,
//!   a bound by the server's clock for a place nobody tends: when it runs
//!   out, a wait that made an attempt since joins the line again, at its
//!   end, and one that made none is given up. A wait longer than ten
//!   leases may so lose its turn, once per ten leases.
//! - **Order.** Waiters are served in the order their `pg_advisory_lock`
//!   statements reached the server, which is sent right after the attempt
//!   that found the lock held. A waiting statement keeps a snapshot, as
//!   any running statement does, which holds back vacuum's horizon while
//!   it waits.

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
mod rows;
mod store;
mod sweep;
mod table;
mod terms;
mod tls;
mod wake;

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
pub use tls::SslMode;
/// The driver this backend is built on, at the version it uses.
pub use tokio_postgres;
pub use wake::{WakeUpQueue, WakeUps};

//! distlock's etcd backend: every grant and every waiter is a key on one
//! etcd lease per client, and waiters are served in revision order.
//!
//! # Opening
//! `etcd://[user:password@]host[:port][,host[:port]…][?prefix=…]` names
//! the members of one cluster (default port 2379) and the key prefix
//! (default `distlock/`); `etcds://` connects with TLS, with `?ca=PATH` for
//! a private CA; `fair=true` turns [fair mode](#fair-mode) on
//! ([`EtcdConfig::fair`] in code). Any other option is
//! [`Error::InvalidConfig`]. The user and
//! password authenticate, and are never printed.
//!
//! How it works (sessions, keys, watches, the record of terms, fair mode's
//! line, the gRPC client) and how it is tested on a cluster is in
//! `docs/etcd.md` in the repository; this page says what a caller can rely
//! on.
//!
//! # What a caller can rely on
//! - **One session per client.** Every key of a client hangs on one etcd
//!   lease, which core's keeper renews with one keepalive per extension
//!   period, whatever the number of locks held (the backend's
//!   [`Abilities::session`]). etcd leases are whole seconds: the session's
//!   TTL is the client's lease rounded up to whole seconds, and one more,
//!   and a lease under one second is [`Error::InvalidConfig`]. A session
//!   that ends is replaced by the next grant or wait, and ends exactly the
//!   grants made on it.
//! - **A dead holder's locks come back** when its session ends: at most
//!   the TTL after its last renewal, or after the last leader election if
//!   that came later (a new leader renews every lease to its full TTL).
//!   [`LockClient::close`] (and every `distlock run`, before it exits)
//!   revokes the session, so its keys go at once.
//! - **Waiting is first come, first served** by etcd's revision across
//!   clients, and in local queue order within one; a waiting writer keeps
//!   later readers out, and a release wakes the next waiter, not the herd.
//! - **Fencing token**: the create revision of the holder's key, which
//!   strictly increases through restarts and leader changes. Readers or
//!   permits that one release lets in together carry the revisions of when
//!   they asked: each is above every token granted before that release,
//!   but they may be granted in another order than their tokens.
//! - **A single try** (`try_acquire`) that loses leaves no key behind.
//! - **Loss.** `lost()` fires when etcd refuses a keepalive (the session is
//!   gone), when no keepalive succeeded for the lease minus the safety
//!   margin, and within moments when the holder's own key is deleted (a
//!   forced release, an ended session) or taken up by a resume, for every
//!   grant held longer than 25 ms.
//! - **`min_hold`**: a release before it has passed leaves the key to etcd,
//!   on an etcd lease of the time left (whole seconds, rounded up), which
//!   etcd ends by its own clock.
//! - **Elections** (`LockClient::election`) record each term, so that an
//!   observer sees every leader, the short-lived ones too, and a campaign
//!   that lost a race records nothing. Out of fair mode a campaign does not
//!   queue: it is granted only when the name is free. The record keeps the
//!   last [`TERMS_KEPT`](distlock_core::backend::TERMS_KEPT) terms and outlives its
//!   leaders and a forced release; deleting it (the key
//!   `<prefix>#terms/<percent-encoded name>`, or `<prefix>#terms/` for all)
//!   starts it anew, and an observer is not told of the terms it had not
//!   read yet.
//! - **`list`** shows each holder's time left as its session's: how long
//!   etcd keeps the keys if nobody renews them.
//! - **Nothing is left behind.** A release, or the end of a wait, that
//!   fails or is cut off by an election is tried again until etcd answers,
//!   and stays owner-checked. A release that finds its key gone reports the
//!   loss first, so `lost()` has fired when it answers that the lock was
//!   not ours.
//! - **Reads are linearizable**: no decision rests on a serializable read.
//!
//! # Resuming a lock
//! [`LockClient::resume`] takes a grant up by its handle, in both modes
//! and for every claim (a writer's, a reader's, a permit), while etcd
//! still holds it: its key is there, unchanged since its holder last wrote
//! it, and its session has a second or more left by the leader's clock (a
//! session whose TTL ran out is not resumed even before etcd deletes its
//! keys). One transaction, guarded by the key's revisions as read,
//! rewrites the key with the new identity on the resuming client's own
//! session: the fencing token (the key's create revision) and its place
//! before its waiters stay, and the old session's end no longer ends the
//! grant. The old holder, if it still runs, is told by its key's watch
//! (`lost()` fires, with `LossReason::Detected`, though its own session
//! still renews), and its extension and release find the grant not
//! theirs. A grant made by a version of this crate that did not record
//! identities in its keys cannot be resumed.
//!
//! # Fair mode
//! Off by default; `fair=true` in the URL, or [`EtcdConfig::fair`]. Whole
//! locks go to waiters in the order they asked, across processes and
//! within one, and a release passes the lock on in its own write, waking
//! only the next waiter's process. A waiter costs no writes while it
//! waits. A waiter whose process died holds the line up until etcd ends
//! its session (the TTL after the later of its last renewal and the last
//! leader election); a cancelled wait leaves the line before it returns.
//! A single try never jumps the line. A campaign queues like any waiter,
//! and each term is recorded once, in grant order; a leader that
//! `Election::leader` names may not have recorded its term yet, for the
//! moment of its take-over. Readers and permits are served as out of fair
//! mode.
//!
//! # The client
//! The backend speaks etcd's gRPC API through a small client of its own;
//! building it needs no `protoc`. The feature `raw-client` makes the
//! client public as `raw`.
//!
//! [`Error::InvalidConfig`]: distlock_core::Error::InvalidConfig
//! [`Abilities::session`]: distlock_core::backend::Abilities::session
//! [`LockClient::close`]: distlock_core::LockClient::close
//! [`LockClient::resume`]: distlock_core::LockClient::resume
//! [`EtcdConfig::fair`]: crate::EtcdConfig::fair()

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod deployment;
mod error;
mod grant;
mod keys;
mod leftovers;
mod release;
mod requests;
mod rules;
mod session;
mod terms;
mod transactions;
mod waiting;
mod watch;

// The client is public with the `raw-client` feature only: its messages
// are etcd's wire format, generated, and not an API this crate promises
// to keep.
#[cfg(feature = "raw-client")]
#[cfg_attr(docsrs, doc(cfg(feature = "raw-client")))]
pub mod raw;
#[cfg(not(feature = "raw-client"))]
#[allow(unreachable_pub, unused_imports, dead_code)]
mod raw;

pub use backend::EtcdBackend;
pub use config::{DEFAULT_PORT, DEFAULT_PREFIX, EtcdConfig};
pub use session::session_ttl;

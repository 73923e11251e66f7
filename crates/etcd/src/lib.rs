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
//! # How it works
//! - **One session per client.** The first grant or wait creates one etcd
//!   lease, and every key of this backend hangs on it. Core's keeper renews
//!   it with one keepalive per extension period, whatever the number of
//!   locks held (the backend's [`Backend::session`]). etcd leases are whole
//!   seconds: a lease under one second is [`Error::InvalidConfig`], and
//!   etcd's TTL is the client's lease plus half, rounded up (see
//!   `session.rs` for why).
//! - **A session that ends is replaced**, by the next grant or wait. Each
//!   grant keeps the session it was made on: a renewal keeps only the
//!   grants of the session it renewed, and the end of a session, reported
//!   once to the keeper, ends exactly the grants made on it.
//! - **Closing.** [`LockClient::close`] (and every `distlock run`, before
//!   it exits) revokes the session, as etcd's own `Session.Close()` does:
//!   its keys go at once. A session left behind by a process that exits
//!   without closing lives for its TTL after its last renewal, and every
//!   leader election renews all leases to their full TTL.
//! - **Keys.** Each waiter writes its own key under the name's range,
//!   `<prefix><percent-encoded name>/<id>`, on the session's lease, in a
//!   transaction that creates it only if absent. Keys are ordered by their
//!   create revision: an exclusive key holds when no key precedes it, a
//!   shared key when no exclusive key precedes it, a permit of N when
//!   fewer than N keys precede it. So waiting is first come, first served
//!   by revision: across clients in revision order, and within a client in
//!   its local queue order.
//! - **Fencing token**: the create revision of the holder's key. etcd's
//!   revision totally orders every write of the cluster, so it strictly
//!   increases through restarts and leader changes. Readers let in
//!   together may be granted in another order than their tokens; each
//!   reader's token is above every earlier writer's.
//! - **Waiting** watches only the key just before the waiter's (for a
//!   reader, the last writer before it), so a release wakes one waiter,
//!   not the herd.
//! - **A single try** (`try_acquire`) reads the name and writes its key
//!   only if it would hold, in a transaction that fails if the name changed
//!   meanwhile: a try that loses leaves no key.
//! - **Loss.** `lost()` fires when etcd refuses a keepalive (the session is
//!   gone), when no keepalive succeeded for the lease minus the safety
//!   margin (core's keeper), and within moments when the holder's own key
//!   is deleted: each grant held longer than 25 ms watches its key, from
//!   the revision it was created at, so a deletion made before the watch
//!   began is seen too. Shorter holds cost no watch.
//! - **`min_hold`**: a release before it has passed moves the grant's key,
//!   owner-checked in one transaction, onto an etcd lease of its own of the
//!   time left (whole seconds, rounded up), which etcd ends by its own
//!   clock. A move that fails leaves the key to be deleted at the next
//!   renewal, as a failed release does.
//! - **Elections** (`LockClient::election`) record each term, so that an
//!   observer sees every leader, the short-lived ones too. A waiter's key
//!   is granted by its predecessor's deletion, with no write of its own to
//!   record a term in; so out of fair mode a campaign does not queue (in
//!   fair mode it does: see below). Like a single try, it
//!   writes its key only when the name is free, and in that same
//!   transaction rewrites the name's record of terms, guarded by compares
//!   on the name's keys and on the record as read: a campaign that lost a
//!   race writes no key and no term. The term is that transaction's
//!   revision. A waiting campaign watches the name's keys, and reads again
//!   (a read-only transaction, no raft proposal) at each deletion.
//! - **The record of terms** is one key per election,
//!   `<prefix>#terms/<percent-encoded name>`, on no etcd lease: it outlives
//!   its leaders, and a forced release leaves it. It holds the last
//!   [`TERMS_KEPT`](distlock_core::TERMS_KEPT) terms as JSON, each with its
//!   host, pid and value: a few KiB for short values, at most about 70 KiB
//!   for 1 KiB values that JSON escapes throughout, and each rewrite stays
//!   in etcd's history until compaction, as every write does. Only
//!   campaigns read and write it; other grants never touch it. Records sort
//!   before every lock key, so `list` does not read them. Deleting a
//!   record (or `<prefix>#terms/`, all of them) starts it anew, and an
//!   observer is not told of the terms it had not read yet.
//! - **`list`** shows each holder's time left as its session's: how long
//!   etcd keeps the keys if nobody renews them (the padded TTL).
//! - **Nothing is left behind.** A key lives as long as the client's
//!   session, which lives as long as the client holds or waits for
//!   anything; so a release or an ended wait whose delete fails or is
//!   cancelled is deleted again at every renewal until etcd answers. A
//!   release, or the end of a wait, that fails during an election (no
//!   leader, a member that does not answer) is tried again within its
//!   operation timeout; a release stays owner-checked (the key's create
//!   revision), and a key found gone after an unanswered try counts as
//!   released only while the grant's session lives (then only a release,
//!   or a forced one, can have deleted it). A
//!   release that finds its key gone reports the loss first, so `lost()`
//!   has fired when it answers that the lock was not ours.
//! - **Reads are linearizable**: every decision reads in a transaction or
//!   a default (linearizable) range read, never a serializable one.
//!
//! # Fair mode
//! Off by default. In fair mode core lets every task wait by itself, each
//! with a key of its own (one per waiting task, not one per process), so
//! whole locks go to waiters in etcd's revision order, which is the order
//! they asked, across processes and within one. Nothing else is stored.
//! - **A release passes the lock on in its own write**: the holder's key
//!   goes, and the lock is then the first remaining key's. Every waiter
//!   watches only its predecessor, so only the next waiter's process is
//!   woken (its wake-ups are per name, but a waiter whose own predecessor
//!   is still there answers without a read); the next waiter reads the
//!   name once and has the grant, with the fencing token its key was
//!   created with. A holder whose session ends passes the lock on the
//!   same way.
//! - **A waiter costs no writes while it waits**: its key keeps its place
//!   on the client's session, which the keeper renews with the rest. It
//!   reads the name again only when its predecessor goes, or after half a
//!   lease in case a watch broke unseen.
//! - **A dead waiter** (its process killed) holds the line up until etcd
//!   ends its session, the session's TTL (the lease and a second, rounded
//!   up) after the later of its last renewal and the last leader election,
//!   which renews every lease. A cancelled wait deletes its key before it
//!   returns.
//! - **A single try** writes only when the name has no key at all: it never
//!   jumps the line.
//! - **A campaign queues** like any waiter. When its key comes first, its
//!   next attempt takes the grant over in one transaction that rewrites its
//!   key (marking it taken) and files its term, the key's create revision,
//!   in the record, guarded by compares on the key (created at its place,
//!   not yet taken) and on the record. So each term is recorded once (a
//!   take-over whose answer was lost is found done by its key's mod
//!   revision), in grant order, and only for a key that held; a leader
//!   found by `Election::leader` may not have recorded its term yet, for
//!   the moment of its take-over.
//! - Readers and permits are served as out of fair mode.
//!
//! # The client
//! The backend speaks etcd's gRPC API through a small client of its own
//! (tonic, rustls with ring), whose message code is generated from trimmed
//! copies of etcd's `.proto` files and committed: building needs no
//! `protoc`. Calls are spread over the members named in the URL; HTTP/2
//! pings every 5 s drop a connection to a member gone silent; with
//! credentials, a token etcd refuses is replaced and the call sent once
//! more. The feature `raw-client` makes the client public as `raw`.
//!
//! [`Error::InvalidConfig`]: distlock_core::Error::InvalidConfig
//! [`Backend::session`]: distlock_core::Backend::session
//! [`LockClient::close`]: distlock_core::LockClient::close
//! [`EtcdConfig::fair`]: crate::EtcdConfig::fair()

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod deployment;
mod error;
mod keys;
mod leftovers;
mod release;
mod requests;
mod rules;
mod session;
mod terms;
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

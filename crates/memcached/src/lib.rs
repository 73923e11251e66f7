//! distlock's memcached backend: leases held as memcached items.
//!
//! **memcached gives an efficiency lock, not a correctness lock.** Use it
//! to keep several instances from doing the same expensive work at once,
//! where a rare overlap costs time but not data. When an overlap would
//! corrupt something, use the MongoDB backend (`mongodb://…`), which keeps
//! locks durably, and check fencing tokens at the protected resource.
//!
//! # How it works
//! - **Acquire** stores the grant with `ms <key> <len> ME T<ttl> c` (an
//!   `add`: it succeeds only if the key is absent, and returns the item's
//!   CAS). The value is the grant's random 128-bit identity, followed by
//!   the name and holder as JSON for people inspecting the cache. In the
//!   same round trip, the name's token counter is incremented (`ma`). Only
//!   when the add fails is the key's remaining time read (`mg … t`), to
//!   tell waiters when to come back.
//! - **Extend** stores the value again only if the item still has the CAS
//!   of our last store (`ms … C<cas> T<ttl> c`), which returns the new CAS:
//!   one command. **Release** deletes only with that CAS (`md <key>
//!   C<cas>`), never unconditionally, so a holder whose lease ran out
//!   cannot delete the next holder's lock.
//! - **Hand-over** (sharded mode), when a task releases a lock that another
//!   task of the same client waits for: the next grant's value is stored
//!   over ours only if the item still has the CAS of our last store
//!   (`ms … C<cas> T<ttl> c`), in one write with the token counter's
//!   increment, so the lock is never free in between. The token is above
//!   the old one even if the counter was lost meanwhile. That increment
//!   reserves a block of 16 tokens: the next 15 hand-overs of the run need
//!   no server command at all, while at least half of the lease is left
//!   since the server last confirmed it. The key then stays as it is, the
//!   new grant takes the next reserved token and the old grant's place
//!   (its remembered CAS, and its confirmation, so it ends when the old
//!   lease would have unless extended), and the old grant can no longer
//!   extend, release or hand over. Quorum mode does not hand over
//!   (`Error::Unsupported`): the lock is released, and the waiter acquires
//!   it.
//! - **A remembered CAS is used only on the memcached process that issued
//!   it.** CAS values start again from 1 when memcached restarts, so after
//!   a restart a remembered CAS could match someone else's item. Each
//!   connection learns, when it opens, which process it reaches (`pid` and
//!   start time, from `stats`); a restart drops every connection to the
//!   old process, so a connection that reports the same process is
//!   talking to it. When it reaches another process, when no CAS is
//!   remembered, or when the item changed since (an extension whose answer
//!   was lost), the key is read with its CAS (`mg <key> v c`), checked to
//!   hold this grant's identity, and written with that CAS, over a
//!   connection to the process that answered the read. Extend, release and
//!   hand-over all work this way.
//! - **Expiry** is memcached's, in whole seconds, by its own clock, which it
//!   advances once a second. An expiry of `n` seconds lasts between `n - 1`
//!   and `n` seconds, so a lease is rounded up to whole seconds and one
//!   second is added ([`lease_ttl`]); leases over 30 days are refused.
//! - **Semaphores** (sharded mode): a permit of a semaphore of `n` is one
//!   of `n` slot keys, taken with `add` and owned through CAS as a lock key
//!   is, with its token from the name's counter. The name's lock key holds
//!   a record of the limit (in its client flags) while any permit lives,
//!   so asking for the name as a lock, or with another limit, is
//!   `Error::KindConflict`. Quorum mode answers `Error::Unsupported`;
//!   shared (reader) locks are unsupported in both modes. Details and
//!   limits: docs/memcached.md, "Semaphores".
//! - **Waiting** polls: memcached cannot report releases, so the core's
//!   jittered backoff retries, never later than the holder's expiry.
//! - **Names** become keys that memcached accepts whatever the name holds
//!   (see [`MemcachedBackend::lock_key`]): readable percent-encoding when it
//!   fits in 250 bytes, a SHA-256 otherwise. Distinct names never share a
//!   key, and no name can add a command to the wire.
//!
//! # Fencing tokens
//! Each name has a counter key, incremented on every attempt (by 16 on a
//! hand-over through the server, see above). When it is
//! missing (first use, unused for 30 days, evicted, or lost in a restart)
//! it is created from the acquiring machine's clock in microseconds since
//! the Unix epoch. So:
//! - while the counter survives, every grant's token is greater than every
//!   earlier one. A hand-over without a server command takes a token
//!   reserved on the counter before, under a lease this process held all
//!   along; only if that lease was lost unnoticed (evicted, say) can a
//!   later grant elsewhere carry a higher token than such a hand-over,
//!   and then the fence turns the hand-over's holder away, as it should;
//! - across the loss of a counter, tokens keep increasing as long as the
//!   clock of the client that re-creates it reads later than the clock of
//!   the client that created the lost counter did then, by more than the
//!   counter's growth since (at most 16 per server command on that name,
//!   far less than one per microsecond). In practice: as long as the clients' clocks agree to
//!   within the time between the creation of the lost counter and the
//!   first grant after its loss.
//! - In quorum mode the token is the largest of the counters of the
//!   servers that granted, and those counters are raised to it, so tokens
//!   increase without any clock assumption while a majority of counters
//!   survive.
//!
//! # Failure modes
//! - **Eviction.** memcached may evict a lock key to make room, even before
//!   it expires. Another client can then take the lock while the holder
//!   still believes it holds it, until the holder's next extension finds
//!   the key gone and reports the loss. Give locks a memcached instance of
//!   their own, or enough memory that nothing is evicted.
//! - **Restart.** A restarted memcached has lost every lock it held: the
//!   same overlap, until each holder's next extension.
//! - **A server that dies (sharded mode).** Its locks cannot be taken or
//!   extended until it comes back, so their holders report them lost when
//!   the lease runs out. Locks are never moved to another server, which
//!   would let a second client take a lock still held.
//! - **Quorum mode** (`?mode=quorum`, at least 3 independent servers): a
//!   lock is held while a majority granted it within the lease, less the
//!   time spent acquiring and a drift margin; partial grants are rolled
//!   back with conditional deletes; extension needs a majority; release
//!   goes to every server. It survives the loss or restart of a minority of
//!   servers. It does not survive a majority restarting within a lease.
//!
//! # Listing
//! memcached cannot enumerate keys reliably, so [`Backend::list`] shows the
//! locks and permits that this backend instance acquired and still holds,
//! each checked against the servers. Locks held by other processes are not
//! shown, and a permit's `in_use` counts this instance's permits only.
//!
//! # The client
//! The crate speaks the memcached 1.6 meta protocol (`mg`, `ms`, `md`, `ma`)
//! itself, over a small pool of pipelined Tokio connections per server,
//! with a timeout on every call. Each connection asks for `stats` once, as
//! it opens, to learn which memcached process it reaches. Connect to the
//! memcached servers themselves: a proxy that routes commands to servers
//! behind it answers `stats` for itself, and could hide a restart.
//!
//! [`Backend::list`]: distlock_core::backend::Backend::list

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod conn;
mod deployment;
mod exclusive;
mod grant;
mod handover;
mod instance;
mod keys;
mod lease;
mod ops;
mod pool;
mod proto;
mod quorum;
pub mod raw;
mod semaphore;

pub use crate::backend::MemcachedBackend;
pub use crate::config::{DEFAULT_PORT, MemcachedConfig, MemcachedConfigBuilder, Mode};
pub use crate::keys::{DEFAULT_PREFIX, MAX_PREFIX_LEN};
pub use crate::lease::{MAX_LEASE, lease_ttl};

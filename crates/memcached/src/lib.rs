//! distlock's memcached backend: leases held as memcached items, on one
//! server per name (sharded) or on a quorum of servers.
//!
//! **memcached gives an efficiency lock, not a correctness lock.** A lock
//! lives in a cache, which may evict it or lose it in a restart. Use it to
//! keep several instances from doing the same expensive work at once, where
//! a rare overlap costs time but not data. When an overlap would corrupt
//! something, use the MongoDB backend (`mongodb://…`), which keeps locks
//! durably, and check fencing tokens at the protected resource either way.
//!
//! How it works (keys and values, the meta-protocol commands of each
//! operation, remembered CAS values, hand-over, semaphores, quorum mode,
//! the client) and how it is tested is in `docs/memcached.md` in the
//! repository; this page says what a caller can rely on. It needs
//! memcached 1.6 or later, for the meta protocol.
//!
//! ```no_run
//! use distlock_memcached::{MemcachedBackend, MemcachedConfig, Mode};
//! # async fn example() -> Result<(), distlock_core::Error> {
//!
//! // From a URL …
//! let backend = MemcachedBackend::open("memcache://10.0.0.1:11211,10.0.0.2:11211").await?;
//! // … or from a configuration.
//! let config = MemcachedConfig::builder(["10.0.0.1:11211", "10.0.0.2", "10.0.0.3"])
//!     .mode(Mode::Quorum)
//!     .prefix("billing-locks:")
//!     .build()?;
//! let backend = MemcachedBackend::connect(config).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Opening
//! [`MemcachedBackend::open`], `distlock::connect` and the `distlock`
//! command take the same URLs:
//!
//! ```text
//! memcache://host:port[,host:port…][/][?prefix=…&mode=sharded|quorum&timeout=…&connections=…]
//! ```
//!
//! (`memcached://` works too; a host without a port uses 11211; IPv6 as
//! `[::1]:11211`.)
//!
//! | option | default | meaning |
//! | --- | --- | --- |
//! | `prefix` | `lock:` | the start of every key, percent-decoded; printable ASCII without spaces, at most [`MAX_PREFIX_LEN`] bytes |
//! | `mode` | `sharded` | `sharded`: each lock on one server, by consistent hashing; `quorum`: each lock on every server, held by a majority (at least 3 servers) |
//! | `timeout` | `1s` | the longest one call may take (connecting, or one round trip), as `500ms` or `2s`, at most 1 h; a lock client's call ends sooner if its operation timeout is shorter |
//! | `connections` | `2` | pipelined connections per server |
//!
//! Every client of a lock must use the same servers, spelled the same way
//! (`localhost:11211` and `127.0.0.1:11211` hash differently), the same mode
//! and the same prefix. The order of the servers does not matter.
//!
//! Every error names the part at fault ([`Error::InvalidConfig`], with
//! its `field`): an unknown option, a
//! duplicate server, quorum mode with fewer than three servers, a prefix
//! with a space. A user and password are refused, and the message never
//! repeats them. Opening connects to every server and checks that it
//! speaks the meta protocol: in sharded mode every server must answer, in
//! quorum mode a majority.
//!
//! # What a caller can rely on
//! - **Only the holder ends or extends its lock.** Extension, release and
//!   hand-over are conditional on the item's CAS and checked against the
//!   grant's random identity, never unconditional, so a holder whose lease
//!   ran out cannot delete the next holder's lock, also across a memcached
//!   restart (which starts CAS values again from 1). Only a forced release
//!   deletes another's lock.
//! - **Expiry is memcached's**, in whole seconds, by its own clock: a lease
//!   is rounded up to whole seconds and one second is added
//!   ([`lease_ttl`]), so a holder that dies leaves its lock for up to one
//!   lease plus two seconds; a lease longer than [`MAX_LEASE`] (30 days
//!   less a second) is [`Error::InvalidConfig`] naming `lease`. Wall clocks play no part in
//!   expiry.
//! - **Any name is safe.** Names become keys that memcached accepts
//!   whatever the name holds ([`MemcachedBackend::lock_key`] shows one);
//!   distinct names never share a key, and no name can add a command to
//!   the wire.
//! - **Hand-over** (sharded mode): a lock released while another task of
//!   the same client waits for it passes to that task without ever being
//!   free. Quorum mode answers [`Error::Unsupported`], and the core
//!   releases and acquires instead.
//! - **Semaphores** (sharded mode, 1 to 1,000 permits): asking for a name
//!   held as a lock, or with another limit, is [`Error::KindConflict`].
//!   While memcached has evicted or lost the semaphore's record of its
//!   limit, a lock or another limit can be granted beside live permits
//!   until one of them is next extended, as a lock can be taken twice after
//!   its own key is evicted. Quorum mode answers [`Error::Unsupported`].
//! - **Shared (reader) locks** are unsupported in both modes
//!   ([`Error::Unsupported`]): memcached cannot change several keys in one
//!   step.
//! - **Waiting polls**: memcached cannot report releases, so the core's
//!   jittered backoff retries, never later than the holder's expiry. There
//!   is no fair mode.
//! - **Every call ends within its deadline**: the `timeout` option, or the
//!   lock client's operation timeout when that is shorter.
//!
//! # Resuming a lock
//! [`LockClient::resume`] takes up a grant by its handle after a restart,
//! in both modes, for locks and (in sharded mode) permits. It reads the
//! grant's item and stores the new grant's value over it by
//! compare-and-swap on the CAS just read, with the new lease's expiry; an
//! item that still exists has not expired by memcached's own clock. The
//! old holder's next extension then finds another identity and reports
//! the loss, and a second resume of the handle is [`Error::Lost`]. In
//! quorum mode the resume holds once a majority swapped within the lease,
//! as an acquire does; a missing copy never counts, so two resumes at
//! once never both hold, and one that falls short puts the old grant back
//! where it swapped it. Its limits:
//! - memcached keeps no fencing token with a grant, so the identity alone
//!   names it and the token is the handle's;
//! - a guard that came from a hand-over between tasks of one client is
//!   not resumed ([`Error::Lost`]): a hand-over without a server command
//!   leaves the key naming an earlier grant, so such holds are marked and
//!   left alone;
//! - shared locks and quorum mode's permits do not exist, so their resume
//!   is [`Error::Unsupported`].
//!
//! # Fencing tokens
//! Each name has a counter on the server, created from the acquiring
//! machine's clock (microseconds since the Unix epoch) when missing: on
//! first use, unused for 30 days, evicted, or lost in a restart. So:
//! - while the counter survives, every grant's token is greater than every
//!   earlier one. A hand-over made without a server command takes a token
//!   reserved before, under a lease this process held all along; only if
//!   that lease was lost unnoticed (evicted, say) can a later grant
//!   elsewhere carry a higher token, and then the fence turns the
//!   hand-over's holder away, as it should;
//! - across the loss of a counter, tokens keep increasing as long as the
//!   clock of the client that re-creates it reads later than the clock of
//!   the client that created the lost counter did then, by more than the
//!   counter's growth since (at most 16 per server command on that name,
//!   far less than one per microsecond). In practice: as long as the
//!   clients' clocks agree to within the time between the creation of the
//!   lost counter and the first grant after its loss. A counter created a
//!   moment before memcached restarted leaves almost no margin;
//! - in quorum mode the token is the largest of the counters of the
//!   servers that granted, and those counters are raised to it, so tokens
//!   increase without any clock assumption while a majority of a name's
//!   counters survive.
//!
//! # Failure modes
//! - **Eviction.** memcached may evict a lock key to make room, even before
//!   it expires. Another client can then take the lock while the holder
//!   still believes it holds it, until the holder's next extension finds
//!   the key gone and reports the loss. Give locks a memcached instance of
//!   their own, with memory to spare, and watch `evictions`
//!   ([`MemcachedBackend::stats`]).
//! - **Restart.** A restarted memcached has lost every lock and counter it
//!   held: the same overlap, until each holder's next extension.
//! - **A server that dies (sharded mode).** Its locks cannot be taken,
//!   extended or released until it comes back, so their holders report
//!   them lost when the lease runs out. Locks are never moved to another
//!   server, which would let a second client take a lock still held.
//! - **Quorum mode** (`?mode=quorum`, at least 3 independent servers): a
//!   lock is held while a majority granted it within the lease, less the
//!   time spent acquiring and a drift margin. It survives the loss or
//!   restart of a minority of servers (one of three, two of five), but not
//!   a majority restarting within a lease, and each server may still evict
//!   its copies: it remains an efficiency lock, if a more available one.
//!
//! # Listing
//! memcached cannot enumerate keys reliably, so [`Backend::list`] shows the
//! locks and permits that this backend instance acquired and still holds,
//! each checked against the servers. Locks held by other processes are not
//! shown (`distlock list` in a new process shows nothing), and a permit's
//! `in_use` counts this instance's permits only. A forced release needs
//! only the name.
//!
//! # Not supported
//! No authentication (memcached's text protocol has none: use a private
//! network), no TLS, no UNIX sockets, no UDP. Connect to the memcached
//! servers themselves: a proxy that routes commands to servers behind it
//! (memcached's proxy mode, mcrouter) could hide a restart from the
//! ownership checks.
//!
//! [`Backend::list`]: distlock_core::backend::Backend::list
//! [`LockClient::resume`]: distlock_core::LockClient::resume
//! [`Error::Lost`]: distlock_core::Error::Lost
//! [`Error::InvalidConfig`]: distlock_core::Error::InvalidConfig
//! [`Error::Unsupported`]: distlock_core::Error::Unsupported
//! [`Error::KindConflict`]: distlock_core::Error::KindConflict

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

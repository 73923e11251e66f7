//! The [`Backend`] on memcached: the backend type and every trait it
//! implements. Each call picks its part, exclusive locks
//! ([`crate::exclusive`]), semaphores ([`crate::semaphore`]) or hand-over
//! ([`crate::handover`]), which run one server's operations
//! ([`crate::ops`]) on the servers that [`Quorum`] names.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, Extended, GrantState, HandOver,
    HandOvers, Lease, Resumes, ServerInfo, WaitState,
};
use distlock_core::{Claim, Error, LockInfo, LockName, MAX_PERMITS, Result};

use crate::config::{MemcachedConfig, Mode};
use crate::deployment;
use crate::exclusive::Locks;
use crate::grant::{Listing, LockGrant, PermitGrant};
use crate::handover;
use crate::keys::KeySpace;
use crate::ops::Deadline;
use crate::pool::BACKEND;
use crate::proto::{Batch, Code};
use crate::quorum::{Quorum, Store};
use crate::raw::RawLock;
use crate::semaphore::Semaphores;

/// Why a shared (reader) lock is refused, in both modes.
const NO_SHARED: &str = "memcached has no shared (reader) locks: it cannot change several keys at \
     once, which a reader-writer lock needs; use the MongoDB or file backend for them";

/// How many leases [`Backend::extend_many`] extends at once.
const EXTEND_CONCURRENCY: usize = 512;

/// Locks in memcached: `add` with a lease to take, compare-and-swap to
/// extend, release and (in sharded mode) hand over, a counter per name for
/// fencing tokens.
///
/// Open one with [`MemcachedBackend::open`] (from a `memcache://` URL) or
/// [`MemcachedBackend::connect`]. See the crate documentation for what it
/// guarantees and what it cannot.
#[derive(Debug)]
pub struct MemcachedBackend {
    config: MemcachedConfig,
    quorum: Quorum,
    keys: KeySpace,
    /// The locks this instance holds, for [`Backend::list`] only: each
    /// operation on a grant finds what it needs in the grant's own state
    /// (see [`Listing`] for why this index exists).
    locks: Listing<LockGrant>,
    /// The semaphore permits this instance holds, for [`Backend::list`]
    /// only (see [`crate::semaphore`]).
    permits: Listing<PermitGrant>,
}

impl MemcachedBackend {
    /// Parses `url` (see [`MemcachedConfig::parse`]) and connects.
    ///
    /// # Errors
    /// As [`MemcachedConfig::parse`] and [`connect`](Self::connect).
    pub async fn open(url: &str) -> Result<Self> {
        Self::connect(MemcachedConfig::parse(url)?).await
    }

    /// Connects to the servers of `config` and checks that they speak the
    /// meta protocol (memcached 1.6 or later). In sharded mode every server
    /// must answer; in quorum mode a majority.
    ///
    /// # Errors
    /// A backend error naming the servers that did not answer, or answered
    /// like an older memcached.
    pub async fn connect(config: MemcachedConfig) -> Result<Self> {
        let backend = Self::new(config);
        let deadline = Deadline::after(backend.config.timeout());
        let answers = backend
            .quorum
            .each(backend.quorum.everyone(), |_, server| async move {
                let reply = server.meta_one(Batch::new().mn(), deadline.left()).await?;
                if reply.code == Code::Mn {
                    Ok(())
                } else {
                    Err(server.message(format!("answered `mn` with {:?}", reply.code)))
                }
            })
            .await;
        let failures: Vec<String> = answers
            .into_iter()
            .filter_map(|answer| answer.err().map(|error| error.to_string()))
            .collect();
        let needed = match backend.config.mode() {
            Mode::Sharded => backend.quorum.everyone().len(),
            Mode::Quorum => backend.config.quorum(),
        };
        let answered = backend.quorum.everyone().len() - failures.len();
        if answered < needed {
            return Err(Error::Backend {
                backend: BACKEND,
                message: format!(
                    "{answered} of {} servers answered, and {needed} must: {}",
                    backend.quorum.everyone().len(),
                    failures.join("; ")
                ),
                source: None,
            });
        }
        for failure in &failures {
            tracing::warn!(%failure, "a memcached server did not answer; the quorum holds without it");
        }
        Ok(backend)
    }

    fn new(config: MemcachedConfig) -> Self {
        Self {
            quorum: Quorum::new(&config),
            keys: KeySpace::new(config.prefix()),
            config,
            locks: Listing::default(),
            permits: Listing::default(),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &MemcachedConfig {
        &self.config
    }

    /// The memcached key that holds `name`'s lock.
    pub fn lock_key(&self, name: &LockName) -> String {
        self.keys.lock_key(name).as_str().to_owned()
    }

    /// The memcached key that holds `name`'s fencing-token counter.
    pub fn token_key(&self, name: &LockName) -> String {
        self.keys.token_key(name).as_str().to_owned()
    }

    /// The servers (`host:port`) that hold `name`'s keys: one in sharded
    /// mode, all of them in quorum mode.
    pub fn servers_of(&self, name: &LockName) -> Vec<&str> {
        self.quorum
            .targets(name)
            .0
            .iter()
            .map(|&index| self.quorum.server(index).addr())
            .collect()
    }

    /// memcached's `stats` of every server, in the order configured: the
    /// server's address and its `(name, value)` pairs. Watch `evictions`:
    /// above zero, memcached is dropping items to make room, and locks
    /// may be among them.
    ///
    /// # Errors
    /// A backend error from the first server that did not answer.
    pub async fn stats(&self) -> Result<Vec<(String, Vec<(String, String)>)>> {
        self.stats_by(Deadline::after(self.config.timeout())).await
    }

    /// [`stats`](Self::stats), every server answering by `deadline`.
    async fn stats_by(&self, deadline: Deadline) -> Result<Vec<(String, Vec<(String, String)>)>> {
        self.quorum
            .each(self.quorum.everyone(), |_, server| async move {
                Ok((
                    server.addr().to_owned(),
                    server.stats(deadline.left()).await?,
                ))
            })
            .await
            .into_iter()
            .collect()
    }

    /// Every server's `stats settings`, by address, answered by `deadline`.
    async fn settings(&self, deadline: Deadline) -> Result<Vec<(String, Vec<(String, String)>)>> {
        self.quorum
            .each(self.quorum.everyone(), |_, server| async move {
                Ok((
                    server.addr().to_owned(),
                    server.settings(deadline.left()).await?,
                ))
            })
            .await
            .into_iter()
            .collect()
    }

    /// The memcached key of slot `slot` of the semaphore `name`, whose
    /// permits are slots `0` to `limit - 1`.
    ///
    /// # Panics
    /// When `slot` is not below [`MAX_PERMITS`].
    pub fn slot_key(&self, name: &LockName, slot: u32) -> String {
        assert!(
            slot < MAX_PERMITS,
            "a semaphore has at most {MAX_PERMITS} slots"
        );
        self.keys.slot_keys(name).key(slot).as_str().to_owned()
    }

    /// The bare lock on this backend's servers, for benchmarks.
    pub fn raw(&self) -> RawLock<'_> {
        RawLock::new(self.store())
    }

    /// The servers and keys, for one call.
    fn store(&self) -> Store<'_> {
        Store {
            quorum: &self.quorum,
            keys: &self.keys,
            timeout: self.config.timeout(),
        }
    }

    /// The exclusive locks, for one call.
    fn locks(&self) -> Locks<'_> {
        Locks {
            store: self.store(),
            listing: &self.locks,
        }
    }

    /// The semaphores, for one call.
    fn semaphores(&self) -> Semaphores<'_> {
        Semaphores {
            store: self.store(),
            listing: &self.permits,
        }
    }

    /// Extends one lease, a lock's or a permit's.
    async fn extend_one(&self, lease: &Lease) -> Result<bool> {
        if let Claim::Permit { .. } = lease.claim {
            return Box::pin(self.semaphores().extend(lease)).await;
        }
        self.locks().extend(lease).await
    }
}

#[async_trait]
impl Backend for MemcachedBackend {
    fn store_name(&self) -> &'static str {
        "memcached"
    }

    /// The first server's version and clock (whole seconds), and with
    /// several servers, how many there are. Each of its two round trips
    /// answers within the configured timeout or `limit`, the shorter.
    async fn server_info(&self, limit: Duration) -> Result<ServerInfo> {
        let stats = self
            .stats_by(Deadline::for_call(self.config.timeout(), limit))
            .await?;
        let value = |pairs: &[(String, String)], name: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        };
        let Some((_, first)) = stats.first() else {
            return Ok(ServerInfo::default());
        };
        let version = value(first, "version").map(|version| {
            if stats.len() > 1 {
                format!("memcached {version} (first of {} servers)", stats.len())
            } else {
                format!("memcached {version}")
            }
        });
        let clock = value(first, "time")
            .and_then(|seconds| seconds.parse::<u64>().ok())
            .map(|seconds| std::time::UNIX_EPOCH + Duration::from_secs(seconds));
        let settings = self
            .settings(Deadline::for_call(self.config.timeout(), limit))
            .await?;
        Ok(ServerInfo::new(version, clock)
            .with_feature(deployment::meta_protocol(stats.len()))
            .with_feature(deployment::eviction(&settings)))
    }

    fn capabilities(&self) -> Capabilities {
        let sharded = self.config.mode() == Mode::Sharded;
        Capabilities::lease_based()
            .with_lists_every_holder(false)
            .with_semaphores(sharded)
            // In sharded mode, every call's commands share one
            // [`Deadline`], within the operation timeout, from when the call
            // begins. Quorum mode rolls a failed grant back with time of its
            // own, so it leaves the bound to core.
            .with_bounds_calls(sharded)
    }

    async fn try_acquire(&self, request: &AcquireRequest, _: &mut WaitState) -> Result<Attempt> {
        match request.claim {
            Claim::Exclusive => {}
            Claim::Shared => return Err(Error::Unsupported(NO_SHARED.into())),
            // Boxed, here and in `extend_one` and `release`: inline, the
            // permit's state would make every exclusive call's future larger.
            Claim::Permit { limit } => {
                return Box::pin(self.semaphores().try_acquire(request, limit)).await;
            }
        }
        self.locks().try_acquire(request).await
    }

    /// Extends many leases at once: their commands share the pipelined
    /// connections, so a batch costs a few round trips, not one per lease.
    fn extend_many_limit(&self) -> usize {
        // A few commands extend any number of leases.
        usize::MAX
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        let mut outcomes = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(EXTEND_CONCURRENCY) {
            outcomes.extend(
                futures::future::join_all(chunk.iter().map(|lease| self.extend_one(lease))).await,
            );
        }
        Extended::new(outcomes, None)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        if let Claim::Permit { limit } = lease.claim {
            return Box::pin(self.semaphores().release(lease, limit)).await;
        }
        self.locks().release(lease).await
    }

    async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        let mut locks = self.locks().list(limit).await?;
        locks.extend(self.semaphores().list(limit).await?);
        locks.sort_by(|a, b| (&a.name, a.fencing_token).cmp(&(&b.name, b.fencing_token)));
        Ok(locks)
    }

    /// In sharded mode, deletes the lock key and every permit slot the
    /// name can have, in one write. Quorum mode grants no permits, so it
    /// deletes the lock key on every server.
    async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool> {
        if self.config.mode() == Mode::Sharded {
            return self.semaphores().force_release(name, limit).await;
        }
        self.locks().force_release(name, limit).await
    }

    fn abilities(&self) -> Abilities<'_> {
        // Quorum mode cannot end one grant and make the next on every
        // server in one step. A later release is an extension (its TTL
        // rounded up to whole seconds, and one more, which only lengthens
        // it).
        match self.config.mode() {
            Mode::Sharded => Abilities::none().with_hand_overs(self).with_resumes(self),
            Mode::Quorum => Abilities::none().with_resumes(self),
        }
    }
}

#[async_trait]
impl Resumes for MemcachedBackend {
    /// Makes the item of grant `lease.id` (the lock key, or the permit's
    /// slot, found by reading every slot) `request`'s by compare-and-swap
    /// on the CAS read just before, with the lease's expiry from now, if it
    /// is still there with the same claim: an item that still exists has
    /// not expired by memcached's own clock. In quorum mode on each
    /// server, holding once a majority swapped within the lease, as an
    /// acquire does; a resume that falls short puts the old grant back
    /// where it swapped it. memcached keeps no fencing token with a grant
    /// (the token comes from the counter in the same write as the grant's
    /// `add`), so the identity alone names the grant, and the token is the
    /// handle's. A hold that a hand-over may have passed on within its
    /// process is never taken up (see `docs/memcached.md`, "Resuming a
    /// lock").
    async fn resume(&self, lease: &Lease, request: &AcquireRequest) -> Result<Option<GrantState>> {
        match request.claim {
            Claim::Exclusive => self.locks().resume(lease, request).await,
            Claim::Shared => Err(Error::Unsupported(NO_SHARED.into())),
            Claim::Permit { limit } => {
                Box::pin(self.semaphores().resume(lease, request, limit)).await
            }
        }
    }
}

#[async_trait]
impl HandOvers for MemcachedBackend {
    /// In sharded mode: without a server command when this process holds
    /// the lease with at least half of it left and a reserved token to
    /// spare (`LockGrant::pass_on`); otherwise one compare-and-swap
    /// store of the next grant over ours, with the counter's increment in
    /// the same write, which reserves the tokens for the next ones (see
    /// `docs/memcached.md`, "Hand-over"). Quorum mode answers
    /// [`Error::Unsupported`].
    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        if self.config.mode() == Mode::Quorum {
            return Err(Error::Unsupported(
                "memcached in quorum mode cannot hand a lock over in one step".into(),
            ));
        }
        if lease.claim != Claim::Exclusive || next.claim != Claim::Exclusive {
            return Err(Error::Unsupported(
                "memcached hands over exclusive locks only".into(),
            ));
        }
        if lease.name != next.name {
            return Err(Error::config(
                "next",
                format!(
                    "a lock is handed over under its own name, not from {} to {}",
                    lease.name, next.name
                ),
            ));
        }
        handover::hand_over(&self.locks(), lease, next).await
    }
}

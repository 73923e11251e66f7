//! The [`Backend`] on memcached.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use distlock_core::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, Claim, Error, GrantState, HandOver,
    HandOvers, Holder, Lease, LeaseId, LockInfo, LockKind, LockName, Result, ServerInfo, WaitState,
};
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::config::{MemcachedConfig, Mode};
use crate::deployment;
use crate::grant::{FirstGrant, Listing, LockHold, Spare, Standing, cas_on};
use crate::instance::{Instance, KnownCas};
use crate::keys::{KeySpace, Ring};
use crate::lease::{is_ours, lease_ttl, lock_value_inline, token_seed};
use crate::pool::{BACKEND, Server};
use crate::proto::{Batch, Code, Inline, Key, Reply};
use crate::semaphore::{PermitHold, semaphore_limit};

/// How long a fencing-token counter outlives its last use, in seconds
/// (30 days, memcached's longest relative expiry). Counters of names that
/// are no longer used go away; a counter that is lost is re-created from
/// the clock.
const COUNTER_TTL: u64 = 60 * 60 * 24 * 30;

/// How many fencing tokens a hand-over through the server reserves: the
/// counter's increment adds this many, the grant takes the first, and the
/// next hand-overs within the same run take the rest without a server
/// command (see [`LockHold::pass_on`]).
const TOKEN_BLOCK: u64 = 16;

/// How many times a conditional write is retried when the item changed
/// between reading it and writing it.
pub(crate) const CAS_RETRIES: usize = 8;

/// How many locks [`Backend::list`] checks at once.
pub(crate) const LIST_CONCURRENCY: usize = 256;

/// The servers that hold a name's keys, without allocating: every call
/// of an operation asks.
enum Targets<'a> {
    /// Sharded mode: the one server the ring picks.
    One([usize; 1]),
    /// Quorum mode: all of them.
    All(&'a [usize]),
}

impl std::ops::Deref for Targets<'_> {
    type Target = [usize];

    fn deref(&self) -> &[usize] {
        match self {
            Self::One(one) => one,
            Self::All(all) => all,
        }
    }
}

/// One outcome per server asked, kept inline for sharded mode's one
/// server: every operation makes one.
type Outcomes<T> = SmallVec<[Result<T>; 1]>;

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
    servers: Vec<Arc<Server>>,
    /// The index of every server, for quorum mode's calls.
    everyone: Vec<usize>,
    ring: Ring,
    keys: KeySpace,
    /// The locks this instance holds, for [`Backend::list`] only: each
    /// operation on a grant finds what it needs in the grant's own state
    /// (see [`Listing`] for why this index exists).
    holds: Listing<LockHold>,
    /// The semaphore permits this instance holds, for [`Backend::list`]
    /// only (see [`crate::semaphore`]).
    permits: Listing<PermitHold>,
}

/// When an operation on the servers must be over. Every call it makes
/// gets the time that is left, so a loop of reads and retries ends in time
/// too, and no timer wraps the whole.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline(Instant);

impl Deadline {
    pub(crate) fn after(patience: Duration) -> Self {
        Self(Instant::now() + patience)
    }

    /// The time left; zero once it has passed, and a call then fails at
    /// once with a timeout.
    pub(crate) fn left(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }
}

/// A grant by one server.
struct Grant {
    server: usize,
    token: u64,
    /// The token counter's CAS, to raise it in quorum mode.
    token_cas: u64,
    /// The lock's CAS.
    cas: Option<KnownCas>,
}

/// What one server said to an `add`.
enum Added {
    Granted {
        token: u64,
        token_cas: u64,
        cas: Option<KnownCas>,
    },
    Held,
}

/// Whose a lock key is, on one server.
pub(crate) enum Ownership {
    /// Ours, with the CAS read and the process that gave it.
    Ours {
        cas: u64,
        from: Option<Instance>,
        value: Inline,
    },
    Other,
    Missing,
}

/// What one server said to an extension.
enum Extended {
    Done {
        /// Our value as read from the server, when it was read.
        read: Option<Arc<[u8]>>,
        cas: Option<KnownCas>,
    },
    NotOurs,
    Missing,
}

/// What one server said to a hand-over.
enum HandedOver {
    /// The lock key holds the next grant now.
    Granted {
        /// What the counter's increment returned.
        token: u64,
        /// The token counter's CAS, to raise it.
        token_cas: u64,
        /// The lock's new CAS.
        cas: Option<KnownCas>,
    },
    /// The lock key holds another grant than the old one, or nothing.
    NotOurs,
}

/// The next grant of a lock that is handed over: what to store where.
struct NextGrant<'a> {
    key: &'a Key,
    token_key: &'a Key,
    value: &'a [u8],
    ttl: u32,
    /// The token counter's seed, should it be missing.
    seed: u64,
}

/// What a failed add found at the lock key, on one server.
struct Holding {
    /// How long the holder has left, when memcached says.
    left: Option<Duration>,
    /// The limit, when the key holds a semaphore's record rather than a
    /// lock.
    semaphore: Option<u32>,
}

/// What a compare-and-swap store did.
enum CasStore {
    /// Stored; the item's new CAS.
    Done(Option<KnownCas>),
    /// The item has another CAS.
    Changed,
    Missing,
}

impl MemcachedBackend {
    /// Parses `url` (see [`MemcachedConfig::from_url`]) and connects.
    ///
    /// # Errors
    /// As [`MemcachedConfig::from_url`] and [`connect`](Self::connect).
    pub async fn open(url: &str) -> Result<Self> {
        Self::connect(MemcachedConfig::from_url(url)?).await
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
        let all: Vec<usize> = (0..backend.servers.len()).collect();
        let deadline = Deadline::after(backend.config.timeout());
        let answers = backend
            .each(&all, |_, server| async move {
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
            Mode::Sharded => backend.servers.len(),
            Mode::Quorum => backend.config.quorum(),
        };
        let answered = backend.servers.len() - failures.len();
        if answered < needed {
            return Err(Error::Backend {
                backend: BACKEND,
                message: format!(
                    "{answered} of {} servers answered, and {needed} must: {}",
                    backend.servers.len(),
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
        let servers: Vec<Arc<Server>> = config
            .servers()
            .iter()
            .map(|addr| {
                Arc::new(Server::new(
                    addr.clone(),
                    config.connections(),
                    config.timeout(),
                ))
            })
            .collect();
        Self {
            ring: Ring::new(config.servers().iter().map(String::as_str)),
            keys: KeySpace::new(config.prefix()),
            everyone: (0..servers.len()).collect(),
            servers,
            config,
            holds: Listing::default(),
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
        self.targets(name)
            .0
            .iter()
            .map(|&index| self.servers[index].addr())
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
        let all: Vec<usize> = (0..self.servers.len()).collect();
        let deadline = Deadline::after(self.config.timeout());
        self.each(&all, |_, server| async move {
            Ok((
                server.addr().to_owned(),
                server.stats(deadline.left()).await?,
            ))
        })
        .await
        .into_iter()
        .collect()
    }

    /// Every server's `stats settings`, by address.
    async fn settings(&self) -> Result<Vec<(String, Vec<(String, String)>)>> {
        let all: Vec<usize> = (0..self.servers.len()).collect();
        let deadline = Deadline::after(self.config.timeout());
        self.each(&all, |_, server| async move {
            Ok((
                server.addr().to_owned(),
                server.settings(deadline.left()).await?,
            ))
        })
        .await
        .into_iter()
        .collect()
    }

    pub(crate) fn server_for(&self, name: &LockName) -> &Server {
        self.shard(name)
    }

    /// The server that sharded mode keeps `name`'s keys on.
    pub(crate) fn shard(&self, name: &LockName) -> &Arc<Server> {
        &self.servers[self.ring.server_of(name)]
    }

    pub(crate) fn key_for(&self, name: &LockName) -> Key {
        self.keys.lock_key(name)
    }

    pub(crate) fn keys(&self) -> &KeySpace {
        &self.keys
    }

    pub(crate) fn permits(&self) -> &Listing<PermitHold> {
        &self.permits
    }

    /// The servers that hold `name`, and how many of them must agree.
    fn targets(&self, name: &LockName) -> (Targets<'_>, usize) {
        match self.config.mode() {
            Mode::Sharded => (Targets::One([self.ring.server_of(name)]), 1),
            Mode::Quorum => (Targets::All(&self.everyone), self.config.quorum()),
        }
    }

    /// The time one server may take for one operation on a lease: the
    /// configured timeout, but at most a quarter of the lease, so that a
    /// slow server cannot use up a lease that the others granted.
    /// The key `lease`'s lock lives under and the identity its stored value
    /// carries: its hold's, or, for a lease whose hold is gone (or whose
    /// answer was lost), its own name's key and its own identity.
    fn key_and_owner<'a>(
        &self,
        hold: Option<&'a LockHold>,
        lease: &Lease,
    ) -> (std::borrow::Cow<'a, Key>, LeaseId) {
        match hold {
            Some(hold) => (std::borrow::Cow::Borrowed(&hold.key), hold.owner),
            None => (
                std::borrow::Cow::Owned(self.keys.lock_key(&lease.name)),
                lease.id,
            ),
        }
    }

    /// How long a call on a lease may take: the client's operation timeout,
    /// or this backend's `timeout` if that is shorter.
    pub(crate) fn call_timeout(&self, operation_timeout: Duration) -> Duration {
        self.config.timeout().min(operation_timeout)
    }

    /// Runs `op` on each of `targets` at once, and returns the outcomes in
    /// the order of `targets`. Sets no timer: each operation bounds its own
    /// calls by its [`Deadline`].
    async fn each<'a, T, F, Fut>(&'a self, targets: &[usize], op: F) -> Outcomes<T>
    where
        F: Fn(usize, &'a Server) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if let [index] = *targets {
            let mut one = Outcomes::new();
            one.push(op(index, &self.servers[index]).await);
            return one;
        }
        futures::future::join_all(targets.iter().map(|&index| op(index, &self.servers[index])))
            .await
            .into()
    }

    /// What holds `key` on `servers`: the shortest time that its holders
    /// have left, for waiters (`None` when no server says), and the limit
    /// of the semaphore whose record it is, if it is one. Only a failed
    /// attempt asks, so a grant costs no read.
    async fn holding(&self, servers: &[usize], key: &Key, deadline: Deadline) -> Holding {
        let mut holding = Holding {
            left: None,
            semaphore: None,
        };
        let outcomes = self
            .each(servers, |_, server| holding_on(server, key, deadline))
            .await;
        // A hint, not a verdict: a server that does not say is skipped.
        for on_server in outcomes.into_iter().flatten() {
            holding.left = match (holding.left, on_server.left) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            holding.semaphore = holding.semaphore.or(on_server.semaphore);
        }
        holding
    }

    /// Adds our copy of `key` again on `servers`, which answered that it was
    /// gone (they restarted), so that the lock keeps a full set of copies.
    /// Returns the CAS of each server's copy, where one was added.
    async fn restore(
        &self,
        servers: &[usize],
        key: &Key,
        value: &[u8],
        ttl: u32,
        deadline: Deadline,
    ) -> Vec<(usize, Option<KnownCas>)> {
        let added = self
            .each(servers, |_, server| async move {
                let batch = Batch::new().ms(key, value, format_args!("ME T{ttl} c"));
                let (mut replies, from) = server.meta_from(batch, deadline.left()).await?;
                let reply = replies.pop().ok_or_else(|| server.message("no reply"))?;
                Ok((reply.code == Code::Hd).then(|| KnownCas::new(from, reply.flag_u64('c'))))
            })
            .await;
        let restored = added
            .iter()
            .filter(|added| matches!(added, Ok(Some(_))))
            .count();
        tracing::debug!(key = ?key, restored, "restored the lock on servers that had lost it");
        servers
            .iter()
            .zip(added)
            .map(|(&server, added)| (server, added.ok().flatten().flatten()))
            .collect()
    }

    /// Deletes grant `id` of `key` from the servers that granted it, best
    /// effort, and from the servers whose answer was lost (which may have
    /// stored it) in the background, so that a server that hangs does not
    /// hold up the caller.
    async fn roll_back(&self, granted: &[Grant], in_doubt: &[usize], key: &Key, id: LeaseId) {
        // With time of its own: the operation's may be up.
        let patience = self.config.timeout();
        let deadline = Deadline::after(patience);
        let servers: Vec<usize> = granted.iter().map(|grant| grant.server).collect();
        let outcomes = self
            .each(&servers, |index, server| {
                let known = granted
                    .iter()
                    .find(|grant| grant.server == index)
                    .and_then(|grant| grant.cas);
                release_on(server, key, id, known, deadline)
            })
            .await;
        for (index, outcome) in servers.iter().zip(outcomes) {
            if let Err(error) = outcome {
                tracing::debug!(server = self.servers[*index].addr(), %error, "could not roll back a partial grant; it will expire");
            }
        }
        if in_doubt.is_empty() {
            return;
        }
        let doubtful = self.servers_at(in_doubt);
        let key = key.clone();
        tokio::spawn(async move {
            release_from(&doubtful, &key, id, patience).await;
            // The lost answer's store may still be queued on another
            // connection, and land after that first look.
            tokio::time::sleep(patience).await;
            release_from(&doubtful, &key, id, patience).await;
        });
    }

    fn servers_at(&self, indexes: &[usize]) -> Vec<Arc<Server>> {
        indexes
            .iter()
            .map(|&index| self.servers[index].clone())
            .collect()
    }

    /// Extends one lease: a compare-and-swap store of its value with the
    /// lease as its TTL, on each server that holds it.
    async fn extend_one(&self, lease: &Lease) -> Result<bool> {
        if let Claim::Permit { .. } = lease.claim {
            return Box::pin(self.extend_permit(lease)).await;
        }
        let ttl = lease_ttl(lease.lease)?;
        let (targets, need) = self.targets(&lease.name);
        let deadline = Deadline::after(self.call_timeout(lease.operation_timeout));
        let hold = LockHold::of(lease);
        // A grant whose hold ended (or that came without state) is
        // extended by its identity, as it was granted.
        let (hold, cas) = match hold.map(|hold| (hold, hold.standing(lease.id))) {
            Some((hold, Standing::Current(cas))) => (Some(hold), cas),
            Some((_, Standing::HandedOn)) => return Ok(false),
            Some((_, Standing::Ended)) | None => (None, SmallVec::new()),
        };
        let (key, owner) = self.key_and_owner(hold, lease);
        let key = &*key;
        let started = Instant::now();
        let outcomes = self
            .each(&targets, |index, server| {
                let remembered =
                    hold.and_then(|hold| Some((&hold.value[..], cas_on(&cas, index)?)));
                extend_on(server, key, owner, ttl, remembered, deadline)
            })
            .await;
        let mut done = 0;
        let mut gone = 0;
        let mut missing = Vec::new();
        let mut read = None;
        let mut learned: SmallVec<[(usize, Option<KnownCas>); 1]> = SmallVec::new();
        let mut errors = Vec::new();
        for (&index, outcome) in targets.iter().zip(outcomes) {
            match outcome {
                Ok(Extended::Done { read: value, cas }) => {
                    done += 1;
                    read = read.or(value);
                    learned.push((index, cas));
                }
                Ok(Extended::NotOurs) => {
                    gone += 1;
                    learned.push((index, None));
                }
                Ok(Extended::Missing) => {
                    gone += 1;
                    missing.push(index);
                    learned.push((index, None));
                }
                // The store may or may not have happened: the CAS we knew
                // is either still right or will be found changed.
                Err(error) => errors.push(error),
            }
        }
        if done >= need {
            let value = hold.map(|hold| &hold.value[..]).or(read.as_deref());
            if let (Some(value), false) = (value, missing.is_empty()) {
                learned.extend(self.restore(&missing, key, value, ttl, deadline).await);
            }
            if !errors.is_empty() {
                tracing::warn!(
                    name = %lease.name,
                    extended = done,
                    servers = targets.len(),
                    error = %combined("unanswered", errors),
                    "extended on a majority; some servers did not answer"
                );
            }
            if let Some(hold) = hold {
                hold.confirm(lease.id, started, &learned);
            }
            return Ok(true);
        }
        if targets.len() - gone < need {
            if let Some(hold) = hold {
                hold.end(lease.id);
            }
            return Ok(false);
        }
        Err(combined(
            &format!(
                "extended on {done} of {} servers and {need} must agree",
                targets.len()
            ),
            errors,
        ))
    }
}

/// Deletes grant `id` of `key` from `servers`, one after another, best
/// effort: for grants whose answer was lost.
pub(crate) async fn release_from(
    servers: &[Arc<Server>],
    key: &Key,
    id: LeaseId,
    patience: Duration,
) {
    for server in servers {
        let outcome = release_on(server, key, id, None, Deadline::after(patience)).await;
        if outcome.is_err() {
            tracing::debug!(
                server = server.addr(),
                "could not roll back a grant whose answer was lost; it will expire"
            );
        }
    }
}

/// Several servers' errors as one.
fn combined(what: &str, errors: Vec<Error>) -> Error {
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let mut errors = errors;
    match (errors.len(), errors.pop()) {
        (1, Some(error)) => error,
        _ => Error::Backend {
            backend: BACKEND,
            message: format!("{what}: {}", messages.join("; ")),
            source: None,
        },
    }
}

pub(crate) fn unexpected(server: &Server, command: &str, reply: &Reply) -> Error {
    match reply.code {
        Code::ServerError => server.message(format!(
            "the server refused {command}: SERVER_ERROR {}",
            String::from_utf8_lossy(reply.value.as_deref().unwrap_or_default())
        )),
        code => server.message(format!("unexpected reply {code:?} to {command}")),
    }
}

/// `batch` followed by the increment by `delta` of the token counter at
/// `token_key`, which creates the counter at `seed` when it is missing (and
/// then answers `seed`, not adding `delta`): how acquire and hand-over get
/// their token in the same round trip as their store.
pub(crate) fn counted(batch: Batch, token_key: &Key, seed: u64, delta: u64) -> Batch {
    batch.ma(
        token_key,
        format_args!("N{COUNTER_TTL} J{seed} D{delta} T{COUNTER_TTL} v c"),
    )
}

/// The replies to a store and the counter's increment.
pub(crate) fn two_replies(server: &Server, replies: Vec<Reply>) -> Result<[Reply; 2]> {
    <[Reply; 2]>::try_from(replies)
        .map_err(|replies| server.message(format!("{} replies to 2 commands", replies.len())))
}

/// The token that the counter's increment returned, and the counter's CAS.
pub(crate) fn token_of(server: &Server, counter: &Reply) -> Result<(u64, u64)> {
    if counter.code != Code::Va {
        return Err(unexpected(server, "the token counter's increment", counter));
    }
    let token = counter
        .number()
        .ok_or_else(|| server.message("the token counter is not a number"))?;
    let token_cas = counter
        .flag_u64('c')
        .ok_or_else(|| server.message("the token counter came without its CAS"))?;
    Ok((token, token_cas))
}

/// `add` of the lock key, returning its CAS, and the counter's increment
/// (created from `seed` when missing), in one round trip. Nothing else:
/// how long the holder has left matters only when the add fails, and is
/// read then ([`holding_on`]).
async fn add_on(
    server: &Server,
    lock_key: &Key,
    token_key: &Key,
    value: &[u8],
    ttl: u32,
    seed: u64,
    deadline: Deadline,
) -> Result<Added> {
    let batch = counted(
        Batch::new().ms(lock_key, value, format_args!("ME T{ttl} c")),
        token_key,
        seed,
        1,
    );
    let (replies, from) = server.meta_from(batch, deadline.left()).await?;
    let [stored, counter] = two_replies(server, replies)?;
    match stored.code {
        Code::Hd => {
            if stored.flag_u64('c') == Some(0) {
                // Our item stays until its TTL ends: without CAS values
                // nothing can delete it safely.
                return Err(server.message(
                    "this memcached runs without CAS values (-C), so no lease could be \
                     extended or released safely; restart it without -C",
                ));
            }
            let (token, token_cas) = token_of(server, &counter)?;
            let cas = KnownCas::new(from, stored.flag_u64('c'));
            Ok(Added::Granted {
                token,
                token_cas,
                cas,
            })
        }
        Code::Ns => Ok(Added::Held),
        _ => Err(unexpected(server, "an add", &stored)),
    }
}

/// What holds `key`: how long its holder has left (zero when the key is
/// gone: the lease ended since the add failed; `None` when memcached does
/// not say), and whether it is a semaphore's record, which the client
/// flags tell in the same read.
async fn holding_on(server: &Server, key: &Key, deadline: Deadline) -> Result<Holding> {
    let reply = server
        .meta_one(Batch::new().mg(key, "t f"), deadline.left())
        .await?;
    Ok(match reply.code {
        Code::En => Holding {
            left: Some(Duration::ZERO),
            semaphore: None,
        },
        _ => Holding {
            left: reply
                .flag_i64('t')
                .and_then(|secs| u64::try_from(secs).ok())
                .map(Duration::from_secs),
            semaphore: semaphore_limit(&reply),
        },
    })
}

/// Reads `key` with its CAS and says whether it is grant `id`.
pub(crate) async fn read_on(
    server: &Server,
    key: &Key,
    id: LeaseId,
    deadline: Deadline,
) -> Result<Ownership> {
    let (mut replies, from) = server
        .meta_from(Batch::new().mg(key, "v c"), deadline.left())
        .await?;
    let reply = replies.pop().ok_or_else(|| server.message("no reply"))?;
    match reply.code {
        Code::En => Ok(Ownership::Missing),
        Code::Va => {
            let cas = reply
                .flag_u64('c')
                .ok_or_else(|| server.message("a value came without its CAS"))?;
            let value = reply.value.unwrap_or_default();
            if is_ours(&value, id) {
                Ok(Ownership::Ours { cas, from, value })
            } else {
                Ok(Ownership::Other)
            }
        }
        _ => Err(unexpected(server, "a get", &reply)),
    }
}

/// Stores `value` at `key` again with an expiry of `ttl` seconds if the
/// item's CAS is still `cas`, sent only to `from`, the process that issued
/// `cas` (see [`crate::instance`]). `Ok(None)` when the server's connection
/// reaches another process now: nothing was sent.
async fn store_again(
    server: &Server,
    key: &Key,
    value: &[u8],
    (from, cas): (Option<Instance>, u64),
    ttl: u32,
    deadline: Deadline,
) -> Result<Option<CasStore>> {
    let batch = Batch::new().ms(key, value, format_args!("C{cas} T{ttl} c"));
    let Some(reply) = server.meta_one_to(from, batch, deadline.left()).await? else {
        return Ok(None);
    };
    match reply.code {
        Code::Hd => Ok(Some(CasStore::Done(KnownCas::new(
            from,
            reply.flag_u64('c'),
        )))),
        Code::Ex => Ok(Some(CasStore::Changed)),
        Code::Nf => Ok(Some(CasStore::Missing)),
        // memcached deleted our item when it could not store its
        // replacement: the lock is gone.
        Code::ServerError => {
            tracing::warn!(error = %unexpected(server, "an extension", &reply), "the lock is lost");
            Ok(Some(CasStore::Missing))
        }
        _ => Err(unexpected(server, "a compare-and-swap store", &reply)),
    }
}

/// Extends grant `id` of `key` to `ttl` seconds, if it is still there. One
/// command when the CAS of our last store there is known (`remembered`,
/// with the value stored); otherwise, or when the item changed since, the
/// CAS is read first.
async fn extend_on(
    server: &Server,
    key: &Key,
    id: LeaseId,
    ttl: u32,
    remembered: Option<(&[u8], KnownCas)>,
    deadline: Deadline,
) -> Result<Extended> {
    if let Some((value, known)) = remembered {
        let expected = (Some(known.instance), known.cas);
        match store_again(server, key, value, expected, ttl, deadline).await? {
            Some(CasStore::Done(cas)) => return Ok(Extended::Done { read: None, cas }),
            Some(CasStore::Missing) => return Ok(Extended::Missing),
            // Changed since (perhaps by an extension of ours whose answer
            // was lost), or another process answers now: read to tell.
            Some(CasStore::Changed) | None => {}
        }
    }
    for _ in 0..CAS_RETRIES {
        let (expected, value) = match read_on(server, key, id, deadline).await? {
            Ownership::Ours { cas, from, value } => ((from, cas), Arc::<[u8]>::from(&value[..])),
            Ownership::Other => return Ok(Extended::NotOurs),
            Ownership::Missing => return Ok(Extended::Missing),
        };
        match store_again(server, key, &value, expected, ttl, deadline).await? {
            Some(CasStore::Done(cas)) => {
                return Ok(Extended::Done {
                    read: Some(value),
                    cas,
                });
            }
            // Changed or deleted since we read it: no longer ours.
            Some(CasStore::Changed) => return Ok(Extended::NotOurs),
            Some(CasStore::Missing) => return Ok(Extended::Missing),
            // The server restarted between the read and the store.
            None => continue,
        }
    }
    Err(server.message("the lock's server kept restarting while we extended it"))
}

/// Deletes `key` if it is grant `id`, by compare-and-swap: at once with
/// `known`, the CAS of our last store there, when there is one; otherwise,
/// or when the item changed since, with the CAS read first. Returns whether
/// it was ours.
pub(crate) async fn release_on(
    server: &Server,
    key: &Key,
    id: LeaseId,
    known: Option<KnownCas>,
    deadline: Deadline,
) -> Result<bool> {
    let mut expected = known.map(|known| (Some(known.instance), known.cas));
    for _ in 0..CAS_RETRIES {
        if let Some((from, cas)) = expected.take() {
            let batch = Batch::new().md(key, format_args!("C{cas}"));
            // Sent only to the process that issued the CAS; to another one
            // (the server restarted), nothing is sent and we read again.
            if let Some(reply) = server.meta_one_to(from, batch, deadline.left()).await? {
                match reply.code {
                    Code::Hd => return Ok(true),
                    Code::Nf => return Ok(false),
                    // Changed since: look again.
                    Code::Ex => {}
                    _ => return Err(unexpected(server, "a compare-and-swap delete", &reply)),
                }
            }
        }
        match read_on(server, key, id, deadline).await? {
            Ownership::Ours { cas, from, .. } => expected = Some((from, cas)),
            Ownership::Other | Ownership::Missing => return Ok(false),
        }
    }
    Err(server.message("the lock kept changing while we released it"))
}

/// Stores `next`'s grant in place of grant `old`, by compare-and-swap, with
/// the counter's increment in the same write: at once with `known`, the
/// CAS of our last store there, when there is one; otherwise, or when the
/// item changed since, with the CAS read first, and only if the item read
/// is grant `old`. An item that is not grant `old` is never written.
async fn hand_over_on(
    server: &Server,
    next: &NextGrant<'_>,
    old: LeaseId,
    known: Option<KnownCas>,
    deadline: Deadline,
) -> Result<HandedOver> {
    let mut expected = known.map(|known| (Some(known.instance), known.cas));
    for _ in 0..CAS_RETRIES {
        if let Some((from, cas)) = expected.take() {
            let store =
                Batch::new().ms(next.key, next.value, format_args!("C{cas} T{} c", next.ttl));
            let batch = counted(store, next.token_key, next.seed, TOKEN_BLOCK);
            // Sent only to the process that issued the CAS; to another one
            // (the server restarted), nothing is sent and we read again.
            if let Some(replies) = server.meta_to(from, batch, deadline.left()).await? {
                let [stored, counter] = two_replies(server, replies)?;
                match stored.code {
                    Code::Hd => {
                        let (token, token_cas) = token_of(server, &counter)?;
                        let cas = KnownCas::new(from, stored.flag_u64('c'));
                        return Ok(HandedOver::Granted {
                            token,
                            token_cas,
                            cas,
                        });
                    }
                    // Expired, evicted or deleted (memcached deletes the
                    // item when it cannot store the replacement): the
                    // increment that went with it only made the counter
                    // larger.
                    Code::Nf => return Ok(HandedOver::NotOurs),
                    Code::ServerError => {
                        tracing::warn!(
                            error = %unexpected(server, "a hand-over", &stored),
                            "the lock is lost"
                        );
                        return Ok(HandedOver::NotOurs);
                    }
                    // Changed since (perhaps by an extension of ours whose
                    // answer was lost): look again.
                    Code::Ex => {}
                    _ => return Err(unexpected(server, "a compare-and-swap store", &stored)),
                }
            }
        }
        match read_on(server, next.key, old, deadline).await? {
            Ownership::Ours { cas, from, .. } => expected = Some((from, cas)),
            Ownership::Other | Ownership::Missing => return Ok(HandedOver::NotOurs),
        }
    }
    Err(server.message("the lock kept changing while we handed it over"))
}

/// Deletes `key` whoever holds it. Returns whether it was there.
async fn delete_on(server: &Server, key: &Key, deadline: Deadline) -> Result<bool> {
    let reply = server
        .meta_one(Batch::new().md(key, ""), deadline.left())
        .await?;
    match reply.code {
        Code::Hd => Ok(true),
        Code::Nf => Ok(false),
        _ => Err(unexpected(server, "a delete", &reply)),
    }
}

/// Raises the counter at `key` to at least `target`, starting from the CAS
/// `cas` its increment returned.
async fn raise_on(
    server: &Server,
    key: &Key,
    mut cas: u64,
    target: u64,
    deadline: Deadline,
) -> Result<bool> {
    let value = target.to_string();
    for _ in 0..CAS_RETRIES {
        let store = Batch::new().ms(key, value.as_bytes(), format_args!("C{cas} T{COUNTER_TTL}"));
        let reply = server.meta_one(store, deadline.left()).await?;
        match reply.code {
            Code::Hd => return Ok(true),
            Code::Ex | Code::Nf => {}
            _ => return Err(unexpected(server, "a counter store", &reply)),
        }
        let now = server
            .meta_one(Batch::new().mg(key, "v c"), deadline.left())
            .await?;
        match now.code {
            Code::Va => {
                if now.number().is_some_and(|current| current >= target) {
                    return Ok(true);
                }
                cas = now
                    .flag_u64('c')
                    .ok_or_else(|| server.message("a counter came without its CAS"))?;
            }
            Code::En => {
                let add = Batch::new().ms(key, value.as_bytes(), format_args!("ME T{COUNTER_TTL}"));
                let added = server.meta_one(add, deadline.left()).await?;
                if added.code == Code::Hd {
                    return Ok(true);
                }
            }
            _ => return Err(unexpected(server, "a counter read", &now)),
        }
    }
    Ok(false)
}

#[async_trait]
impl Backend for MemcachedBackend {
    fn store_name(&self) -> &'static str {
        "memcached"
    }

    /// The first server's version and clock (whole seconds), and with
    /// several servers, how many there are.
    async fn server_info(&self) -> Result<ServerInfo> {
        let stats = self.stats().await?;
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
        let settings = self.settings().await?;
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
            Claim::Shared => {
                return Err(Error::Unsupported(
                    "memcached has no shared (reader) locks: it cannot change several keys at \
                     once, which a reader-writer lock needs; use the MongoDB or file backend \
                     for them"
                        .into(),
                ));
            }
            // Boxed, here and in `extend` and `release`: inline, the
            // permit's state would make every exclusive call's future larger.
            Claim::Permit { limit } => {
                return Box::pin(self.try_acquire_permit(request, limit)).await;
            }
        }
        let ttl = lease_ttl(request.lease)?;
        let (targets, need) = self.targets(&request.name);
        let (lock_key, token_key) = self.keys.both_keys(&request.name);
        // The grant's state, made before the add so that the value stored
        // lives in it: a grant costs this one allocation and no other.
        let hold = Arc::new(LockHold::new(
            request.name.clone(),
            lock_key,
            request.holder.clone(),
            request.lease,
            request.lease_id,
            lock_value_inline(request.lease_id, &request.name, &request.holder),
        ));
        let lock_key = &hold.key;
        let seed = token_seed(SystemTime::now());
        let deadline = Deadline::after(self.call_timeout(request.operation_timeout));
        let started = Instant::now();
        let outcomes = self
            .each(&targets, |_, server| {
                add_on(
                    server,
                    lock_key,
                    &token_key,
                    &hold.value,
                    ttl,
                    seed,
                    deadline,
                )
            })
            .await;
        let elapsed = started.elapsed();

        let mut granted: SmallVec<[Grant; 1]> = SmallVec::new();
        let mut in_doubt = Vec::new();
        let mut held_on = Vec::new();
        let mut errors = Vec::new();
        for (&server, outcome) in targets.iter().zip(outcomes) {
            match outcome {
                Ok(Added::Granted {
                    token,
                    token_cas,
                    cas,
                }) => granted.push(Grant {
                    server,
                    token,
                    token_cas,
                    cas,
                }),
                Ok(Added::Held) => held_on.push(server),
                Err(error) => {
                    in_doubt.push(server);
                    errors.push(error);
                }
            }
        }
        // Every granted key lives at least the lease from when it was
        // stored, which was after `started`; a majority is only a majority
        // while all of its keys live.
        let drift = request.lease / 100 + Duration::from_millis(2);
        let in_time = elapsed + drift < request.lease;

        if granted.len() >= need && in_time {
            let fencing_token = granted
                .iter()
                .map(|grant| grant.token)
                .max()
                .expect("at least one grant");
            if targets.len() > 1 {
                // Later majorities meet this one in at least one server;
                // its counter must not be behind this token.
                let behind: Vec<&Grant> = granted
                    .iter()
                    .filter(|grant| grant.token < fencing_token)
                    .collect();
                let indexes: Vec<usize> = behind.iter().map(|grant| grant.server).collect();
                let raised = self
                    .each(&indexes, |index, server| {
                        let cas = behind
                            .iter()
                            .find(|grant| grant.server == index)
                            .map_or(0, |grant| grant.token_cas);
                        raise_on(server, &token_key, cas, fencing_token, deadline)
                    })
                    .await;
                let agreed = granted.len() - behind.len()
                    + raised.iter().filter(|r| matches!(r, Ok(true))).count();
                let still_in_time = started.elapsed() + drift < request.lease;
                if agreed < need || !still_in_time {
                    self.roll_back(&granted, &in_doubt, lock_key, request.lease_id)
                        .await;
                    return Err(Error::Backend {
                        backend: BACKEND,
                        message: format!(
                            "could not bring the fencing counters of {} to {fencing_token} \
                             on a majority within the lease",
                            request.name
                        ),
                        source: None,
                    });
                }
            }
            if !errors.is_empty() {
                tracing::warn!(
                    name = %request.name,
                    granted = granted.len(),
                    servers = targets.len(),
                    error = %combined("unanswered", errors),
                    "acquired on a majority; some servers did not answer"
                );
            }
            hold.begin(FirstGrant {
                id: request.lease_id,
                fencing_token,
                confirmed_at: started,
                cas: granted
                    .iter()
                    .filter_map(|grant| Some((grant.server, grant.cas?)))
                    .collect(),
                spare: None,
            });
            self.holds.insert(&hold);
            return Ok(Attempt::Acquired {
                fencing_token,
                state: GrantState::from_arc(hold),
            });
        }

        self.roll_back(&granted, &in_doubt, lock_key, request.lease_id)
            .await;
        if errors.len() > targets.len() - need {
            return Err(combined(
                &format!(
                    "{} of {} servers did not answer and {need} must grant",
                    errors.len(),
                    targets.len()
                ),
                errors,
            ));
        }
        if granted.len() >= need {
            return Err(Error::Backend {
                backend: BACKEND,
                message: format!(
                    "acquiring {} took {elapsed:?}, too long for a lease of {:?}",
                    request.name, request.lease
                ),
                source: None,
            });
        }
        let holding = self.holding(&held_on, lock_key, deadline).await;
        if let Some(limit) = holding.semaphore {
            return Err(request
                .claim
                .conflict(&request.name, Claim::Permit { limit }));
        }
        Ok(Attempt::Held {
            retry_after: holding.left,
        })
    }

    /// Extends many leases at once: their commands share the pipelined
    /// connections, so a batch costs a few round trips, not one per lease.
    fn extend_many_limit(&self) -> usize {
        // A few commands extend any number of leases.
        usize::MAX
    }

    async fn extend_many(&self, leases: &[Lease]) -> distlock_core::backend::Extended {
        let mut outcomes = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(EXTEND_CONCURRENCY) {
            outcomes.extend(
                futures::future::join_all(chunk.iter().map(|lease| self.extend_one(lease))).await,
            );
        }
        distlock_core::backend::Extended::new(outcomes, None)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        if let Claim::Permit { limit } = lease.claim {
            return Box::pin(self.release_permit(lease, limit)).await;
        }
        let hold = LockHold::of(lease);
        let (hold, cas) = match hold.map(|hold| (hold, hold.standing(lease.id))) {
            Some((hold, Standing::Current(cas))) => {
                hold.end(lease.id);
                (Some(hold), cas)
            }
            Some((_, Standing::HandedOn)) => return Ok(false),
            // Released or lost already, or a grant whose answer was lost
            // (core releases it by its identity, with no state).
            Some((_, Standing::Ended)) | None => (None, SmallVec::new()),
        };
        let (key, owner) = self.key_and_owner(hold, lease);
        let key = &*key;
        let (targets, need) = self.targets(&lease.name);
        let deadline = Deadline::after(self.call_timeout(lease.operation_timeout));
        let outcomes = self
            .each(&targets, |index, server| {
                release_on(server, key, owner, cas_on(&cas, index), deadline)
            })
            .await;
        let mut released = 0;
        let mut errors = Vec::new();
        for outcome in outcomes {
            match outcome {
                Ok(true) => released += 1,
                Ok(false) => {}
                Err(error) => errors.push(error),
            }
        }
        if released >= need {
            if !errors.is_empty() {
                tracing::warn!(name = %lease.name, error = %combined("unanswered", errors), "released; some servers did not answer and keep the lock until it expires");
            }
            return Ok(true);
        }
        if hold.is_none() {
            // A grant this backend never saw confirmed (its answer was lost,
            // and the core releases it by identity) may still be queued on
            // another connection and land after this look: look once more
            // when it must have.
            let servers = self.servers_at(&targets);
            let (key, id, patience) = (key.clone(), lease.id, self.config.timeout());
            tokio::spawn(async move {
                tokio::time::sleep(patience).await;
                release_from(&servers, &key, id, patience).await;
            });
        }
        if !errors.is_empty() && released + errors.len() >= need {
            return Err(combined(
                &format!(
                    "released on {released} of {} servers, the rest did not answer",
                    targets.len()
                ),
                errors,
            ));
        }
        Ok(false)
    }

    async fn list(&self) -> Result<Vec<LockInfo>> {
        let mine = self.holds.live();
        let mut locks = Vec::with_capacity(mine.len());
        for chunk in mine.chunks(LIST_CONCURRENCY) {
            let checks = chunk.iter().map(|hold| async move {
                // A hold that ended is not listed, though a grant's state
                // may keep it alive.
                let Some(listed) = hold.listed() else {
                    return Ok(None);
                };
                let (targets, need) = self.targets(&hold.name);
                let deadline = Deadline::after(self.config.timeout());
                let outcomes = self
                    .each(&targets, |_, server| {
                        read_on(server, &hold.key, hold.owner, deadline)
                    })
                    .await;
                let mut ours = 0;
                let mut gone = 0;
                let mut errors = Vec::new();
                for outcome in outcomes {
                    match outcome {
                        Ok(Ownership::Ours { .. }) => ours += 1,
                        Ok(Ownership::Other | Ownership::Missing) => gone += 1,
                        Err(error) => errors.push(error),
                    }
                }
                if ours >= need {
                    Ok(Some((listed, true)))
                } else if targets.len() - gone < need {
                    Ok(Some((listed, false)))
                } else {
                    Err(combined("cannot tell whether a lock is held", errors))
                }
            });
            let verdicts = futures::future::join_all(checks).await;
            for (hold, verdict) in chunk.iter().zip(verdicts) {
                match verdict? {
                    Some((listed, true)) => locks.push(LockInfo {
                        name: hold.name.clone(),
                        kind: LockKind::Exclusive,
                        permits: None,
                        holder: Some(Holder::clone(&hold.holder)),
                        fencing_token: Some(listed.fencing_token),
                        expires_in: Some(
                            (listed.confirmed_at + hold.lease)
                                .saturating_duration_since(Instant::now()),
                        ),
                    }),
                    Some((_, false)) => hold.forget(),
                    None => {}
                }
            }
        }
        locks.extend(self.list_permits().await?);
        locks.sort_by(|a, b| (&a.name, a.fencing_token).cmp(&(&b.name, b.fencing_token)));
        Ok(locks)
    }

    /// In sharded mode, deletes the lock key and every permit slot the
    /// name can have, in one write. Quorum mode grants no permits, so it
    /// deletes the lock key on every server.
    async fn force_release(&self, name: &LockName) -> Result<bool> {
        if self.config.mode() == Mode::Sharded {
            return self.force_release_sharded(name).await;
        }
        let (targets, need) = self.targets(name);
        let key = self.keys.lock_key(name);
        let deadline = Deadline::after(self.config.timeout());
        let outcomes = self
            .each(&targets, |_, server| delete_on(server, &key, deadline))
            .await;
        let mut deleted = 0;
        let mut errors = Vec::new();
        for outcome in outcomes {
            match outcome {
                Ok(true) => deleted += 1,
                Ok(false) => {}
                Err(error) => errors.push(error),
            }
        }
        if deleted >= need {
            return Ok(true);
        }
        if !errors.is_empty() && deleted + errors.len() >= need {
            return Err(combined(
                &format!(
                    "deleted on {deleted} of {} servers, the rest did not answer",
                    targets.len()
                ),
                errors,
            ));
        }
        Ok(false)
    }

    fn abilities(&self) -> Abilities<'_> {
        // Quorum mode cannot end one grant and make the next on every
        // server in one step. A later release is an extension (its TTL
        // rounded up to whole seconds, and one more, which only lengthens
        // it).
        match self.config.mode() {
            Mode::Sharded => Abilities::none().with_hand_overs(self),
            Mode::Quorum => Abilities::none(),
        }
    }
}

#[async_trait]
impl HandOvers for MemcachedBackend {
    /// In sharded mode: without a server command when this process holds
    /// the lease with at least half of it left and a reserved token to
    /// spare (`LockHold::pass_on`); otherwise one compare-and-swap
    /// store of the next grant over ours, with the counter's increment in
    /// the same write, which reserves the tokens for the next ones (see the
    /// crate documentation). Quorum mode answers [`Error::Unsupported`].
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
        let hold = LockHold::of(lease);
        let server = self.ring.server_of(&lease.name);
        let (old, known) = match hold.map(|hold| (hold, hold.standing(lease.id))) {
            Some((hold, Standing::Current(cas))) => {
                // Without a server command, if this process holds the lease
                // with at least half of it left and a reserved token to
                // spare: the key stays as it is, still naming the earlier
                // grant of this process that stored it, and `next` shares
                // its hold (see [`LockHold`]), so it ends when `lease`
                // would have, unless the keeper extends it.
                let alike = hold.lease == next.lease && hold.holder == next.holder;
                if let Some((fencing_token, confirmed_at)) = alike
                    .then(|| hold.pass_on(lease.id, next.lease_id))
                    .flatten()
                {
                    return Ok(HandOver::Granted {
                        fencing_token,
                        confirmed_at: Some(confirmed_at),
                        // The same hold, shared: no allocation.
                        state: lease.state.clone(),
                    });
                }
                (Some(hold), cas_on(&cas, server))
            }
            Some((_, Standing::HandedOn)) => return Ok(HandOver::NotOurs),
            Some((_, Standing::Ended)) | None => (None, None),
        };
        let ttl = lease_ttl(next.lease)?;
        let (key, token_key) = self.keys.both_keys(&lease.name);
        // The next grant's state, with the value it stores.
        let new = Arc::new(LockHold::new(
            next.name.clone(),
            key,
            next.holder.clone(),
            next.lease,
            next.lease_id,
            lock_value_inline(next.lease_id, &next.name, &next.holder),
        ));
        let next_grant = NextGrant {
            key: &new.key,
            token_key: &token_key,
            value: &new.value,
            ttl,
            // Acquire's seed, but above the old token, in case the counter
            // was lost while we held the lock.
            seed: token_seed(SystemTime::now()).max(lease.fencing_token.saturating_add(1)),
        };
        let old_owner = old.map_or(lease.id, |hold| hold.owner);
        let deadline =
            Deadline::after(self.call_timeout(lease.operation_timeout.min(next.operation_timeout)));
        let started = Instant::now();
        let outcome = self
            .each(&[server], |_, on| {
                hand_over_on(on, &next_grant, old_owner, known, deadline)
            })
            .await
            .pop()
            .expect("one answer per server")?;
        if let Some(old) = old {
            // Ours no more, whatever the answer.
            old.end(lease.id);
        }
        let HandedOver::Granted {
            token,
            token_cas,
            cas,
        } = outcome
        else {
            return Ok(HandOver::NotOurs);
        };
        // The increment reserved the `TOKEN_BLOCK` tokens up to `token`,
        // all above the old grant's, unless it created the counter (its
        // answer is then the seed) or the counter was re-created below the
        // old token: then only `token`, raised if need be, is ours.
        let reserved =
            token != next_grant.seed && token.checked_sub(TOKEN_BLOCK) >= Some(lease.fencing_token);
        let (fencing_token, spare) = if reserved {
            let first = token - TOKEN_BLOCK + 1;
            (first, Spare::after(first, token))
        } else {
            (token.max(lease.fencing_token.saturating_add(1)), None)
        };
        new.begin(FirstGrant {
            id: next.lease_id,
            fencing_token,
            confirmed_at: started,
            cas: cas.map(|known| (server, known)).into_iter().collect(),
            spare,
        });
        if token < fencing_token {
            // The counter was re-created below the old token while we held
            // the lock (by a client whose clock is behind ours): raise it,
            // so that later grants get more than this one.
            let raised = self
                .each(&[server], |_, on| {
                    raise_on(on, &token_key, token_cas, fencing_token, deadline)
                })
                .await
                .pop()
                .expect("one answer per server");
            if !matches!(raised, Ok(true)) {
                // Core releases both grants after an error.
                return Err(Error::Backend {
                    backend: BACKEND,
                    message: format!(
                        "handed {} over, but could not raise its fencing counter to \
                         {fencing_token}{}",
                        lease.name,
                        raised.err().map(|e| format!(": {e}")).unwrap_or_default()
                    ),
                    source: None,
                });
            }
        }
        self.holds.insert(&new);
        Ok(HandOver::Granted {
            fencing_token,
            confirmed_at: None,
            state: GrantState::from_arc(new),
        })
    }
}

//! The servers a name's keys live on, and how many must agree: quorum
//! mode asks every server and needs a majority; sharded mode is a quorum
//! of one, the server the ring picks for the name. Every operation on a
//! name asks [`Quorum::targets`], runs one server's operation
//! ([`crate::ops`]) on each with [`Quorum::each`], and counts the answers.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::LeaseId;
use distlock_core::{Error, LockName, Result};
use smallvec::SmallVec;

use crate::config::{MemcachedConfig, Mode};
use crate::instance::KnownCas;
use crate::keys::{KeySpace, Ring};
use crate::ops::{Deadline, Occupant, occupant_on, release_from, release_on, swap_on};
use crate::pool::{BACKEND, Server};
use crate::proto::{Batch, Code, Inline, Key};

/// The servers that hold a name's keys, without allocating: every call
/// of an operation asks.
pub(crate) enum Targets<'a> {
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
pub(crate) type Outcomes<T> = SmallVec<[Result<T>; 1]>;

/// A grant of a lock by one server.
pub(crate) struct ServerGrant {
    pub(crate) server: usize,
    pub(crate) token: u64,
    /// The token counter's CAS, to raise it in quorum mode.
    pub(crate) token_cas: u64,
    /// The lock's CAS.
    pub(crate) cas: Option<KnownCas>,
}

/// A server's copy of a grant that a resume took up.
pub(crate) struct ServerSwap {
    pub(crate) server: usize,
    /// The copy's new CAS.
    pub(crate) cas: Option<KnownCas>,
    /// The old grant's value, and the seconds it had left when read, to
    /// put it back with.
    pub(crate) was: Inline,
    pub(crate) left: Option<u32>,
}

/// What every part of the backend works on, for one call: the servers,
/// the key space, and the backend's `timeout`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Store<'a> {
    pub(crate) quorum: &'a Quorum,
    pub(crate) keys: &'a KeySpace,
    pub(crate) timeout: Duration,
}

/// The configured servers, in the configured mode.
#[derive(Debug)]
pub(crate) struct Quorum {
    servers: Vec<Arc<Server>>,
    /// The index of every server, for quorum mode's calls.
    everyone: Vec<usize>,
    ring: Ring,
    mode: Mode,
    /// How many servers must agree: one in sharded mode.
    need: usize,
    /// The backend's `timeout`: what a roll-back in the background gets.
    timeout: Duration,
}

impl Quorum {
    /// The servers of `config`, not yet connected.
    pub(crate) fn new(config: &MemcachedConfig) -> Self {
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
            everyone: (0..servers.len()).collect(),
            servers,
            mode: config.mode(),
            need: config.quorum(),
            timeout: config.timeout(),
        }
    }

    /// The configured mode.
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// Every server's index, in the order configured.
    pub(crate) fn everyone(&self) -> &[usize] {
        &self.everyone
    }

    /// The server at `index`.
    pub(crate) fn server(&self, index: usize) -> &Arc<Server> {
        &self.servers[index]
    }

    /// The servers that hold `name`, and how many of them must agree.
    pub(crate) fn targets(&self, name: &LockName) -> (Targets<'_>, usize) {
        match self.mode {
            Mode::Sharded => (Targets::One([self.ring.server_of(name)]), 1),
            Mode::Quorum => (Targets::All(&self.everyone), self.need),
        }
    }

    /// The index of the server that sharded mode keeps `name`'s keys on.
    pub(crate) fn shard_index(&self, name: &LockName) -> usize {
        self.ring.server_of(name)
    }

    /// The server that sharded mode keeps `name`'s keys on.
    pub(crate) fn shard(&self, name: &LockName) -> &Arc<Server> {
        &self.servers[self.ring.server_of(name)]
    }

    /// Runs `op` on each of `targets` at once, and returns the outcomes in
    /// the order of `targets`. Sets no timer: each operation bounds its own
    /// calls by its [`Deadline`].
    pub(crate) async fn each<'a, T, F, Fut>(&'a self, targets: &[usize], op: F) -> Outcomes<T>
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
    pub(crate) async fn occupant(
        &self,
        servers: &[usize],
        key: &Key,
        deadline: Deadline,
    ) -> Occupant {
        let mut occupant = Occupant {
            left: None,
            semaphore: None,
        };
        let outcomes = self
            .each(servers, |_, server| occupant_on(server, key, deadline))
            .await;
        // A hint, not a verdict: a server that does not say is skipped.
        for on_server in outcomes.into_iter().flatten() {
            occupant.left = match (occupant.left, on_server.left) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            occupant.semaphore = occupant.semaphore.or(on_server.semaphore);
        }
        occupant
    }

    /// Adds our copy of `key` again on `servers`, which answered that it was
    /// gone (they restarted), so that the lock keeps a full set of copies.
    /// Returns the CAS of each server's copy, where one was added.
    pub(crate) async fn restore(
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
    pub(crate) async fn roll_back(
        &self,
        granted: &[ServerGrant],
        in_doubt: &[usize],
        key: &Key,
        id: LeaseId,
    ) {
        // With time of its own: the operation's may be up.
        let patience = self.timeout;
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

    /// Puts the old grant back, best effort, where a resume that fell short
    /// made `key` grant `id` (`swapped`): as it was, with the time it had
    /// left (at least a second, which memcached's clock may round away),
    /// by compare-and-swap on our copy only; and deletes grant `id` from
    /// the servers whose answer was lost, as [`roll_back`](Self::roll_back)
    /// does. So a resume that does not hold leaves the old grant's copies
    /// as they were, where it can.
    pub(crate) async fn put_back(
        &self,
        swapped: &[ServerSwap],
        in_doubt: &[usize],
        key: &Key,
        id: LeaseId,
        flags: u32,
    ) {
        // With time of its own: the operation's may be up.
        let deadline = Deadline::after(self.timeout);
        let servers: Vec<usize> = swapped.iter().map(|swap| swap.server).collect();
        let outcomes = self
            .each(&servers, |index, server| {
                let swap = swapped
                    .iter()
                    .find(|swap| swap.server == index)
                    .expect("a swap per server");
                let left = swap.left.unwrap_or(1).max(1);
                swap_on(server, key, id, (&swap.was, flags), left, deadline)
            })
            .await;
        for (index, outcome) in servers.iter().zip(outcomes) {
            if let Err(error) = outcome {
                tracing::debug!(server = self.servers[*index].addr(), %error, "could not put back a grant that a resume took up; it will expire");
            }
        }
        self.roll_back(&[], in_doubt, key, id).await;
    }

    pub(crate) fn servers_at(&self, indexes: &[usize]) -> Vec<Arc<Server>> {
        indexes
            .iter()
            .map(|&index| self.servers[index].clone())
            .collect()
    }
}

/// Several servers' errors as one.
pub(crate) fn combined(what: &str, errors: Vec<Error>) -> Error {
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

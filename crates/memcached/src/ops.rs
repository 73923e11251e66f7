//! One server's operations: each sends one write (a batch of meta
//! commands, pipelined on one connection) or a short loop of them, and
//! says what that server answered. Counting the answers of several servers
//! is [`crate::quorum`]'s.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::LeaseId;
use distlock_core::{Claim, Error, Result};
use tokio::time::Instant;

use crate::instance::{Instance, KnownCas};
use crate::lease::{is_ours, may_pass_on};
use crate::pool::Server;
use crate::proto::{Batch, Code, Inline, Key, Reply};

/// How long a fencing-token counter outlives its last use, in seconds
/// (30 days, memcached's longest relative expiry). Counters of names that
/// are no longer used go away; a counter that is lost is re-created from
/// the clock.
pub(crate) const COUNTER_TTL: u64 = 60 * 60 * 24 * 30;

/// How many times a conditional write is retried when the item changed
/// between reading it and writing it.
pub(crate) const CAS_RETRIES: usize = 8;

/// When an operation on the servers must be over. Every call it makes
/// gets the time that is left, so a loop of reads and retries ends in time
/// too, and no timer wraps the whole.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline(Instant);

impl Deadline {
    pub(crate) fn after(patience: Duration) -> Self {
        Self(Instant::now() + patience)
    }

    /// The deadline of a call on a lease: the client's operation timeout,
    /// or the backend's `timeout` if that is shorter.
    pub(crate) fn for_call(timeout: Duration, operation_timeout: Duration) -> Self {
        Self::after(timeout.min(operation_timeout))
    }

    /// The time left; zero once it has passed, and a call then fails at
    /// once with a timeout.
    pub(crate) fn left(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }
}

/// What one server said to an `add`.
pub(crate) enum Added {
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

/// What one server said to an extension of a lock.
pub(crate) enum LockExtended {
    Done {
        /// Our value as read from the server, when it was read.
        read: Option<Arc<[u8]>>,
        cas: Option<KnownCas>,
    },
    NotOurs,
    Missing,
}

/// What a failed add found at the lock key, on one server.
pub(crate) struct Occupant {
    /// How long the holder has left, when memcached says.
    pub(crate) left: Option<Duration>,
    /// The limit, when the key holds a semaphore's record rather than a
    /// lock.
    pub(crate) semaphore: Option<u32>,
}

/// What one server did with a grant that a resume takes up
/// ([`swap_on`]).
pub(crate) enum Swapped {
    /// The item is the new grant's now: its CAS, and the old grant's
    /// value and the seconds it had left, to put it back with.
    Done {
        cas: Option<KnownCas>,
        was: Inline,
        left: Option<u32>,
    },
    /// Another grant's, another claim's, or a hold that may have passed on
    /// within its process since it was stored.
    NotOurs,
    Missing,
}

/// What a compare-and-swap store did.
pub(crate) enum CasStore {
    /// Stored; the item's new CAS.
    Done(Option<KnownCas>),
    /// The item has another CAS.
    Changed,
    Missing,
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

/// The CAS of the item that an `add` (answered by `from`) stored, for a
/// `what` (a lease, a permit): an error when memcached runs without CAS
/// values, where the item stays until its TTL ends, since nothing could
/// extend or delete it safely.
pub(crate) fn cas_of_add(
    server: &Server,
    stored: &Reply,
    from: Option<Instance>,
    what: &str,
) -> Result<Option<KnownCas>> {
    if stored.flag_u64('c') == Some(0) {
        return Err(server.message(format!(
            "this memcached runs without CAS values (-C), so no {what} could be \
             extended or released safely; restart it without -C"
        )));
    }
    Ok(KnownCas::new(from, stored.flag_u64('c')))
}

/// `add` of the lock key, returning its CAS, and the counter's increment
/// (created from `seed` when missing), in one round trip. Nothing else:
/// how long the holder has left matters only when the add fails, and is
/// read then ([`occupant_on`]).
pub(crate) async fn add_on(
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
            let cas = cas_of_add(server, &stored, from, "lease")?;
            let (token, token_cas) = token_of(server, &counter)?;
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
pub(crate) async fn occupant_on(
    server: &Server,
    key: &Key,
    deadline: Deadline,
) -> Result<Occupant> {
    let reply = server
        .meta_one(Batch::new().mg(key, "t f"), deadline.left())
        .await?;
    Ok(match reply.code {
        Code::En => Occupant {
            left: Some(Duration::ZERO),
            semaphore: None,
        },
        _ => Occupant {
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
pub(crate) async fn extend_on(
    server: &Server,
    key: &Key,
    id: LeaseId,
    ttl: u32,
    remembered: Option<(&[u8], KnownCas)>,
    deadline: Deadline,
) -> Result<LockExtended> {
    if let Some((value, known)) = remembered {
        let expected = (Some(known.instance), known.cas);
        match store_again(server, key, value, expected, ttl, deadline).await? {
            Some(CasStore::Done(cas)) => return Ok(LockExtended::Done { read: None, cas }),
            Some(CasStore::Missing) => return Ok(LockExtended::Missing),
            // Changed since (perhaps by an extension of ours whose answer
            // was lost), or another process answers now: read to tell.
            Some(CasStore::Changed) | None => {}
        }
    }
    for _ in 0..CAS_RETRIES {
        let (expected, value) = match read_on(server, key, id, deadline).await? {
            Ownership::Ours { cas, from, value } => ((from, cas), Arc::<[u8]>::from(&value[..])),
            Ownership::Other => return Ok(LockExtended::NotOurs),
            Ownership::Missing => return Ok(LockExtended::Missing),
        };
        match store_again(server, key, &value, expected, ttl, deadline).await? {
            Some(CasStore::Done(cas)) => {
                return Ok(LockExtended::Done {
                    read: Some(value),
                    cas,
                });
            }
            // Changed or deleted since we read it: no longer ours.
            Some(CasStore::Changed) => return Ok(LockExtended::NotOurs),
            Some(CasStore::Missing) => return Ok(LockExtended::Missing),
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

/// Makes the item at `key` grant `new`'s, stored as `value` with the client
/// flags `flags` and an expiry of `ttl` seconds, if it is grant `old`'s
/// with those flags (a lock's, or a permit of the same limit) and is not
/// marked as a hold that may have passed on within its process
/// ([`may_pass_on`]): by compare-and-swap on the CAS read just before, so
/// that the item is changed only as it was read. An item that still
/// exists has not expired by the server's clock. Read again when the item
/// changed in between (an extension by the old holder).
pub(crate) async fn swap_on(
    server: &Server,
    key: &Key,
    old: LeaseId,
    (value, flags): (&[u8], u32),
    ttl: u32,
    deadline: Deadline,
) -> Result<Swapped> {
    for _ in 0..CAS_RETRIES {
        let (mut replies, from) = server
            .meta_from(Batch::new().mg(key, "v c f t"), deadline.left())
            .await?;
        let read = replies.pop().ok_or_else(|| server.message("no reply"))?;
        let was = match read.code {
            Code::En => return Ok(Swapped::Missing),
            Code::Va => read.value.clone().unwrap_or_default(),
            _ => return Err(unexpected(server, "a get", &read)),
        };
        if !is_ours(&was, old) || read.flag_u64('f') != Some(u64::from(flags)) || may_pass_on(&was)
        {
            return Ok(Swapped::NotOurs);
        }
        let cas = read
            .flag_u64('c')
            .ok_or_else(|| server.message("a value came without its CAS"))?;
        let store = Batch::new().ms(key, value, format_args!("C{cas} T{ttl} F{flags} c"));
        // Sent only to the process that issued the CAS; to another one
        // (the server restarted), nothing is sent and we read again.
        let Some(stored) = server.meta_one_to(from, store, deadline.left()).await? else {
            continue;
        };
        match stored.code {
            Code::Hd => {
                return Ok(Swapped::Done {
                    cas: KnownCas::new(from, stored.flag_u64('c')),
                    was,
                    // `t-1`: no expiry, which no grant has.
                    left: read.flag_i64('t').and_then(|t| u32::try_from(t).ok()),
                });
            }
            // Changed since we read it: look again.
            Code::Ex => {}
            Code::Nf => return Ok(Swapped::Missing),
            // memcached deleted the item when it could not store its
            // replacement: the grant is gone.
            Code::ServerError => {
                tracing::warn!(error = %unexpected(server, "a resume", &stored), "the grant is lost");
                return Ok(Swapped::Missing);
            }
            _ => return Err(unexpected(server, "a compare-and-swap store", &stored)),
        }
    }
    Err(server.message("the grant kept changing while we took it up"))
}

/// Deletes `key` whoever holds it. Returns whether it was there.
pub(crate) async fn delete_on(server: &Server, key: &Key, deadline: Deadline) -> Result<bool> {
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
pub(crate) async fn raise_on(
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

/// What a lock key whose client flags are `flags` holds the name as: a
/// lock's item is stored without flags, a semaphore's record with its
/// limit (see [`crate::semaphore`]).
pub(crate) fn held_as(flags: u64) -> Claim {
    match u32::try_from(flags) {
        Ok(0) => Claim::Exclusive,
        Ok(limit) => Claim::Permit { limit },
        // memcached's flags are 32 bits; no item of ours has more.
        Err(_) => Claim::Permit { limit: u32::MAX },
    }
}

/// The limit of the semaphore whose record `reply` (a read of a lock key
/// with `f`) shows, if it shows one: how an exclusive request that found
/// the key taken tells a semaphore from a lock.
pub(crate) fn semaphore_limit(reply: &Reply) -> Option<u32> {
    match held_as(reply.flag_u64('f')?) {
        Claim::Permit { limit } => Some(limit),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_tell_a_lock_from_a_semaphore() {
        assert_eq!(held_as(0), Claim::Exclusive);
        assert_eq!(held_as(7), Claim::Permit { limit: 7 });
    }
}

//! Hand-over, in sharded mode: the lock passes from a grant of this
//! process to the next one that waits for it, and is never free in between
//! (see `docs/memcached.md`, "Hand-over").

use std::sync::Arc;
use std::time::SystemTime;

use distlock_core::backend::{AcquireRequest, GrantState, HandOver, Lease, LeaseId};
use distlock_core::{Error, Result};
use tokio::time::Instant;

use crate::exclusive::Locks;
use crate::grant::{FirstGrant, LockGrant, Spare, Standing, cas_on};
use crate::instance::KnownCas;
use crate::lease::{Passing, lease_ttl, lock_value_inline, token_seed};
use crate::ops::{
    CAS_RETRIES, Deadline, Ownership, counted, raise_on, read_on, token_of, two_replies, unexpected,
};
use crate::pool::{BACKEND, Server};
use crate::proto::{Batch, Code, Key};

/// How many fencing tokens a hand-over through the server reserves: the
/// counter's increment adds this many, the grant takes the first, and the
/// next hand-overs within the same run take the rest without a server
/// command (see [`LockGrant::pass_on`]).
const TOKEN_BLOCK: u64 = 16;

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

/// Hands `lease` over to `next`, in sharded mode: without a server
/// command when this process holds the lease with at least half of it left
/// and a reserved token to spare ([`LockGrant::pass_on`]); otherwise one
/// compare-and-swap store of the next grant over ours, with the counter's
/// increment in the same write, which reserves the tokens for the next
/// ones.
pub(crate) async fn hand_over(
    locks: &Locks<'_>,
    lease: &Lease,
    next: &AcquireRequest,
) -> Result<HandOver> {
    let lock_grant = LockGrant::of(lease);
    let server = locks.store.quorum.shard_index(&lease.name);
    let (old, known) =
        match lock_grant.map(|lock_grant| (lock_grant, lock_grant.standing(lease.id))) {
            Some((lock_grant, Standing::Current(cas))) => {
                // Without a server command, if this process holds the lease
                // with at least half of it left and a reserved token to
                // spare: the key stays as it is, still naming the earlier
                // grant of this process that stored it, and `next` shares
                // its hold (see [`LockGrant`]), so it ends when `lease`
                // would have, unless the keeper extends it.
                let alike = lock_grant.lease == next.lease && lock_grant.holder == next.holder;
                if let Some((fencing_token, confirmed_at)) = alike
                    .then(|| lock_grant.pass_on(lease.id, next.lease_id))
                    .flatten()
                {
                    return Ok(HandOver::Granted {
                        fencing_token,
                        confirmed_at: Some(confirmed_at),
                        // The same hold, shared: no allocation.
                        state: lease.state.clone(),
                    });
                }
                (Some(lock_grant), cas_on(&cas, server))
            }
            Some((_, Standing::HandedOn)) => return Ok(HandOver::NotOurs),
            Some((_, Standing::Ended)) | None => (None, None),
        };
    let ttl = lease_ttl(next.lease)?;
    let (key, token_key) = locks.store.keys.both_keys(&lease.name);
    // The next grant's state, with the value it stores.
    let new = Arc::new(LockGrant::new(
        next.name.clone(),
        key,
        next.holder.clone(),
        next.lease,
        next.lease_id,
        // Marked: later hand-overs may pass this hold on without a server
        // command, and a resume must then not take it up by this identity.
        lock_value_inline(
            next.lease_id,
            &next.name,
            &next.holder,
            Passing::OnInProcess,
        ),
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
    let old_owner = old.map_or(lease.id, |lock_grant| lock_grant.owner);
    let deadline = Deadline::for_call(
        locks.store.timeout,
        lease.operation_timeout.min(next.operation_timeout),
    );
    let started = Instant::now();
    let outcome = locks
        .store
        .quorum
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
        let raised = locks
            .store
            .quorum
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
    locks.listing.insert(&new);
    Ok(HandOver::Granted {
        fencing_token,
        confirmed_at: None,
        state: GrantState::from_arc(new),
    })
}

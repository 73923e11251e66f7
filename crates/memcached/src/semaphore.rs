//! Semaphores, in sharded mode: a permit is a slot key taken with `add`
//! and owned through CAS, as a lock key is, and a record at the name's
//! lock key says that the name is a semaphore, and of how many permits
//! ([`record`]).
//!
//! - **Slots.** A semaphore of `limit` permits has the slot keys
//!   `<prefix>S0…` to `S<limit-1>…`, on the server that holds the name's
//!   lock key and token counter. A slot's value is a grant's identity and
//!   details, as a lock's is; its client flags are the limit.
//! - **Claiming a slot** is one write: the slot's `add`, the record's
//!   `add`, an empty append to the lock key that gives it a new CAS, a read
//!   of the lock key, and the token counter's increment. The first slot
//!   tried is picked at random; when it is taken, every slot is read in
//!   one write, and free ones are claimed in random order, a few at most.
//! - **Kinds.** The read in the claim tells whether the name is a lock or
//!   a semaphore of another limit, and an exclusive `add` fails while the
//!   record lives, so either request gets `Error::KindConflict`.
//! - **The record lives as long as the permits**: every claim and
//!   extension reads it right after storing its slot, and raises it when
//!   it would end first; the last holder to release deletes it, unless a
//!   slot was taken meanwhile.
//!
//! The guarantees and their limits are in docs/memcached.md, "Semaphores".

mod record;
mod slots;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use distlock_core::backend::Waiters;
use distlock_core::backend::{AcquireRequest, Attempt, GrantState, Lease, LeaseId};
use distlock_core::{
    Claim, Error, Holder, LockInfo, LockKind, LockName, MAX_PERMITS, Permits, Result,
};
use tokio::time::Instant;

use crate::config::Mode;
use crate::grant::{LIST_CONCURRENCY, Listing, PermitGrant, PermitLive};
use crate::instance::KnownCas;
use crate::keys::SlotKeys;
use crate::lease::{lease_ttl, lock_value, token_seed};
use crate::ops::{
    Deadline, Ownership, Swapped, read_on, release_from, release_on, semaphore_limit, swap_on,
    unexpected,
};
use crate::proto::{Batch, Code, Key};
use crate::quorum::Store;

use self::record::{Record, Seen};
use self::slots::{
    Scan, SlotClaim, SlotExtended, SlotGrant, claim_slot, clear_idle_record, extend_slot,
    find_slot, release_by_identity, scan_slots, spread,
};

/// How many free slots one attempt claims, after the first slot it tried,
/// before it reports the semaphore held: other clients may take each of
/// them first, and the next attempt looks again.
const CLAIM_TRIES: usize = 3;

/// The backend's semaphores, as one call sees them.
pub(crate) struct Semaphores<'a> {
    pub(crate) store: Store<'a>,
    /// The permits this instance holds, for `list`.
    pub(crate) listing: &'a Listing<PermitGrant>,
}

impl Semaphores<'_> {
    /// Tries once to take one of `limit` permits of `request.name`: claims
    /// a slot picked at random, and when it is taken, looks at every slot
    /// and claims free ones, a few at most.
    pub(crate) async fn try_acquire(
        &self,
        request: &AcquireRequest,
        limit: u32,
    ) -> Result<Attempt> {
        self.sharded()?;
        let ttl = lease_ttl(request.lease)?;
        let name = &request.name;
        let server = self.store.quorum.shard(name);
        let (lock, token) = self.store.keys.both_keys(name);
        let slots = self.store.keys.slot_keys(name);
        let want = SlotClaim {
            server,
            limit,
            lock: &lock,
            token: &token,
            value: lock_value(request.lease_id, name, &request.holder),
            ttl,
            seed: token_seed(SystemTime::now()),
            record: Record::new(limit, ttl),
            started: Instant::now(),
            deadline: Deadline::for_call(self.store.timeout, request.operation_timeout),
        };
        // Contending clients start at different slots, so that they rarely
        // race for the same one.
        let mut slot = spread(request.lease_id, 0, limit as usize) as u32;
        let mut scanned: Option<Scan> = None;
        for round in 1..=CLAIM_TRIES + 1 {
            let key = slots.key(slot);
            let claimed = match claim_slot(&want, &key).await {
                Ok(claimed) => claimed,
                Err(error) => {
                    self.abandon_in_doubt(name, key, request.lease_id);
                    return Err(error);
                }
            };
            if let Some(grant) = claimed.grant {
                return self
                    .keep_grant(request, &want, key, grant, claimed.record)
                    .await;
            }
            if let Seen::Other(held) = claimed.record {
                return Err(request.claim.conflict(name, held));
            }
            let scan = match scanned.as_mut() {
                Some(scan) => scan,
                None => scanned.insert(scan_slots(server, &slots, limit, want.deadline).await?),
            };
            if let Some(other) = scan.other_limit {
                return Err(request.claim.conflict(name, Claim::Permit { limit: other }));
            }
            match scan.next_after(slot, request.lease_id, round) {
                Some(next) => slot = next,
                None => {
                    return Ok(Attempt::Held {
                        retry_after: scan.soonest,
                    });
                }
            }
        }
        // Lost every race for a free slot: they are changing hands fast,
        // so the core's backoff, not a lease's end, says when to look again.
        Ok(Attempt::Held { retry_after: None })
    }

    /// An error unless in sharded mode, the only one with semaphores.
    fn sharded(&self) -> Result<()> {
        if self.store.quorum.mode() == Mode::Sharded {
            return Ok(());
        }
        Err(Error::Unsupported(
            "memcached grants semaphores in sharded mode only (the default): a permit \
             would have to hold the same slot on a majority of servers, which it cannot \
             claim in one step; use sharded mode for semaphores"
                .into(),
        ))
    }

    /// Keeps slot `key`, just claimed with `grant`, once the record (last
    /// `seen` so) says that the name is this semaphore and will outlive
    /// the slot; otherwise gives the slot back, and answers the conflict.
    async fn keep_grant(
        &self,
        request: &AcquireRequest,
        want: &SlotClaim<'_>,
        key: Key,
        grant: SlotGrant,
        seen: Seen,
    ) -> Result<Attempt> {
        let kept = want
            .record
            .keep(want.server, want.lock, seen, want.deadline)
            .await;
        let refusal = match kept {
            Ok(None) => {
                let lock_grant = Arc::new(PermitGrant {
                    id: request.lease_id,
                    name: request.name.clone(),
                    limit: want.limit,
                    key,
                    value: want.value.clone(),
                    holder: request.holder.clone(),
                    fencing_token: grant.token,
                    lease: request.lease,
                    state: PermitLive::claimed(want.started, grant.cas),
                });
                self.listing.insert(&lock_grant);
                return Ok(Attempt::Acquired {
                    fencing_token: grant.token,
                    state: GrantState::from_arc(lock_grant),
                });
            }
            Ok(Some(held)) => request.claim.conflict(&request.name, held),
            Err(error) => error,
        };
        self.abandon(
            &request.name,
            &key,
            request.lease_id,
            grant.cas,
            want.deadline,
        )
        .await;
        Err(refusal)
    }

    /// Extends permit `lease` if its slot is still ours, and keeps the
    /// semaphore's record alive as long as the slot.
    pub(crate) async fn extend(&self, lease: &Lease) -> Result<bool> {
        let Some(permit) = PermitGrant::of(lease) else {
            return Ok(false);
        };
        let live = permit.live();
        if live.ended {
            return Ok(false);
        }
        let ttl = lease_ttl(lease.lease)?;
        let server = self.store.quorum.shard(&lease.name);
        let lock = self.store.keys.lock_key(&lease.name);
        let record = Record::new(permit.limit, ttl);
        let deadline = Deadline::for_call(self.store.timeout, lease.operation_timeout);
        let started = Instant::now();
        let extended = extend_slot(server, permit, live.cas, ttl, &record, &lock, deadline).await?;
        let (cas, seen) = match extended {
            SlotExtended::Done { cas, record } => (cas, record),
            SlotExtended::Gone => {
                permit.end();
                return Ok(false);
            }
        };
        match record.keep(server, &lock, seen, deadline).await? {
            None => {
                permit.confirm(started, cas);
                Ok(true)
            }
            Some(held) => {
                // The record was lost (evicted, or memcached restarted) and
                // the name taken as another kind meanwhile: the permit
                // cannot live beside it.
                tracing::warn!(name = %lease.name, %held, "a permit's name is now held as another kind; the permit is lost");
                permit.end();
                self.abandon(&lease.name, &permit.key, lease.id, cas, deadline)
                    .await;
                Ok(false)
            }
        }
    }

    /// Takes up permit `lease` of a semaphore of `limit` permits for
    /// `request` (see [`Resumes`](distlock_core::backend::Resumes)): finds
    /// the slot that holds grant `lease.id` (every slot read in one write),
    /// and makes it `request`'s by compare-and-swap ([`swap_on`]), with the
    /// lease's expiry from now and the same limit; then keeps the
    /// semaphore's record alive as long as the slot, as an extension does.
    pub(crate) async fn resume(
        &self,
        lease: &Lease,
        request: &AcquireRequest,
        limit: u32,
    ) -> Result<Option<GrantState>> {
        self.sharded()?;
        let ttl = lease_ttl(request.lease)?;
        let name = &request.name;
        let server = self.store.quorum.shard(name);
        let slots = self.store.keys.slot_keys(name);
        let deadline = Deadline::for_call(self.store.timeout, request.operation_timeout);
        let started = Instant::now();
        let Some((slot, _)) = find_slot(server, &slots, limit, lease.id, deadline).await? else {
            return Ok(None);
        };
        let key = slots.key(slot);
        let value = lock_value(request.lease_id, name, &request.holder);
        let swapped = swap_on(server, &key, lease.id, (&value, limit), ttl, deadline).await?;
        let Swapped::Done { cas, .. } = swapped else {
            return Ok(None);
        };
        let lock = self.store.keys.lock_key(name);
        let kept = Record::new(limit, ttl)
            .keep(server, &lock, Seen::Missing, deadline)
            .await;
        let refusal = match kept {
            Ok(None) => None,
            Ok(Some(held)) => {
                // The record was lost (evicted, or memcached restarted)
                // and the name taken as another kind meanwhile.
                tracing::warn!(%name, %held, "a resumed permit's name is now held as another kind; the permit is lost");
                Some(Ok(None))
            }
            Err(error) => Some(Err(error)),
        };
        if let Some(refusal) = refusal {
            // The permit cannot live without its record.
            self.abandon(name, &key, request.lease_id, cas, deadline)
                .await;
            return refusal;
        }
        let permit = Arc::new(PermitGrant {
            id: request.lease_id,
            name: name.clone(),
            limit,
            key,
            value,
            holder: request.holder.clone(),
            fencing_token: lease.fencing_token,
            lease: request.lease,
            state: PermitLive::claimed(started, cas),
        });
        self.listing.insert(&permit);
        Ok(Some(GrantState::from_arc(permit)))
    }

    /// Releases permit `lease` of a semaphore of `limit` permits if its
    /// slot is still ours. The last permit of a semaphore to go deletes its
    /// record too, so that the name is free for any kind again: whether
    /// it is the last is not known here (this instance keeps no table of
    /// the permits it holds), so every release that freed a slot looks.
    pub(crate) async fn release(&self, lease: &Lease, limit: u32) -> Result<bool> {
        let server = self.store.quorum.shard(&lease.name);
        let slots = self.store.keys.slot_keys(&lease.name);
        let deadline = Deadline::for_call(self.store.timeout, lease.operation_timeout);
        let held = PermitGrant::of(lease).filter(|permit| permit.end());
        let released = match held {
            Some(permit) => {
                let cas = permit.live().cas;
                release_on(server, &permit.key, lease.id, cas, deadline).await?
            }
            None => self.release_unknown(lease, &slots, limit, deadline).await?,
        };
        if released {
            let lock = self.store.keys.lock_key(&lease.name);
            if let Err(error) = clear_idle_record(server, &lock, &slots, limit, deadline).await {
                tracing::debug!(name = %lease.name, %error, "could not clear a semaphore's record; it will expire");
            }
        }
        Ok(released)
    }

    /// Releases permit `lease`, which this instance does not hold: one
    /// lost or released already, or a grant whose answer never came (the
    /// core releases it by its identity), whose slot is not known. So every
    /// slot is read, and the one with the grant's identity, if any, is
    /// deleted by CAS. A claim still queued on another connection may land
    /// after this look, so when it finds nothing it looks once more, in the
    /// background, when the claim must have landed.
    async fn release_unknown(
        &self,
        lease: &Lease,
        slots: &SlotKeys,
        limit: u32,
        deadline: Deadline,
    ) -> Result<bool> {
        let server = self.store.quorum.shard(&lease.name);
        if release_by_identity(server, slots, limit, lease.id, deadline).await? {
            return Ok(true);
        }
        let (server, slots, id) = (server.clone(), slots.clone(), lease.id);
        let patience = self.store.timeout;
        tokio::spawn(async move {
            tokio::time::sleep(patience).await;
            let deadline = Deadline::after(patience);
            if let Err(error) = release_by_identity(&server, &slots, limit, id, deadline).await {
                tracing::debug!(%error, "could not look for a permit whose answer was lost; it will expire");
            }
        });
        Ok(false)
    }

    /// The permits this instance holds, each checked against its server.
    /// Their `in_use` is how many permits of the semaphore this instance
    /// holds: the others' are not known. Each check answers within the
    /// configured timeout or `limit`, the shorter.
    pub(crate) async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        let mine: Vec<Arc<PermitGrant>> = self
            .listing
            .live()
            .into_iter()
            .filter(|permit| !permit.live().ended)
            .collect();
        let mut live = Vec::with_capacity(mine.len());
        for chunk in mine.chunks(LIST_CONCURRENCY) {
            let checks = chunk.iter().map(|permit| {
                let deadline = Deadline::for_call(self.store.timeout, limit);
                read_on(
                    self.store.quorum.shard(&permit.name),
                    &permit.key,
                    permit.id,
                    deadline,
                )
            });
            let verdicts = futures::future::join_all(checks).await;
            for (permit, verdict) in chunk.iter().zip(verdicts) {
                match verdict? {
                    Ownership::Ours { .. } => live.push(permit),
                    Ownership::Other | Ownership::Missing => {
                        permit.end();
                    }
                }
            }
        }
        let mut in_use: HashMap<&LockName, u32> = HashMap::new();
        for permit in &live {
            *in_use.entry(&permit.name).or_default() += 1;
        }
        Ok(live
            .iter()
            .map(|permit| LockInfo {
                name: permit.name.clone(),
                kind: LockKind::Semaphore,
                permits: Some(Permits {
                    in_use: in_use[&permit.name],
                    limit: permit.limit,
                }),
                holder: Some(Holder::clone(&permit.holder)),
                fencing_token: Some(permit.fencing_token),
                expires_in: Some(
                    (permit.live().confirmed_at + permit.lease)
                        .saturating_duration_since(Instant::now()),
                ),
                waiters: Waiters::Unknown,
            })
            .collect())
    }

    /// Deletes `name`'s lock key and every slot it can have, in one write:
    /// the record may be gone while permits live, so the slots are not
    /// bounded by its limit but by [`MAX_PERMITS`]. Returns whether a lock
    /// or a permit was held. The write answers within the configured
    /// timeout or `limit`, the shorter.
    pub(crate) async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool> {
        let server = self.store.quorum.shard(name);
        let lock = self.store.keys.lock_key(name);
        let slots = self.store.keys.slot_keys(name);
        let deadline = Deadline::for_call(self.store.timeout, limit);
        let mut batch = Batch::new().mg(&lock, "f").md(&lock, "");
        for slot in 0..MAX_PERMITS {
            batch = batch.md(&slots.key(slot), "");
        }
        let replies = server.meta(batch, deadline.left()).await?;
        let [kind, lock_deleted, slots_deleted @ ..] = &replies[..] else {
            return Err(server.message("too few replies to a forced release"));
        };
        for deleted in std::iter::once(lock_deleted).chain(slots_deleted) {
            if !matches!(deleted.code, Code::Hd | Code::Nf) {
                return Err(unexpected(server, "a delete", deleted));
            }
        }
        // A semaphore's record alone is no holder.
        let lock_held = lock_deleted.code == Code::Hd && semaphore_limit(kind).is_none();
        Ok(lock_held || slots_deleted.iter().any(|deleted| deleted.code == Code::Hd))
    }

    /// Releases slot `key` of grant `id` on `name`'s server, where `cas`
    /// is its CAS if known; if that fails in time, later, in the
    /// background. For a slot that must not be kept.
    async fn abandon(
        &self,
        name: &LockName,
        key: &Key,
        id: LeaseId,
        cas: Option<KnownCas>,
        deadline: Deadline,
    ) {
        let server = self.store.quorum.shard(name);
        if let Err(error) = release_on(server, key, id, cas, deadline).await {
            tracing::debug!(%name, %error, "could not give a slot back at once; trying in the background");
            let (servers, key, patience) = ([server.clone()], key.clone(), self.store.timeout);
            tokio::spawn(async move { release_from(&servers, &key, id, patience).await });
        }
    }

    /// Releases slot `key` of grant `id` in the background, for a claim
    /// whose answer was lost: its add may have been stored, now or, queued
    /// on the connection, a little later, so it looks again one timeout on.
    fn abandon_in_doubt(&self, name: &LockName, key: Key, id: LeaseId) {
        let servers = [self.store.quorum.shard(name).clone()];
        let patience = self.store.timeout;
        tokio::spawn(async move {
            release_from(&servers, &key, id, patience).await;
            tokio::time::sleep(patience).await;
            release_from(&servers, &key, id, patience).await;
        });
    }
}

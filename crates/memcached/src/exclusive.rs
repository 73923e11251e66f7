//! Exclusive locks: one lock key per name, taken with `add` on every
//! server that holds the name, owned through CAS, and counted by
//! [`Quorum`]. Hand-over is [`crate::handover`]'s.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use distlock_core::backend::Waiters;
use distlock_core::backend::{AcquireRequest, Attempt, GrantState, Lease, LeaseId};
use distlock_core::{Claim, Error, Holder, LockInfo, LockKind, LockName, Result};
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::grant::{FirstGrant, LIST_CONCURRENCY, Listing, LockGrant, Standing, cas_on};
use crate::instance::KnownCas;
use crate::lease::{Passing, lease_ttl, lock_value_inline, token_seed};
use crate::ops::{
    Added, Deadline, LockExtended, Ownership, Swapped, add_on, delete_on, extend_on, raise_on,
    read_on, release_from, release_on, swap_on,
};
use crate::pool::BACKEND;
use crate::proto::Key;
use crate::quorum::{ServerGrant, ServerSwap, Store, combined};

/// The backend's exclusive locks, as one call sees them.
pub(crate) struct Locks<'a> {
    pub(crate) store: Store<'a>,
    /// The locks this instance holds, for `list`.
    pub(crate) listing: &'a Listing<LockGrant>,
}

impl Locks<'_> {
    /// Tries once to take `request`'s lock: an `add` of the lock key with
    /// the counter's increment on each server that holds the name, then,
    /// in quorum mode, the counters raised to the largest token. A partial
    /// grant is rolled back.
    pub(crate) async fn try_acquire(&self, request: &AcquireRequest) -> Result<Attempt> {
        let ttl = lease_ttl(request.lease)?;
        let (targets, need) = self.store.quorum.targets(&request.name);
        let (lock_key, token_key) = self.store.keys.both_keys(&request.name);
        // The grant's state, made before the add so that the value stored
        // lives in it: a grant costs this one allocation and no other.
        let lock_grant = Arc::new(LockGrant::new(
            request.name.clone(),
            lock_key,
            request.holder.clone(),
            request.lease,
            request.lease_id,
            lock_value_inline(
                request.lease_id,
                &request.name,
                &request.holder,
                Passing::Never,
            ),
        ));
        let lock_key = &lock_grant.key;
        let seed = token_seed(SystemTime::now());
        let deadline = Deadline::for_call(self.store.timeout, request.operation_timeout);
        let started = Instant::now();
        let outcomes = self
            .store
            .quorum
            .each(&targets, |_, server| {
                add_on(
                    server,
                    lock_key,
                    &token_key,
                    &lock_grant.value,
                    ttl,
                    seed,
                    deadline,
                )
            })
            .await;
        let elapsed = started.elapsed();

        let mut granted: SmallVec<[ServerGrant; 1]> = SmallVec::new();
        let mut in_doubt = Vec::new();
        let mut held_on = Vec::new();
        let mut errors = Vec::new();
        for (&server, outcome) in targets.iter().zip(outcomes) {
            match outcome {
                Ok(Added::Granted {
                    token,
                    token_cas,
                    cas,
                }) => granted.push(ServerGrant {
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
        let in_time = within_lease(elapsed, request.lease);

        if granted.len() >= need && in_time {
            let fencing_token = granted
                .iter()
                .map(|grant| grant.token)
                .max()
                .expect("at least one grant");
            if targets.len() > 1 {
                // Later majorities meet this one in at least one server;
                // its counter must not be behind this token.
                let behind: Vec<&ServerGrant> = granted
                    .iter()
                    .filter(|grant| grant.token < fencing_token)
                    .collect();
                let indexes: Vec<usize> = behind.iter().map(|grant| grant.server).collect();
                let raised = self
                    .store
                    .quorum
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
                let still_in_time = within_lease(started.elapsed(), request.lease);
                if agreed < need || !still_in_time {
                    self.store
                        .quorum
                        .roll_back(&granted, &in_doubt, lock_key, request.lease_id)
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
            lock_grant.begin(FirstGrant {
                id: request.lease_id,
                fencing_token,
                confirmed_at: started,
                cas: granted
                    .iter()
                    .filter_map(|grant| Some((grant.server, grant.cas?)))
                    .collect(),
                spare: None,
            });
            self.listing.insert(&lock_grant);
            return Ok(Attempt::Acquired {
                fencing_token,
                state: GrantState::from_arc(lock_grant),
            });
        }

        self.store
            .quorum
            .roll_back(&granted, &in_doubt, lock_key, request.lease_id)
            .await;
        fell_short(
            errors,
            targets.len(),
            need,
            granted.len(),
            ("grant", "acquiring"),
            request,
            elapsed,
        )?;
        let holding = self
            .store
            .quorum
            .occupant(&held_on, lock_key, deadline)
            .await;
        if let Some(limit) = holding.semaphore {
            return Err(request
                .claim
                .conflict(&request.name, Claim::Permit { limit }));
        }
        Ok(Attempt::Held {
            retry_after: holding.left,
        })
    }

    /// Extends lock `lease` if it is still ours on enough servers, and
    /// adds it again on servers that lost it.
    pub(crate) async fn extend(&self, lease: &Lease) -> Result<bool> {
        let ttl = lease_ttl(lease.lease)?;
        let (targets, need) = self.store.quorum.targets(&lease.name);
        let deadline = Deadline::for_call(self.store.timeout, lease.operation_timeout);
        let lock_grant = LockGrant::of(lease);
        // A grant whose hold ended (or that came without state) is
        // extended by its identity, as it was granted.
        let (lock_grant, cas) =
            match lock_grant.map(|lock_grant| (lock_grant, lock_grant.standing(lease.id))) {
                Some((lock_grant, Standing::Current(cas))) => (Some(lock_grant), cas),
                Some((_, Standing::HandedOn)) => return Ok(false),
                Some((_, Standing::Ended)) | None => (None, SmallVec::new()),
            };
        let (key, owner) = self.key_and_owner(lock_grant, lease);
        let key = &*key;
        let started = Instant::now();
        let outcomes = self
            .store
            .quorum
            .each(&targets, |index, server| {
                let remembered = lock_grant
                    .and_then(|lock_grant| Some((&lock_grant.value[..], cas_on(&cas, index)?)));
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
                Ok(LockExtended::Done { read: value, cas }) => {
                    done += 1;
                    read = read.or(value);
                    learned.push((index, cas));
                }
                Ok(LockExtended::NotOurs) => {
                    gone += 1;
                    learned.push((index, None));
                }
                Ok(LockExtended::Missing) => {
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
            let value = lock_grant
                .map(|lock_grant| &lock_grant.value[..])
                .or(read.as_deref());
            if let (Some(value), false) = (value, missing.is_empty()) {
                learned.extend(
                    self.store
                        .quorum
                        .restore(&missing, key, value, ttl, deadline)
                        .await,
                );
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
            if let Some(lock_grant) = lock_grant {
                lock_grant.confirm(lease.id, started, &learned);
            }
            return Ok(true);
        }
        if targets.len() - gone < need {
            if let Some(lock_grant) = lock_grant {
                lock_grant.end(lease.id);
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

    /// Releases lock `lease` if it is still ours, by compare-and-swap.
    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        let lock_grant = LockGrant::of(lease);
        let (lock_grant, cas) =
            match lock_grant.map(|lock_grant| (lock_grant, lock_grant.standing(lease.id))) {
                Some((lock_grant, Standing::Current(cas))) => {
                    lock_grant.end(lease.id);
                    (Some(lock_grant), cas)
                }
                Some((_, Standing::HandedOn)) => return Ok(false),
                // Released or lost already, or a grant whose answer was lost
                // (core releases it by its identity, with no state).
                Some((_, Standing::Ended)) | None => (None, SmallVec::new()),
            };
        let (key, owner) = self.key_and_owner(lock_grant, lease);
        let key = &*key;
        let (targets, need) = self.store.quorum.targets(&lease.name);
        let deadline = Deadline::for_call(self.store.timeout, lease.operation_timeout);
        let outcomes = self
            .store
            .quorum
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
        if lock_grant.is_none() {
            // A grant this backend never saw confirmed (its answer was lost,
            // and the core releases it by identity) may still be queued on
            // another connection and land after this look: look once more
            // when it must have.
            let servers = self.store.quorum.servers_at(&targets);
            let (key, id, patience) = (key.clone(), lease.id, self.store.timeout);
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

    /// Takes up lock `lease` for `request` (see
    /// [`Resumes`](distlock_core::backend::Resumes)): on each server that
    /// holds the name, the copy of grant `lease.id` becomes `request`'s by
    /// compare-and-swap ([`swap_on`]), with the lease's expiry from now.
    /// The resume holds once a majority (in sharded mode, the one server)
    /// swapped within the lease, as an acquire holds once a majority
    /// added. A missing copy never counts, and is not re-created here: it
    /// may have run out, and only copies that still exist show by the
    /// servers' own clocks that the grant has not. A resume that falls
    /// short puts the old grant back where it took it up
    /// ([`Quorum::put_back`](crate::quorum::Quorum::put_back)).
    pub(crate) async fn resume(
        &self,
        lease: &Lease,
        request: &AcquireRequest,
    ) -> Result<Option<GrantState>> {
        let ttl = lease_ttl(request.lease)?;
        let (targets, need) = self.store.quorum.targets(&request.name);
        let lock_grant = Arc::new(LockGrant::new(
            request.name.clone(),
            self.store.keys.lock_key(&request.name),
            request.holder.clone(),
            request.lease,
            request.lease_id,
            lock_value_inline(
                request.lease_id,
                &request.name,
                &request.holder,
                Passing::Never,
            ),
        ));
        let key = &lock_grant.key;
        let deadline = Deadline::for_call(self.store.timeout, request.operation_timeout);
        let started = Instant::now();
        let outcomes = self
            .store
            .quorum
            .each(&targets, |_, server| {
                swap_on(server, key, lease.id, (&lock_grant.value, 0), ttl, deadline)
            })
            .await;
        let elapsed = started.elapsed();
        let mut swapped: SmallVec<[ServerSwap; 1]> = SmallVec::new();
        let mut in_doubt = Vec::new();
        let mut errors = Vec::new();
        for (&server, outcome) in targets.iter().zip(outcomes) {
            match outcome {
                Ok(Swapped::Done { cas, was, left }) => swapped.push(ServerSwap {
                    server,
                    cas,
                    was,
                    left,
                }),
                Ok(Swapped::NotOurs | Swapped::Missing) => {}
                Err(error) => {
                    in_doubt.push(server);
                    errors.push(error);
                }
            }
        }
        if swapped.len() >= need && within_lease(elapsed, request.lease) {
            if !errors.is_empty() {
                tracing::warn!(
                    name = %request.name,
                    resumed = swapped.len(),
                    servers = targets.len(),
                    error = %combined("unanswered", errors),
                    "resumed on a majority; some servers did not answer"
                );
            }
            lock_grant.begin(FirstGrant {
                id: request.lease_id,
                fencing_token: lease.fencing_token,
                confirmed_at: started,
                cas: swapped
                    .iter()
                    .filter_map(|swap| Some((swap.server, swap.cas?)))
                    .collect(),
                spare: None,
            });
            self.listing.insert(&lock_grant);
            return Ok(Some(GrantState::from_arc(lock_grant)));
        }
        self.store
            .quorum
            .put_back(&swapped, &in_doubt, key, request.lease_id, 0)
            .await;
        fell_short(
            errors,
            targets.len(),
            need,
            swapped.len(),
            ("resume", "resuming"),
            request,
            elapsed,
        )?;
        Ok(None)
    }

    /// The locks this instance holds, each checked against its servers
    /// within the configured timeout or `limit`, the shorter.
    pub(crate) async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        let mine = self.listing.live();
        let mut locks = Vec::with_capacity(mine.len());
        for chunk in mine.chunks(LIST_CONCURRENCY) {
            let checks = chunk.iter().map(|lock_grant| async move {
                // A hold that ended is not listed, though a grant's state
                // may keep it alive.
                let Some(listed) = lock_grant.listed() else {
                    return Ok(None);
                };
                let (targets, need) = self.store.quorum.targets(&lock_grant.name);
                let deadline = Deadline::for_call(self.store.timeout, limit);
                let outcomes = self
                    .store
                    .quorum
                    .each(&targets, |_, server| {
                        read_on(server, &lock_grant.key, lock_grant.owner, deadline)
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
            for (lock_grant, verdict) in chunk.iter().zip(verdicts) {
                match verdict? {
                    Some((listed, true)) => locks.push(LockInfo {
                        name: lock_grant.name.clone(),
                        kind: LockKind::Exclusive,
                        permits: None,
                        holder: Some(Holder::clone(&lock_grant.holder)),
                        fencing_token: Some(listed.fencing_token),
                        expires_in: Some(
                            (listed.confirmed_at + lock_grant.lease)
                                .saturating_duration_since(Instant::now()),
                        ),
                        waiters: Waiters::Unknown,
                    }),
                    Some((_, false)) => lock_grant.forget(),
                    None => {}
                }
            }
        }
        Ok(locks)
    }

    /// Deletes `name`'s lock key on every server that holds it, whoever
    /// holds it, each within the configured timeout or `limit`, the
    /// shorter. Returns whether enough of them had it.
    pub(crate) async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool> {
        let (targets, need) = self.store.quorum.targets(name);
        let key = self.store.keys.lock_key(name);
        let deadline = Deadline::for_call(self.store.timeout, limit);
        let outcomes = self
            .store
            .quorum
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

    /// The key `lease`'s lock lives under and the identity its stored value
    /// carries: its hold's, or, for a lease whose hold is gone (or whose
    /// answer was lost), its own name's key and its own identity.
    pub(crate) fn key_and_owner<'a>(
        &self,
        lock_grant: Option<&'a LockGrant>,
        lease: &Lease,
    ) -> (Cow<'a, Key>, LeaseId) {
        match lock_grant {
            Some(lock_grant) => (Cow::Borrowed(&lock_grant.key), lock_grant.owner),
            None => (Cow::Owned(self.store.keys.lock_key(&lease.name)), lease.id),
        }
    }
}

/// Whether a majority made `elapsed` after it was asked still holds a
/// lease of `lease`, with a margin for the servers' clocks running fast:
/// each copy lives at least the lease from when it was stored, which was
/// after the asking, and a majority is only a majority while all of its
/// copies live.
fn within_lease(elapsed: Duration, lease: Duration) -> bool {
    let drift = lease / 100 + Duration::from_millis(2);
    elapsed + drift < lease
}
/// Whether a quorum call that did not hold failed, and why: more of the
/// `servers` than a majority (`need`) allows did not answer, so the
/// outcome is unknown (`errors`); or `reached` a majority, but too late to
/// count, `elapsed` after it began. `Ok` when a majority refused. `verbs`
/// name the call in its two forms (`grant`, `acquiring`).
fn fell_short(
    errors: Vec<Error>,
    servers: usize,
    need: usize,
    reached: usize,
    (verb, doing): (&str, &str),
    request: &AcquireRequest,
    elapsed: Duration,
) -> Result<()> {
    if errors.len() > servers - need {
        let unanswered = errors.len();
        return Err(combined(
            &format!("{unanswered} of {servers} servers did not answer and {need} must {verb}"),
            errors,
        ));
    }
    if reached >= need {
        return Err(Error::Backend {
            backend: BACKEND,
            message: format!(
                "{doing} {} took {elapsed:?}, too long for a lease of {:?}",
                request.name, request.lease
            ),
            source: None,
        });
    }
    Ok(())
}

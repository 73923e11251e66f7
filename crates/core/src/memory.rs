//! An in-memory backend, for unit tests and documentation.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::BackendExt;
use crate::backend::state::{GrantState, WaitState};
use crate::backend::terms::{TERMS_KEPT, Term, TermLog, withdraw_term};
use crate::backend::wake::{ReleaseHub, ReleaseWatch};
use crate::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, DelayedRelease, Extended, HandOver,
    HandOvers, Holder, Lease, LeaseId, LockInfo, Wakeups,
};
use crate::backend::{Resumes, WaiterList};
use crate::claim::{Claim, Permits};
use crate::error::Result;
use crate::info::{Waiter, Waiters};
use crate::name::LockName;
use crate::options::LockOptions;
use crate::sync::{Mutex, MutexGuard};

/// Locks that live in this process's memory, with real leases that expire
/// by Tokio's clock, fencing tokens and release wake-ups. It grants every
/// [`Claim`]: exclusive and shared locks, and semaphores.
///
/// It is shared by the clients of one process that hold the same
/// `Arc<MemoryBackend>`, and by nobody else: use it to test code that takes
/// locks, and in examples.
///
/// Its clock is Tokio's, plus however far it was stepped forward with
/// [`step_clock`](Self::step_clock), and its extensions report it as a
/// server's would: tests can see what holders do when the clock a server
/// judges leases by steps.
#[derive(Debug)]
pub struct MemoryBackend {
    locks: Mutex<HashMap<LockName, Slot>>,
    releases: ReleaseHub,
    /// How far the backend's clock was stepped ahead of Tokio's.
    ahead: Mutex<Duration>,
    /// Where the backend's wall clock starts, on Tokio's clock.
    origin: Instant,
    /// Whether whole locks go to waiters in the order they asked.
    fair: bool,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self {
            locks: Mutex::default(),
            releases: ReleaseHub::default(),
            ahead: Mutex::default(),
            origin: Instant::now(),
            fair: false,
        }
    }
}

/// One name: its holders, the writers waiting for it, its last token, and
/// its election's last terms.
#[derive(Debug, Default)]
struct Slot {
    holders: Vec<Grant>,
    /// Writers waiting, each until its mark expires: while one waits, new
    /// readers wait behind it.
    waiting_writers: Vec<WriterMark>,
    last_token: u64,
    /// The last [`TERMS_KEPT`] terms, oldest first.
    terms: Vec<Term>,
    /// In fair mode, the places of the writers waiting, first come first.
    queue: VecDeque<Place>,
}

/// A waiting writer's place in a fair queue, with what its grant will be:
/// its request, under the place's own identity, since each attempt of a
/// wait asks under a new one.
#[derive(Debug)]
struct Place {
    id: LeaseId,
    request: AcquireRequest,
    expires_at: Instant,
    /// When the wait took its place.
    since: Instant,
}

/// The identity of a waiting writer's place, kept in its wait's state.
#[derive(Debug, Clone, Copy)]
struct PlaceId(LeaseId);

#[derive(Debug)]
struct Grant {
    id: LeaseId,
    claim: Claim,
    token: u64,
    expires_at: Instant,
    holder: Arc<Holder>,
}

#[derive(Debug)]
struct WriterMark {
    wait: LeaseId,
    expires_at: Instant,
}

/// The identity of a waiting writer's mark, kept in its wait's state.
#[derive(Debug, Clone, Copy)]
struct MarkId(LeaseId);

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty backend in fair mode (see
    /// [`Capabilities::fair`]): whole locks go to waiters in the order
    /// they asked, each release granting the first waiter still there.
    pub fn fair() -> Self {
        Self {
            fair: true,
            ..Self::default()
        }
    }

    /// How many waiters have a place in `name`'s fair queue.
    pub fn queued(&self, name: &LockName) -> usize {
        let now = self.now();
        self.lock().get_mut(name).map_or(0, |slot| {
            slot.prune(now);
            slot.queue.len()
        })
    }

    /// Steps the backend's clock forward by `by`, as a server's clock
    /// steps: every lease ends `by` sooner than its holder was told, and
    /// the next extensions report the clock as it now reads.
    pub fn step_clock(&self, by: Duration) {
        let mut ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        *ahead += by;
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<LockName, Slot>> {
        self.locks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The backend's clock, by which leases end.
    fn now(&self) -> Instant {
        Instant::now() + *self.ahead.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The backend's clock as a wall clock, as a server reports it.
    fn wall_clock(&self) -> SystemTime {
        // A fixed start keeps readings far from the epoch, as real ones are.
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(1_700_000_000)
            + self.now().saturating_duration_since(self.origin)
    }
}

fn expiry(now: Instant, lease: Duration) -> Instant {
    now.checked_add(lease)
        .unwrap_or(now + LockOptions::MAX_LEASE)
}

impl Slot {
    /// Forgets holders, marks and places that ran out, and in fair mode
    /// grants a lock that is free to the first place.
    fn prune(&mut self, now: Instant) {
        self.holders.retain(|grant| grant.expires_at > now);
        self.waiting_writers.retain(|mark| mark.expires_at > now);
        self.queue.retain(|place| place.expires_at > now);
        self.pass_on(now);
    }

    /// Grants the lock, if nobody holds it, to the first place in the
    /// queue, under its request.
    fn pass_on(&mut self, now: Instant) {
        if self.holders.is_empty()
            && let Some(place) = self.queue.pop_front()
        {
            self.grant_to(&place.request, now);
        }
    }

    /// Takes a place for `wait`'s writer, or renews it, for a lease from
    /// now.
    fn take_place(&mut self, wait: &mut WaitState, request: &AcquireRequest, now: Instant) {
        let expires_at = expiry(now, request.lease);
        if let Some(&PlaceId(id)) = wait.get::<PlaceId>()
            && let Some(place) = self.queue.iter_mut().find(|place| place.id == id)
        {
            place.expires_at = expires_at;
            return;
        }
        let id = LeaseId::random();
        wait.set(PlaceId(id));
        self.queue.push_back(Place {
            id,
            request: AcquireRequest {
                lease_id: id,
                ..request.clone()
            },
            expires_at,
            since: now,
        });
    }

    /// Gives up `wait`'s place, and a grant made to it meanwhile, with
    /// its term: its holder never received it.
    fn leave_queue(&mut self, wait: &mut WaitState, now: Instant) {
        if let Some(PlaceId(id)) = wait.take::<PlaceId>() {
            self.queue.retain(|place| place.id != id);
            if let Some(at) = self.holders.iter().position(|grant| grant.id == id) {
                let grant = self.holders.swap_remove(at);
                withdraw_term(&mut self.terms, grant.token, &grant.holder);
            }
            self.prune(now);
        }
    }

    /// What the holders hold, when it rules `claim` out as another kind.
    fn conflict(&self, claim: Claim) -> Option<Claim> {
        self.holders
            .iter()
            .map(|grant| grant.claim)
            .find(|&held| !held.same_family(claim))
    }

    /// Whether `claim` can be granted now, next to the live holders; a
    /// reader also waits while any writer waits.
    fn admits(&self, claim: Claim) -> bool {
        match claim {
            Claim::Exclusive => self.holders.is_empty(),
            Claim::Shared => {
                self.waiting_writers.is_empty()
                    && self.queue.is_empty()
                    && self
                        .holders
                        .iter()
                        .all(|grant| grant.claim == Claim::Shared)
            }
            Claim::Permit { limit } => self.holders.len() < limit as usize,
        }
    }

    /// Grants `request`, recording its term if it asks; returns the token.
    fn grant_to(&mut self, request: &AcquireRequest, now: Instant) -> u64 {
        self.last_token += 1;
        if request.records_term {
            if self.terms.len() == TERMS_KEPT {
                self.terms.remove(0);
            }
            let previous = self.terms.last().map(|term| term.term);
            self.terms.push(Term::new(
                self.last_token,
                previous,
                Holder::clone(&request.holder),
            ));
        }
        self.holders.push(Grant {
            id: request.lease_id,
            claim: request.claim,
            token: self.last_token,
            expires_at: expiry(now, request.lease),
            holder: request.holder.clone(),
        });
        self.last_token
    }

    /// One fair attempt at the whole lock: the grant a release made to
    /// this wait's place, taken over under this attempt's identity and
    /// extended from now; or the lock, free with nobody in line; or a place
    /// in line, taken or renewed.
    fn wait_in_line(
        &mut self,
        request: &AcquireRequest,
        wait: &mut WaitState,
        now: Instant,
    ) -> Attempt {
        let place = wait.get::<PlaceId>().map(|&PlaceId(id)| id);
        if let Some(id) = place
            && let Some(grant) = self.holders.iter_mut().find(|grant| grant.id == id)
        {
            grant.id = request.lease_id;
            grant.expires_at = expiry(now, request.lease);
            wait.take::<PlaceId>();
            return Attempt::Acquired {
                fencing_token: grant.token,
                state: GrantState::none(),
            };
        }
        let in_line = place.is_some_and(|id| self.queue.iter().any(|place| place.id == id));
        if self.holders.is_empty() && self.queue.is_empty() && !in_line {
            return Attempt::Acquired {
                fencing_token: self.grant_to(request, now),
                state: GrantState::none(),
            };
        }
        if request.retries {
            self.take_place(wait, request, now);
        }
        // The place lasts a lease from this attempt: renew it well within.
        let renew = request.lease / 2;
        Attempt::Held {
            retry_after: Some(self.first_expiry(now).map_or(renew, |left| left.min(renew))),
        }
    }

    /// Marks `wait`'s writer as waiting for a lease from now.
    fn mark_writer(&mut self, wait: &mut WaitState, lease: Duration, now: Instant) {
        let id = match wait.get::<MarkId>() {
            Some(&MarkId(id)) => id,
            None => {
                let id = LeaseId::random();
                wait.set(MarkId(id));
                id
            }
        };
        let expires_at = expiry(now, lease);
        match self.waiting_writers.iter_mut().find(|mark| mark.wait == id) {
            Some(mark) => mark.expires_at = expires_at,
            None => self.waiting_writers.push(WriterMark {
                wait: id,
                expires_at,
            }),
        }
    }

    fn unmark_writer(&mut self, wait: &mut WaitState) {
        if let Some(MarkId(id)) = wait.take::<MarkId>() {
            self.waiting_writers.retain(|mark| mark.wait != id);
        }
    }

    /// How long until the first holder's lease ends.
    fn first_expiry(&self, now: Instant) -> Option<Duration> {
        self.holders
            .iter()
            .map(|grant| grant.expires_at - now)
            .min()
    }

    fn position(&self, lease: &Lease, now: Instant) -> Option<usize> {
        self.holders
            .iter()
            .position(|grant| grant.id == lease.id && grant.expires_at > now)
    }

    fn permits(&self, claim: Claim) -> Option<Permits> {
        let limit = claim.limit()?;
        Some(Permits {
            in_use: self.holders.len() as u32,
            limit,
        })
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn store_name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
            .with_cross_process(false)
            .with_shared(true)
            .with_semaphores(true)
            .with_fair(self.fair)
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        let now = self.now();
        let mut locks = self.lock();
        let slot = locks.entry(request.name.clone()).or_default();
        slot.prune(now);
        if let Some(held) = slot.conflict(request.claim) {
            return Err(request.claim.conflict(&request.name, held));
        }
        if self.fair && request.claim == Claim::Exclusive {
            return Ok(slot.wait_in_line(request, wait, now));
        }
        // Marks keep only readers out: writers take turns by who gets
        // there first, and a granted writer's own mark goes with its grant.
        if slot.admits(request.claim) {
            slot.unmark_writer(wait);
            return Ok(Attempt::Acquired {
                fencing_token: slot.grant_to(request, now),
                state: GrantState::none(),
            });
        }
        if request.claim == Claim::Exclusive && request.retries {
            slot.mark_writer(wait, request.lease, now);
        }
        let mut retry_after = slot.first_expiry(now);
        if !wait.is_empty() {
            // The mark lasts a lease from this attempt: try again well
            // within it, so that it does not lapse while we wait.
            retry_after =
                Some(retry_after.map_or(request.lease / 2, |after| after.min(request.lease / 2)));
        }
        Ok(Attempt::Held { retry_after })
    }

    async fn end_wait(&self, request: &AcquireRequest, mut wait: WaitState) -> Result<()> {
        let now = self.now();
        let mut locks = self.lock();
        if let Some(slot) = locks.get_mut(&request.name) {
            slot.unmark_writer(&mut wait);
            slot.leave_queue(&mut wait, now);
        }
        drop(locks);
        // Readers held back by the mark may go now.
        self.releases.notify(&request.name);
        Ok(())
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        let now = self.now();
        let mut locks = self.lock();
        let outcomes = leases
            .iter()
            .map(|lease| {
                let Some(slot) = locks.get_mut(&lease.name) else {
                    return Ok(false);
                };
                let Some(at) = slot.position(lease, now) else {
                    return Ok(false);
                };
                slot.holders[at].expires_at = expiry(now, lease.lease);
                Ok(true)
            })
            .collect();
        drop(locks);
        Extended::new(outcomes, Some(self.wall_clock()))
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let now = self.now();
        let mut locks = self.lock();
        let Some(slot) = locks.get_mut(&lease.name) else {
            return Ok(false);
        };
        let Some(at) = slot.holders.iter().position(|grant| grant.id == lease.id) else {
            return Ok(false);
        };
        let was_live = slot.holders.swap_remove(at).expires_at > now;
        slot.prune(now);
        drop(locks);
        self.releases.notify(&lease.name);
        Ok(was_live)
    }

    async fn list(&self, _: Duration) -> Result<Vec<LockInfo>> {
        let now = self.now();
        let mut held: Vec<LockInfo> = Vec::new();
        for (name, slot) in self.lock().iter_mut() {
            slot.prune(now);
            for grant in &slot.holders {
                held.push(LockInfo {
                    name: name.clone(),
                    kind: grant.claim.kind(),
                    permits: slot.permits(grant.claim),
                    holder: Some(Holder::clone(&grant.holder)),
                    fencing_token: Some(grant.token),
                    expires_in: Some(grant.expires_at - now),
                    waiters: Waiters::Unknown,
                });
            }
        }
        held.sort_by(|a, b| (&a.name, a.fencing_token).cmp(&(&b.name, b.fencing_token)));
        Ok(held)
    }

    async fn force_release(&self, name: &LockName, _: Duration) -> Result<bool> {
        let now = self.now();
        let mut locks = self.lock();
        let Some(slot) = locks.get_mut(name) else {
            return Ok(false);
        };
        slot.prune(now);
        let was_held = !slot.holders.is_empty();
        slot.holders.clear();
        slot.pass_on(now);
        drop(locks);
        self.releases.notify(name);
        Ok(was_held)
    }

    fn abilities(&self) -> Abilities<'_> {
        let abilities = Abilities::none()
            .with_hand_overs(self)
            .with_wakeups(self)
            .with_term_log(self)
            .with_delayed_release(self)
            .with_resumes(self);
        // Only the fair queue keeps who waits; other waits poll.
        if self.fair {
            abilities.with_waiters(self)
        } else {
            abilities
        }
    }
}

#[async_trait]
impl WaiterList for MemoryBackend {
    /// Only waits for the whole lock keep a place in line.
    fn sees_every_wait(&self) -> bool {
        false
    }

    async fn waiters(&self, _: Duration) -> Result<Vec<(LockName, Waiter)>> {
        let now = self.now();
        let mut waiting = Vec::new();
        for (name, slot) in self.lock().iter_mut() {
            slot.prune(now);
            waiting.extend(slot.queue.iter().map(|place| {
                let waiter = Waiter {
                    kind: place.request.claim.kind(),
                    holder: Some(Holder::clone(&place.request.holder)),
                    waiting_for: Some(now - place.since),
                };
                (name.clone(), waiter)
            }));
        }
        Ok(waiting)
    }
}

#[async_trait]
impl DelayedRelease for MemoryBackend {
    async fn release_after(&self, lease: &Lease, remaining: Duration) -> Result<bool> {
        // An extension sets the end from now, to any lease, shorter too.
        let shortened = Lease {
            lease: remaining,
            ..lease.clone()
        };
        let ours = self.extend(&shortened).await?;
        // Waiters that were told the old end ask again, to hear the new one.
        self.releases.notify(&lease.name);
        Ok(ours)
    }
}

#[async_trait]
impl Resumes for MemoryBackend {
    async fn resume(&self, lease: &Lease, request: &AcquireRequest) -> Result<Option<GrantState>> {
        let now = self.now();
        let mut locks = self.lock();
        let Some(slot) = locks.get_mut(&lease.name) else {
            return Ok(None);
        };
        let Some(at) = slot.position(lease, now) else {
            return Ok(None);
        };
        let grant = &mut slot.holders[at];
        if grant.token != lease.fencing_token || grant.claim != lease.claim {
            return Ok(None);
        }
        grant.id = request.lease_id;
        grant.expires_at = expiry(now, request.lease);
        grant.holder = request.holder.clone();
        Ok(Some(GrantState::none()))
    }
}

#[async_trait]
impl HandOvers for MemoryBackend {
    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        let now = self.now();
        let mut locks = self.lock();
        let Some(slot) = locks.get_mut(&lease.name) else {
            return Ok(HandOver::NotOurs);
        };
        let Some(at) = slot.position(lease, now) else {
            return Ok(HandOver::NotOurs);
        };
        slot.holders.swap_remove(at);
        Ok(HandOver::Granted {
            fencing_token: slot.grant_to(next, now),
            confirmed_at: None,
            state: GrantState::none(),
        })
    }
}

#[async_trait]
impl TermLog for MemoryBackend {
    async fn terms_after(&self, name: &LockName, after: u64, _: Duration) -> Result<Vec<Term>> {
        Ok(self.lock().get(name).map_or_else(Vec::new, |slot| {
            slot.terms
                .iter()
                .filter(|term| term.term > after)
                .cloned()
                .collect()
        }))
    }

    async fn withdraw(&self, lease: &Lease, holder: &Holder) -> Result<()> {
        let mut locks = self.lock();
        let Some(slot) = locks.get_mut(&lease.name) else {
            return Ok(());
        };
        // A grant whose answer never came is found by its identity.
        let term = match lease.fencing_token {
            0 => slot
                .holders
                .iter()
                .find(|grant| grant.id == lease.id)
                .map(|grant| grant.token),
            token => Some(token),
        };
        if let Some(term) = term {
            withdraw_term(&mut slot.terms, term, holder);
        }
        Ok(())
    }
}

impl Wakeups for MemoryBackend {
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        Some(self.releases.watch(name))
    }
}

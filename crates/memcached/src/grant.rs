//! What the backend keeps for a lock or a permit it holds, in the grants'
//! own [`GrantState`](distlock_core::backend::GrantState), and the index that only
//! [`Backend::list`](distlock_core::backend::Backend::list) reads.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use distlock_core::backend::{Lease, LeaseId};
use distlock_core::{Holder, LockName};
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::instance::KnownCas;
use crate::lease::LockValue;
use crate::proto::Key;

/// This process's hold of one lock key: the value it stored there, and
/// the grant of this process that holds the lock now. It lives in one
/// allocation, shared by the [`GrantState`](distlock_core::backend::GrantState) of
/// every grant it has served: a hand-over without a server command keeps
/// the key as it is, so the next grant shares it and becomes its current
/// grant, and the earlier one, no longer current, is handed on.
#[derive(Debug)]
pub(crate) struct LockGrant {
    pub(crate) name: LockName,
    /// The lock's key, so that a release need not encode the name again.
    pub(crate) key: Key,
    pub(crate) holder: Arc<Holder>,
    pub(crate) lease: Duration,
    /// The grant whose identity the stored value carries: the first grant
    /// of this hold.
    pub(crate) owner: LeaseId,
    /// The value stored, inline.
    pub(crate) value: LockValue,
    live: Mutex<Live>,
}

/// What changes while a [`LockGrant`] lives.
#[derive(Debug)]
struct Live {
    /// The grant that holds the lock now.
    current: LeaseId,
    fencing_token: u64,
    confirmed_at: Instant,
    /// Per server, the CAS that our copy got when we last stored it, where
    /// known. Inline for sharded mode's one server.
    cas: SmallVec<[(usize, KnownCas); 1]>,
    /// Tokens reserved by the hand-over through the server that made this
    /// hold and not yet used, for hand-overs without a server command.
    spare: Option<Spare>,
    /// Released, refused, or found gone: no grant holds the lock through
    /// this hold any more.
    ended: bool,
}

/// How one grant stands with its [`LockGrant`].
pub(crate) enum Standing {
    /// The grant holds the lock, with these CAS values of our copies.
    Current(SmallVec<[(usize, KnownCas); 1]>),
    /// A later grant of this process took the lock over without a server
    /// command: the key still carries an identity of this hold, but it is
    /// the later grant's now, so nothing may be done with it for this one.
    HandedOn,
    /// The hold ended: the grant is known by its identity only.
    Ended,
}

/// Fencing tokens `next..=last`, reserved on the counter and unused.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spare {
    next: u64,
    last: u64,
}

impl Spare {
    /// The tokens after `first` up to `last`, if there are any.
    pub(crate) fn after(first: u64, last: u64) -> Option<Self> {
        (first < last).then(|| Self {
            next: first + 1,
            last,
        })
    }

    /// The next token, and what is left after it.
    fn take(self) -> (u64, Option<Self>) {
        (self.next, Self::after(self.next, self.last))
    }
}

/// The CAS of our copy on `server`, among `cas`, where known.
pub(crate) fn cas_on(cas: &[(usize, KnownCas)], server: usize) -> Option<KnownCas> {
    cas.iter()
        .find(|&&(on, _)| on == server)
        .map(|&(_, known)| known)
}

/// What [`Backend::list`](distlock_core::backend::Backend::list) shows of a hold.
pub(crate) struct Listed {
    pub(crate) fencing_token: u64,
    pub(crate) confirmed_at: Instant,
}

/// The grant that [`LockGrant::new`] is made for.
pub(crate) struct FirstGrant {
    pub(crate) id: LeaseId,
    pub(crate) fencing_token: u64,
    pub(crate) confirmed_at: Instant,
    pub(crate) cas: SmallVec<[(usize, KnownCas); 1]>,
    pub(crate) spare: Option<Spare>,
}

impl LockGrant {
    /// A hold of `key`, which stores `value`, the value of grant `owner`.
    /// It has no current grant until [`begin`](Self::begin).
    pub(crate) fn new(
        name: LockName,
        key: Key,
        holder: Arc<Holder>,
        lease: Duration,
        owner: LeaseId,
        value: LockValue,
    ) -> Self {
        Self {
            name,
            key,
            holder,
            lease,
            owner,
            value,
            live: Mutex::new(Live {
                current: owner,
                fencing_token: 0,
                confirmed_at: Instant::now(),
                cas: SmallVec::new(),
                spare: None,
                ended: true,
            }),
        }
    }

    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `first` the hold's current grant, as the server confirmed it.
    pub(crate) fn begin(&self, first: FirstGrant) {
        let mut live = self.live();
        *live = Live {
            current: first.id,
            fencing_token: first.fencing_token,
            confirmed_at: first.confirmed_at,
            cas: first.cas,
            spare: first.spare,
            ended: false,
        };
    }

    /// The hold `lease` carries in its state, if any.
    pub(crate) fn of(lease: &Lease) -> Option<&Self> {
        lease.state.get::<Self>()
    }

    /// How grant `id` stands with this hold.
    pub(crate) fn standing(&self, id: LeaseId) -> Standing {
        let live = self.live();
        match (live.ended, live.current == id) {
            (true, _) => Standing::Ended,
            (false, true) => Standing::Current(live.cas.clone()),
            (false, false) => Standing::HandedOn,
        }
    }

    /// Ends the hold, if grant `id` is its current grant: `id` was
    /// released, refused, or found gone.
    pub(crate) fn end(&self, id: LeaseId) {
        let mut live = self.live();
        if live.current == id {
            live.ended = true;
        }
    }

    /// Records a successful extension of grant `id`, sent at `sent`, and
    /// what each server answered about our copy's CAS, if `id` is still
    /// the current grant.
    pub(crate) fn confirm(
        &self,
        id: LeaseId,
        sent: Instant,
        learned: &[(usize, Option<KnownCas>)],
    ) {
        let mut live = self.live();
        if live.ended || live.current != id {
            return;
        }
        live.confirmed_at = sent;
        for &(server, known) in learned {
            live.cas.retain(|&mut (on, _)| on != server);
            if let Some(known) = known {
                live.cas.push((server, known));
            }
        }
    }

    /// Makes grant `next` the current one in place of `id`, without a
    /// server command, if `id` is current with at least half of the lease
    /// left by its last confirmation and a reserved token is to spare.
    /// Returns `next`'s token and the time the server last confirmed the
    /// lease.
    pub(crate) fn pass_on(&self, id: LeaseId, next: LeaseId) -> Option<(u64, Instant)> {
        let mut live = self.live();
        let fresh = live.confirmed_at + self.lease / 2 > Instant::now();
        if live.ended || live.current != id || !fresh {
            return None;
        }
        let (fencing_token, spare) = live.spare?.take();
        live.current = next;
        live.fencing_token = fencing_token;
        live.spare = spare;
        Some((fencing_token, live.confirmed_at))
    }

    /// What `list` shows, while the hold has not ended.
    pub(crate) fn listed(&self) -> Option<Listed> {
        let live = self.live();
        (!live.ended).then(|| Listed {
            fencing_token: live.fencing_token,
            confirmed_at: live.confirmed_at,
        })
    }

    /// Ends the hold whatever its current grant: `list` found it gone.
    pub(crate) fn forget(&self) {
        self.live().ended = true;
    }
}

/// A permit this backend instance holds: to extend and release it in one
/// command, and for [`Backend::list`](distlock_core::backend::Backend::list)
/// through the backend's [`Listing`].
#[derive(Debug)]
pub(crate) struct PermitGrant {
    /// The grant's identity.
    pub(crate) id: LeaseId,
    pub(crate) name: LockName,
    pub(crate) limit: u32,
    /// The slot's key.
    pub(crate) key: Key,
    /// What the slot holds: the grant's identity and details.
    pub(crate) value: Arc<[u8]>,
    pub(crate) holder: Arc<Holder>,
    pub(crate) fencing_token: u64,
    pub(crate) lease: Duration,
    pub(crate) state: Mutex<PermitLive>,
}

/// What changes while a permit is held.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PermitLive {
    pub(crate) confirmed_at: Instant,
    /// The CAS of our last store of the slot, where known.
    pub(crate) cas: Option<KnownCas>,
    /// Released, refused or found gone.
    pub(crate) ended: bool,
}

impl PermitLive {
    /// A permit's state as its claim left it: stored at `confirmed_at`,
    /// with the CAS `cas` where known.
    pub(crate) fn claimed(confirmed_at: Instant, cas: Option<KnownCas>) -> Mutex<Self> {
        Mutex::new(Self {
            confirmed_at,
            cas,
            ended: false,
        })
    }
}

impl PermitGrant {
    /// The permit `lease` carries in its state, if any.
    pub(crate) fn of(lease: &Lease) -> Option<&Self> {
        lease.state.get::<Self>()
    }

    fn locked(&self) -> MutexGuard<'_, PermitLive> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What changes, as it is now.
    pub(crate) fn live(&self) -> PermitLive {
        *self.locked()
    }

    /// Records an extension, sent at `sent`.
    pub(crate) fn confirm(&self, sent: Instant, cas: Option<KnownCas>) {
        let mut live = self.locked();
        if !live.ended {
            live.confirmed_at = sent;
            live.cas = cas;
        }
    }

    /// Ends the permit; returns whether it was held until now.
    pub(crate) fn end(&self) -> bool {
        !std::mem::replace(&mut self.locked().ended, true)
    }
}

/// How many grants [`Backend::list`](distlock_core::backend::Backend::list)
/// checks at once.
pub(crate) const LIST_CONCURRENCY: usize = 256;

/// The grants this backend instance made and whose state is still alive,
/// as weak references: memcached cannot enumerate its keys, so this is how
/// [`Backend::list`](distlock_core::backend::Backend::list) finds the locks this
/// instance holds, and nothing else reads it. Each operation on a grant
/// reads the grant's own state instead.
///
/// An entry does not keep its grant alive: when the grant's state is
/// dropped (after its release, or at once when its guard is dropped with
/// no runtime left), the entry is dead, and it is pruned before the index
/// would grow, and by every `list`.
#[derive(Debug)]
pub(crate) struct Listing<T>(Mutex<Vec<Weak<T>>>);

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Self(Mutex::new(Vec::new()))
    }
}

impl<T> Listing<T> {
    fn entries(&self) -> MutexGuard<'_, Vec<Weak<T>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `grant`. Dead entries go first when the index is full, so that
    /// it holds about as many entries as there are live grants, and grows
    /// only when they do.
    pub(crate) fn insert(&self, grant: &Arc<T>) {
        let mut entries = self.entries();
        if entries.len() == entries.capacity() {
            entries.retain(|entry| entry.strong_count() > 0);
        }
        entries.push(Arc::downgrade(grant));
    }

    /// Every grant whose state is still alive; prunes the others.
    pub(crate) fn live(&self) -> Vec<Arc<T>> {
        let mut entries = self.entries();
        let mut live = Vec::with_capacity(entries.len());
        entries.retain(|entry| match entry.upgrade() {
            Some(grant) => {
                live.push(grant);
                true
            }
            None => false,
        });
        live
    }

    /// How many entries are kept, dead or alive.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_forgets_grants_whose_state_is_dropped() {
        let listing = Listing::default();
        let kept: Vec<Arc<u32>> = (0..3).map(Arc::new).collect();
        for grant in &kept {
            listing.insert(grant);
        }
        // Grants whose state goes at once, as a guard dropped with no
        // runtime drops it: the index never grows for them.
        for round in 0..1_000u32 {
            let state = distlock_core::backend::GrantState::from_arc(Arc::new(round));
            listing.insert(&state.get_arc::<u32>().unwrap());
            drop(state);
            assert!(listing.len() <= 8, "{} entries", listing.len());
        }
        let live = listing.live();
        assert_eq!(live.len(), 3);
        assert_eq!(listing.len(), 3, "list prunes the dead");
        drop((live, kept));
        assert!(listing.live().is_empty());
        assert_eq!(listing.len(), 0);
    }
}

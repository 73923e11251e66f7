//! What this process keeps for an exclusive lock it took over through the
//! hand-over script: the identity stored on the server, and the fencing
//! tokens that script reserved, so that the next hand-overs of the same
//! lock in this process need no server command.
//!
//! A [`HandedOverLock`] lives in one allocation, shared by the
//! [`GrantState`](distlock_core::backend::GrantState) of every grant it serves. A
//! hand-over without a command leaves the key as it is, naming the grant
//! the script made; the next grant shares the hold and becomes its current
//! grant, and the earlier one can no longer extend, release or hand over.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use distlock_core::Holder;
use distlock_core::backend::{Lease, LeaseId};
use tokio::time::Instant;

/// How many fencing tokens one hand-over through the server takes from the
/// name's counter: its own and the next ones of this process. Tokens count
/// the server's microseconds, so a block spans that many of them.
pub(crate) const TOKEN_BLOCK: u64 = 64;

/// One exclusive lock key this process holds since a hand-over script.
#[derive(Debug)]
pub(crate) struct HandedOverLock {
    /// The identity the key stores: the grant the script made.
    owner: LeaseId,
    /// Who the stored record names; a grant for anyone else (another
    /// label, say) must write its own record, through the server.
    holder: Arc<Holder>,
    /// The lease each confirmation sets on the server.
    lease: Duration,
    live: Mutex<Live>,
}

/// What changes while a [`HandedOverLock`] lives.
#[derive(Debug)]
struct Live {
    /// The grant that holds the lock now.
    current: LeaseId,
    /// When the latest confirmation of the whole lease was sent.
    confirmed_at: Instant,
    /// Reserved tokens `next..=last`, not yet used; `next > last` when
    /// none is left.
    next: u64,
    last: u64,
    /// Released, refused, handed over through the server, or found gone.
    ended: bool,
}

/// Where the server keeps a grant, as far as this process knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnServer {
    /// Under `id`, which the owner checks compare; `token` is the grant's
    /// own when the stored one is older (it was handed over without a
    /// command), for the next extension to write.
    Stored { id: LeaseId, token: Option<u64> },
    /// Not at all: a later grant of this process took the key over, or the
    /// hold ended. Nothing may be done with it on the server.
    Gone,
}

impl OnServer {
    /// Where the server keeps `lease`.
    pub(crate) fn of(lease: &Lease) -> Self {
        match HandedOverLock::of(lease) {
            None => Self::Stored {
                id: lease.id,
                token: None,
            },
            Some(hold) => hold.on_server(lease),
        }
    }
}

impl HandedOverLock {
    /// The hold of grant `first`, which the hand-over script stored under
    /// its identity with `fencing_token`, having reserved the tokens up to
    /// `last`; `sent` is when the script was sent.
    pub(crate) fn new(
        first: LeaseId,
        holder: Arc<Holder>,
        lease: Duration,
        fencing_token: u64,
        last: u64,
        sent: Instant,
    ) -> Self {
        Self {
            owner: first,
            holder,
            lease,
            live: Mutex::new(Live {
                current: first,
                confirmed_at: sent,
                next: fencing_token + 1,
                last,
                ended: false,
            }),
        }
    }

    /// The hold `lease` carries in its state, if any.
    pub(crate) fn of(lease: &Lease) -> Option<&Self> {
        lease.state.get::<Self>()
    }

    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn on_server(&self, lease: &Lease) -> OnServer {
        let live = self.live();
        if live.ended || live.current != lease.id {
            return OnServer::Gone;
        }
        OnServer::Stored {
            id: self.owner,
            token: (lease.id != self.owner).then_some(lease.fencing_token),
        }
    }

    /// Records that the server extended grant `id` by `lease`, in a call
    /// sent at `sent`. An extension by less than the whole lease (a
    /// delayed release) leaves too little for a grant made without a
    /// command: none is made after it.
    pub(crate) fn confirm(&self, id: LeaseId, sent: Instant, lease: Duration) {
        let mut live = self.live();
        if live.ended || live.current != id {
            return;
        }
        if lease == self.lease {
            live.confirmed_at = live.confirmed_at.max(sent);
        } else {
            live.next = live.last + 1;
        }
    }

    /// Ends the hold, if grant `id` is its current grant: `id` was
    /// released, refused, or handed over through the server.
    pub(crate) fn end(&self, id: LeaseId) {
        let mut live = self.live();
        if live.current == id {
            live.ended = true;
        }
    }

    /// Makes grant `next` the current one in place of `id`, without a
    /// server command, if `id` is current with at least half of the lease
    /// left by its last confirmation, a reserved token is left, and `next`
    /// wants the same lease for the same holder. Returns `next`'s token
    /// and when the server last confirmed the lease.
    pub(crate) fn pass_on(
        &self,
        id: LeaseId,
        next: LeaseId,
        lease: Duration,
        holder: &Holder,
    ) -> Option<(u64, Instant)> {
        if lease != self.lease || *holder != *self.holder {
            return None;
        }
        let mut live = self.live();
        // Half of the lease left, as memcached asks: room for a server
        // clock that runs a little fast, and for the keeper to extend the
        // next grant before the key's expiry.
        let fresh = live.confirmed_at + self.lease / 2 > Instant::now();
        if live.ended || live.current != id || !fresh || live.next > live.last {
            return None;
        }
        let fencing_token = live.next;
        live.next += 1;
        live.current = next;
        Some((fencing_token, live.confirmed_at))
    }
}

#[cfg(test)]
mod tests {
    use distlock_core::backend::GrantState;
    use distlock_core::{Claim, LockName};

    use super::*;

    fn lease_of(hold: &Arc<HandedOverLock>, id: LeaseId, fencing_token: u64) -> Lease {
        Lease {
            name: LockName::new("held").unwrap(),
            claim: Claim::Exclusive,
            id,
            fencing_token,
            lease: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(10),
            state: GrantState::from_arc(hold.clone()),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_passes_its_reserved_tokens_on_then_sends_again() {
        let holder = Arc::new(Holder::this_process(None));
        let lease = Duration::from_secs(30);
        let first = LeaseId::random();
        let hold = Arc::new(HandedOverLock::new(
            first,
            holder.clone(),
            lease,
            100,
            102,
            Instant::now(),
        ));
        let second = LeaseId::random();
        assert_eq!(
            hold.pass_on(first, second, lease, &holder).map(|(t, _)| t),
            Some(101)
        );
        assert_eq!(
            OnServer::of(&lease_of(&hold, first, 100)),
            OnServer::Gone,
            "the earlier grant may do nothing more"
        );
        assert_eq!(
            OnServer::of(&lease_of(&hold, second, 101)),
            OnServer::Stored {
                id: first,
                token: Some(101)
            },
            "the later one acts under the stored identity"
        );
        let third = LeaseId::random();
        assert_eq!(
            hold.pass_on(second, third, lease, &holder).map(|(t, _)| t),
            Some(102)
        );
        assert_eq!(
            hold.pass_on(third, LeaseId::random(), lease, &holder),
            None,
            "no reserved token is left"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_passes_nothing_on_past_half_its_lease_or_to_another_holder() {
        let holder = Arc::new(Holder::this_process(None));
        let lease = Duration::from_secs(30);
        let first = LeaseId::random();
        let hold = HandedOverLock::new(first, holder.clone(), lease, 1, 60, Instant::now());
        let labelled = Holder::this_process(Some("other"));
        assert_eq!(
            hold.pass_on(first, LeaseId::random(), lease, &labelled),
            None
        );
        assert_eq!(
            hold.pass_on(first, LeaseId::random(), lease / 2, &holder),
            None
        );
        tokio::time::advance(lease / 2).await;
        assert_eq!(hold.pass_on(first, LeaseId::random(), lease, &holder), None);
        hold.confirm(first, Instant::now(), lease);
        assert!(
            hold.pass_on(first, LeaseId::random(), lease, &holder)
                .is_some()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_extension_or_an_end_stops_the_hand_overs() {
        let holder = Arc::new(Holder::this_process(None));
        let lease = Duration::from_secs(30);
        let first = LeaseId::random();
        let hold = HandedOverLock::new(first, holder.clone(), lease, 1, 60, Instant::now());
        hold.confirm(first, Instant::now(), Duration::from_secs(1));
        assert_eq!(hold.pass_on(first, LeaseId::random(), lease, &holder), None);

        let other = HandedOverLock::new(first, holder.clone(), lease, 1, 60, Instant::now());
        other.end(first);
        assert_eq!(
            other.pass_on(first, LeaseId::random(), lease, &holder),
            None
        );
    }
}

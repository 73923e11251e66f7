//! Broken locks on purpose: a backend that forwards to a real one with
//! one deliberate defect, to show that a check catches it. A check that
//! passes a mutant is broken, not the mutant.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::BackendExt;
use crate::backend::state::{GrantState, WaitState};
use crate::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, Extended, Lease, LockInfo,
};
use crate::claim::Claim;
use crate::error::Result;
use crate::name::LockName;

/// The defect a [`MutantBackend`] has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mutation {
    /// Grants every caller: a lock it finds held it takes from its holder
    /// by force, so tokens still rise and the superseded holder's release
    /// is refused, yet two callers hold at once.
    GrantsEveryone,
    /// Every other grant carries the token of this backend's previous
    /// grant of the name again.
    RepeatsTokens,
    /// Releases and extends by name, without the owner check: a release
    /// ends whoever holds the name, and an extension of a lease that is
    /// not ours takes the name back by force.
    SkipsOwnerCheck,
    /// Never reports a loss: an extension the store refused is answered
    /// as done, and no loss the store reports reaches the guard.
    HidesLosses,
    /// Grants a reader while a writer holds, taking the lock from the
    /// writer by force.
    ReadersBesideWriters,
}

impl Mutation {
    /// Every mutation.
    pub const ALL: [Mutation; 5] = [
        Mutation::GrantsEveryone,
        Mutation::RepeatsTokens,
        Mutation::SkipsOwnerCheck,
        Mutation::HidesLosses,
        Mutation::ReadersBesideWriters,
    ];

    /// Its name, in kebab case (`grants-everyone`), as
    /// [`from_name`](Self::from_name) reads it.
    pub fn name(self) -> &'static str {
        match self {
            Mutation::GrantsEveryone => "grants-everyone",
            Mutation::RepeatsTokens => "repeats-tokens",
            Mutation::SkipsOwnerCheck => "skips-owner-check",
            Mutation::HidesLosses => "hides-losses",
            Mutation::ReadersBesideWriters => "readers-beside-writers",
        }
    }

    /// The mutation named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Mutation> {
        Mutation::ALL
            .into_iter()
            .find(|mutation| mutation.name() == name)
    }
}

/// A backend that forwards to a real one with one deliberate defect, to
/// show that a check of a lock catches it: a check that passes a mutant is
/// broken, not the mutant. It offers none of the wrapped backend's
/// hand-overs or wake-ups (waits poll), and its session, where it has
/// one, as it is.
#[derive(Debug)]
pub struct MutantBackend {
    inner: Arc<dyn Backend>,
    mutation: Mutation,
    /// The last token this backend granted, for [`Mutation::RepeatsTokens`].
    last_token: AtomicU64,
    /// How many grants it made, to repeat every other one's token.
    grants: AtomicU64,
}

/// What a mutant keeps for a grant whose token it changed: the real one,
/// and the wrapped backend's state.
#[derive(Debug)]
struct Changed {
    fencing_token: u64,
    state: GrantState,
}

impl MutantBackend {
    /// `inner`, with `mutation`.
    pub fn new(inner: Arc<dyn Backend>, mutation: Mutation) -> Self {
        Self {
            inner,
            mutation,
            last_token: AtomicU64::new(0),
            grants: AtomicU64::new(0),
        }
    }

    /// It, shared, as clients take backends.
    pub fn shared(self) -> Arc<dyn Backend> {
        Arc::new(self)
    }

    /// `lease` as the wrapped backend granted it.
    fn real(lease: &Lease) -> Lease {
        let mut real = lease.clone();
        if let Some(changed) = lease.state.get::<Changed>() {
            real.fencing_token = changed.fencing_token;
            real.state = changed.state.clone();
        }
        real
    }

    /// Takes `request`'s lock from whoever holds it, then asks again.
    async fn take_by_force(
        &self,
        request: &AcquireRequest,
        wait: &mut WaitState,
    ) -> Result<Attempt> {
        self.inner
            .force_release(&request.name, request.operation_timeout)
            .await?;
        self.inner.try_acquire(request, wait).await
    }

    fn forces(&self, claim: Claim) -> bool {
        match self.mutation {
            Mutation::GrantsEveryone => true,
            Mutation::ReadersBesideWriters => claim == Claim::Shared,
            _ => false,
        }
    }

    /// A grant, with its token changed as the mutation asks.
    fn grant(&self, fencing_token: u64, state: GrantState) -> Attempt {
        let previous = self.last_token.swap(fencing_token, Ordering::SeqCst);
        let count = self.grants.fetch_add(1, Ordering::SeqCst);
        if self.mutation == Mutation::RepeatsTokens && count % 2 == 1 && previous != 0 {
            let changed = Changed {
                fencing_token,
                state,
            };
            self.last_token.store(previous, Ordering::SeqCst);
            return Attempt::Acquired {
                fencing_token: previous,
                state: GrantState::new(changed),
            };
        }
        Attempt::Acquired {
            fencing_token,
            state,
        }
    }

    /// One lease's extension, through the mutation.
    async fn extend(&self, lease: &Lease) -> Result<bool> {
        let real = Self::real(lease);
        let extended = self.inner.extend(&real).await?;
        Ok(match self.mutation {
            Mutation::HidesLosses => true,
            Mutation::SkipsOwnerCheck if !extended => {
                // Not ours any more: take the name back.
                self.inner
                    .force_release(&real.name, real.operation_timeout)
                    .await?;
                let request = AcquireRequest::new(
                    real.name.clone(),
                    real.claim,
                    real.lease,
                    Arc::new(crate::backend::Holder::this_process(None)),
                );
                matches!(
                    self.inner
                        .try_acquire(&request, &mut WaitState::default())
                        .await?,
                    Attempt::Acquired { .. }
                )
            }
            _ => extended,
        })
    }
}

#[async_trait]
impl Backend for MutantBackend {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn store_name(&self) -> &'static str {
        self.inner.store_name()
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        let mut asked = request.clone();
        if self.mutation == Mutation::HidesLosses {
            // The store's own loss reports go nowhere.
            asked.loss = crate::backend::LossReporter::new();
        }
        let attempt = match self.inner.try_acquire(&asked, wait).await? {
            Attempt::Held { .. } if self.forces(asked.claim) => {
                self.take_by_force(&asked, wait).await?
            }
            attempt => attempt,
        };
        Ok(match attempt {
            Attempt::Acquired {
                fencing_token,
                state,
            } => self.grant(fencing_token, state),
            held => held,
        })
    }

    async fn end_wait(&self, request: &AcquireRequest, wait: WaitState) -> Result<()> {
        self.inner.end_wait(request, wait).await
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        Extended::each(leases, |lease| self.extend(lease)).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let real = Self::real(lease);
        if self.mutation == Mutation::SkipsOwnerCheck {
            return self
                .inner
                .force_release(&real.name, real.operation_timeout)
                .await;
        }
        self.inner.release(&real).await
    }

    async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        self.inner.list(limit).await
    }

    async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool> {
        self.inner.force_release(name, limit).await
    }

    /// The inner backend's session alone: the mutant's own calls are the
    /// ones under test, and it keeps no lock after its release.
    fn abilities(&self) -> Abilities<'_> {
        let abilities =
            Abilities::none().without_delayed_release("a mutant keeps no lock after its release");
        match self.inner.abilities().session {
            Some(session) => abilities.with_session(session),
            None => abilities,
        }
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

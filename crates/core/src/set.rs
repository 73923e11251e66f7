//! Several locks taken together: in one canonical order, so that two
//! callers asking for the same names in different orders never deadlock,
//! and all or nothing, so that a timeout, an error or a cancellation
//! leaves none of them held.

use std::time::Instant;

use futures::FutureExt;
use futures::future::select_all;

use crate::acquire::AcquireOptions;
use crate::claim::Claim;
use crate::client::LockClient;
use crate::engine::hold::HoldBounds;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lost::LossReason;
use crate::name::{IntoLockName, LockName};
use crate::risk::RiskReason;

/// One member of a set given to [`LockClient::acquire_all`]: a name, taken
/// with the options' claim, or a name and a claim of its own.
///
/// ```
/// use distlock_core::{Claim, IntoLockClaim, LockName};
///
/// let (name, claim) = "orders".into_lock_claim(Claim::Exclusive)?;
/// assert_eq!((name.as_str(), claim), ("orders", Claim::Exclusive));
/// let (_, claim) = ("catalog", Claim::Shared).into_lock_claim(Claim::Exclusive)?;
/// assert_eq!(claim, Claim::Shared);
/// # Ok::<(), distlock_core::Error>(())
/// ```
pub trait IntoLockClaim {
    /// The validated name and its claim; `default` where none was given.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an invalid name.
    fn into_lock_claim(self, default: Claim) -> Result<(LockName, Claim)>;
}

impl<N: IntoLockName> IntoLockClaim for N {
    fn into_lock_claim(self, default: Claim) -> Result<(LockName, Claim)> {
        Ok((self.into_lock_name()?, default))
    }
}

impl<N: IntoLockName> IntoLockClaim for (N, Claim) {
    fn into_lock_claim(self, _: Claim) -> Result<(LockName, Claim)> {
        Ok((self.0.into_lock_name()?, self.1))
    }
}

impl LockClient {
    /// Takes every lock in `locks`, each with its own claim or the
    /// options' one, and returns them as one [`LockSet`].
    ///
    /// The locks are taken one after another in one canonical order (by
    /// name, bytewise), whatever order they were given in, so two callers
    /// that want the same names never wait for each other in a cycle. The
    /// options' timeout bounds the whole set, and their cancellation ends
    /// it; either way, and on any error, every lock already taken is
    /// released before the call returns. A payload, a longest hold and a
    /// shortest hold go with every lock (each hold counted from its own
    /// grant); the shortest only once the whole set is held, so that a set
    /// that fails releases what it took at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use distlock_core::{Claim, LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::Error> {
    /// let client = LockClient::builder().build(MemoryBackend::new())?;
    /// let both = client.acquire_all(["accounts/2", "accounts/1"], Duration::from_secs(5)).await?;
    /// let names: Vec<&str> = both.guards().iter().map(|guard| guard.name().as_str()).collect();
    /// assert_eq!(names, ["accounts/1", "accounts/2"]); // the canonical order
    ///
    /// // Claims of their own: a writer's lock on one, a reader's on another.
    /// let mixed = client
    ///     .acquire_all([("ledger", Claim::Exclusive), ("rates", Claim::Shared)], Duration::from_secs(5))
    ///     .await?;
    /// mixed.release().await?;
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// What [`acquire_with`](Self::acquire_with) returns for the lock that
    /// could not be taken ([`Error::Timeout`] naming it, at the deadline,
    /// [`Error::Cancelled`], a backend error); [`Error::InvalidName`] for an
    /// invalid name; [`Error::InvalidConfig`] for no names at all, or a
    /// name given twice.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the locks taken so far, which
    /// releases them in the background, as dropping their guards does.
    pub async fn acquire_all<'a, L>(
        &self,
        locks: impl IntoIterator<Item = L>,
        options: impl Into<AcquireOptions<'a>>,
    ) -> Result<LockSet>
    where
        L: IntoLockClaim,
    {
        // Only a campaign records a term, and it takes one lock alone.
        let AcquireOptions {
            attempt,
            timeout,
            cancel,
            records_term: _,
        } = options.into();
        let wanted = canonical(locks, attempt.claim)?;
        // Refused before anything is taken. The shortest hold is given to
        // the guards only once all are held: a set that fails must not
        // leave what it took held for it.
        let bounds = attempt.hold_bounds();
        for (_, claim) in &wanted {
            bounds.check(*claim, &**self.backend())?;
        }
        let shortest = HoldBounds {
            max: None,
            min: attempt.min_hold,
        };
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        // Each member's wait ends on the one cancellation, as a single
        // call's does: an attempt in flight is answered, and a grant it
        // brings released, before the call returns.
        let cancel = cancel.map(FutureExt::shared);
        let mut taken: Vec<LockGuard> = Vec::with_capacity(wanted.len());
        let take_all = async {
            for (name, claim) in &wanted {
                let mut options = AcquireOptions::new()
                    .claim(*claim)
                    .payload(attempt.payload.clone());
                if let Some(cancel) = &cancel {
                    options = options.cancel_on(cancel.clone());
                }
                if let Some(max_hold) = attempt.max_hold {
                    options = options.max_hold(max_hold);
                }
                if let Some(label) = &attempt.label {
                    options = options.label(label.clone());
                }
                if let Some(deadline) = deadline {
                    // Past the deadline, one attempt still gets an answer.
                    options = options.timeout(deadline.saturating_duration_since(Instant::now()));
                }
                taken.push(self.acquire_with(name, options).await?);
            }
            Ok(())
        };
        let outcome = take_all.await;
        match outcome {
            Ok(()) => Ok(LockSet {
                guards: taken
                    .into_iter()
                    .map(|guard| guard.bound_hold(shortest))
                    .collect(),
            }),
            Err(error) => {
                roll_back(taken).await;
                Err(error)
            }
        }
    }
}

/// The members in canonical order, each name once.
fn canonical<L: IntoLockClaim>(
    locks: impl IntoIterator<Item = L>,
    default: Claim,
) -> Result<Vec<(LockName, Claim)>> {
    let mut wanted = locks
        .into_iter()
        .map(|lock| {
            let (name, claim) = lock.into_lock_claim(default)?;
            Ok((name, claim.validated()?))
        })
        .collect::<Result<Vec<_>>>()?;
    if wanted.is_empty() {
        return Err(Error::config("locks", "name at least one lock to take"));
    }
    wanted.sort_by(|a, b| a.0.as_str().as_bytes().cmp(b.0.as_str().as_bytes()));
    if let Some(pair) = wanted.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(Error::config(
            "locks",
            format!(
                "`{}` is named twice; name each lock once, with the claim it needs",
                pair[0].0
            ),
        ));
    }
    Ok(wanted)
}

/// Releases what a failed set took, newest first. A release that fails is
/// logged: its lease ends when it expires, and the caller's error is the
/// one that matters.
async fn roll_back(taken: Vec<LockGuard>) {
    for guard in taken.into_iter().rev() {
        let name = guard.name().clone();
        if let Err(error) = guard.release().await {
            tracing::warn!(%name, %error, "could not release a lock of a set that failed; its lease will expire");
        }
    }
}

/// Several locks held together, from [`LockClient::acquire_all`].
///
/// Each lock keeps its own lease, extension and fencing token; the set
/// answers for them together. Dropping the set drops every guard, which
/// releases each in the background.
#[derive(Debug)]
#[must_use = "dropping the set releases its locks at once"]
pub struct LockSet {
    guards: Vec<LockGuard>,
}

impl From<LockGuard> for LockSet {
    /// A set of one lock: to hold a lock taken alone (a leadership's
    /// guard, say) where a set is expected.
    fn from(guard: LockGuard) -> Self {
        Self {
            guards: vec![guard],
        }
    }
}

impl LockSet {
    /// The guards, in the canonical order they were taken in.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Every lock's name and fencing token, in the canonical order.
    pub fn fencing_tokens(&self) -> impl Iterator<Item = (&LockName, u64)> {
        self.guards
            .iter()
            .map(|guard| (guard.name(), guard.fencing_token()))
    }

    /// Resolves when any of the locks is no longer ours, with its name and
    /// the reason. The others stay held until the set is released or
    /// dropped.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) -> (&LockName, LossReason) {
        let losses = self.guards.iter().map(|guard| Box::pin(guard.lost()));
        let (reason, index, _) = select_all(losses).await;
        (self.guards[index].name(), reason)
    }

    /// Whether any of the locks has been lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves when any of the locks is in danger or lost, with its name
    /// and the reason; at once if one already is. See
    /// [`LockGuard::at_risk`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn at_risk(&self) -> (&LockName, RiskReason) {
        let risks = self.guards.iter().map(|guard| Box::pin(guard.at_risk()));
        let (reason, index, _) = select_all(risks).await;
        (self.guards[index].name(), reason)
    }

    /// The first of the locks, in the canonical order, that is in danger
    /// now, with the reason; `None` while every one is safe.
    pub fn risk(&self) -> Option<(&LockName, RiskReason)> {
        self.guards
            .iter()
            .find_map(|guard| Some((guard.name(), guard.risk()?)))
    }

    /// Releases every lock, the last taken first. Returns `Ok(true)` if
    /// all were still ours, `Ok(false)` if any had been lost.
    ///
    /// # Errors
    /// The first error among the releases, once every lock was released or
    /// tried; a lock whose release failed ends when its lease expires.
    ///
    /// # Cancel safety
    /// Each release completes even if this future is dropped, as
    /// [`LockGuard::release`] does; the locks not yet reached are dropped,
    /// which releases them in the background.
    pub async fn release(self) -> Result<bool> {
        let mut all_held = true;
        let mut first_error = None;
        for guard in self.guards.into_iter().rev() {
            match guard.release().await {
                Ok(held) => all_held &= held,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(all_held), Err)
    }

    /// The guards, to release or keep one by one.
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }
}

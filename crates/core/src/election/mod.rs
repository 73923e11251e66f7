//! Leader election on a lock: the leader is the holder of the election's
//! name, its term is the grant's fencing token, and its value (an
//! instance's URL, say) is recorded as the grant's label, where every
//! instance can read it.

use std::time::Duration;

use crate::acquire::AcquireOptions;
use crate::backend::terms::Term;
use crate::backend::{Holder, TermLog};
use crate::client::{LockClient, check_label};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lost::LossReason;
use crate::name::{IntoLockName, LockName};
use crate::risk::{RiskReason, RiskSignal};

mod health;
mod observer;

pub use health::{LeaderHealth, StaleLeadership};
pub use observer::Observer;

/// An election among this client and every other that names it: see
/// [`LockClient::election`].
#[derive(Debug, Clone)]
pub struct Election {
    client: LockClient,
    name: LockName,
}

/// Who leads an election, as the backend lists its lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader campaigned with.
    pub value: String,
    /// The leader's term: its grant's fencing token, greater than every
    /// earlier term of the election.
    pub term: u64,
    /// The leader's host and process.
    pub holder: Holder,
    /// How long until its lease ends unless extended; `None` where the
    /// lock lasts as long as the leader's process, and for a leader an
    /// [`Observer`] read from the election's record of terms, which keeps
    /// who led, not for how long.
    pub expires_in: Option<Duration>,
}

impl Leader {
    fn of(term: Term) -> Self {
        Self {
            value: term.holder.label.clone().unwrap_or_default(),
            term: term.term,
            holder: term.holder,
            expires_in: None,
        }
    }
}

impl LockClient {
    /// The election named `name`: campaign in it, ask who leads, or follow
    /// its leaders. Every instance that names the same election on the same
    /// backend takes part in one election, which is the exclusive lock of
    /// that name.
    ///
    /// ```
    /// use distlock_core::{AcquireOptions, LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::Error> {
    /// let client = LockClient::builder().build(MemoryBackend::new())?;
    /// let election = client.election("scheduler")?;
    /// let leading = election.campaign("http://10.0.0.7:8080", AcquireOptions::new()).await?;
    /// let leader = election.leader().await?.expect("someone leads");
    /// assert_eq!((leader.value.as_str(), leader.term), ("http://10.0.0.7:8080", leading.term()));
    /// leading.resign().await?;
    /// assert!(election.leader().await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an invalid name.
    pub fn election(&self, name: impl IntoLockName) -> Result<Election> {
        Ok(Election {
            client: self.clone(),
            name: name.into_lock_name()?,
        })
    }
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Waits to become the leader, with `value` for everyone to read, and
    /// returns the leadership. `options` bound the wait (a timeout, a
    /// cancellation, a longest hold), as for
    /// [`LockClient::acquire_with`]; `AcquireOptions::new()` waits for as
    /// long as it takes.
    ///
    /// # Errors
    /// What [`LockClient::acquire_with`] returns; [`Error::InvalidConfig`]
    /// for a value longer than 1 KiB or with a control character, or for
    /// options with a claim other than the whole lock.
    ///
    /// # Cancel safety
    /// As [`LockClient::acquire_with`]: dropping the future gives up the
    /// campaign, and a leadership it won is released in the background.
    pub async fn campaign<'a>(
        &self,
        value: impl Into<String>,
        options: impl Into<AcquireOptions<'a>>,
    ) -> Result<Leadership> {
        let value = value.into();
        check_label(&value)?;
        let options = options.into();
        if options.requested_claim() != crate::Claim::Exclusive {
            return Err(Error::config(
                "claim",
                "an election has one leader: campaign for the whole lock",
            ));
        }
        let options = options.label(value.clone()).records_term();
        let guard = self.client.acquire_with(&self.name, options).await?;
        Ok(Leadership { guard, value })
    }

    /// The current leader, or `None` when nobody leads.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a backend whose list shows only this
    /// process's locks (memcached); a backend error.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        if !self.client.backend().capabilities().lists_every_holder {
            return Err(Error::Unsupported(
                "this backend lists only the locks of the process that lists them, so it \
                 cannot say who leads an election elsewhere"
                    .into(),
            ));
        }
        let listed = self.client.list().await?;
        Ok(listed
            .into_iter()
            .filter(|info| info.name == self.name)
            .find_map(|info| {
                let holder = info.holder?;
                Some(Leader {
                    value: holder.label.clone().unwrap_or_default(),
                    term: info.fencing_token?,
                    holder,
                    expires_in: info.expires_in,
                })
            }))
    }

    /// Follows the election's leaders: see [`Observer`].
    pub fn observe(&self) -> Observer {
        Observer::new(self.clone())
    }

    /// The terms `log` keeps of this election after `after`, read within
    /// the client's operation timeout.
    async fn terms_after(&self, log: &dyn TermLog, after: u64) -> Result<Vec<Term>> {
        let limit = self.client.options().operation_timeout();
        let read = log.terms_after(&self.name, after, limit);
        self.client.admin("read terms", limit, read).await
    }
}

/// Leadership of an election, won by [`Election::campaign`]. While it
/// lives, the lease is extended in the background, as a lock guard's is.
#[derive(Debug)]
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    guard: LockGuard,
    value: String,
}

impl Leadership {
    /// The term: the grant's fencing token, greater than every earlier
    /// term. Hand it to what the leader writes to, so that a deposed
    /// leader's late writes can be turned away.
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// The value this leader campaigned with.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Resolves, with the reason, once this instance no longer leads; see
    /// [`LockGuard::lost`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        self.guard.lost().await
    }

    /// Whether this instance no longer leads.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves, with the reason, when the leadership is in danger of
    /// being lost, or once it is; see [`LockGuard::at_risk`]. A leader
    /// that cannot stop at once may stop taking new work here.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn at_risk(&self) -> RiskReason {
        self.guard.at_risk().await
    }

    /// Whether the leadership is in danger now, and why; see
    /// [`LockGuard::risk`].
    pub fn risk(&self) -> Option<RiskReason> {
        self.guard.risk()
    }

    /// A cloneable, `'static` signal of the leadership in danger, for a
    /// task of its own; see [`LockGuard::risk_signal`].
    pub fn risk_signal(&self) -> RiskSignal {
        self.guard.risk_signal()
    }

    /// A health check for this leader, for a service's health endpoint:
    /// it turns unhealthy when the leadership is still held but has not
    /// been sure for longer than `tolerance` (see [`LeaderHealth`]), so an
    /// orchestrator that restarts unhealthy instances restarts a stuck
    /// leader. A tolerance of a few extension periods rides out a slow
    /// probe.
    ///
    /// ```
    /// use std::time::Duration;
    /// use distlock_core::{AcquireOptions, LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::Error> {
    /// let client = LockClient::builder().build(MemoryBackend::new())?;
    /// let leading = client
    ///     .election("scheduler")?
    ///     .campaign("http://10.0.0.7:8080", AcquireOptions::new())
    ///     .await?;
    /// let health = leading.health(Duration::from_secs(10));
    /// assert!(health.check().is_ok());
    /// leading.resign().await?;
    /// // No longer the leader: nothing to be stuck on.
    /// assert!(health.check().is_ok());
    /// # Ok(())
    /// # }
    /// ```
    pub fn health(&self, tolerance: Duration) -> LeaderHealth {
        LeaderHealth::new(self.guard.held(), tolerance)
    }

    /// Steps down, so that another campaigner is elected. Returns whether
    /// this instance still led until then; see [`LockGuard::release`].
    ///
    /// # Errors
    /// A backend error if the release could not be sent or confirmed; the
    /// leadership then ends when its lease expires.
    ///
    /// # Cancel safety
    /// As [`LockGuard::release`]: the release completes even if this
    /// future is dropped.
    pub async fn resign(self) -> Result<bool> {
        self.guard.release().await
    }

    /// The lock guard behind the leadership.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}

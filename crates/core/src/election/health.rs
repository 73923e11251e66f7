//! A leader's health check: whether an instance that still holds its
//! leadership has had it confirmed recently, for a service's health
//! endpoint, so an orchestrator restarts a leader that is stuck.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::engine::held::HeldLease;
use crate::lost::LossReason;

/// The health of a [`Leadership`](super::Leadership), from
/// [`Leadership::health`](super::Leadership::health): cloneable, `'static`
/// and cheap to ask, so a health endpoint can keep one and ask it on
/// every probe, on any thread.
///
/// It answers unhealthy when the instance still holds its leadership
/// (has neither resigned nor dropped it) but the leadership has not been
/// sure for longer than the tolerance: its lease passed
/// [`valid_until`](crate::LockGuard::valid_until) (the last confirmation
/// plus the lease, less the safety margin) without an extension confirming
/// it and without the keeper ending it, or it was lost and the instance
/// has not stepped down. Either way the instance may act as a leader while
/// another is elected: its extension stopped (a starved runtime, a
/// blocked thread), or its code did not watch
/// [`Leadership::lost`](super::Leadership::lost). Once the leadership is
/// resigned or dropped, the instance no longer leads, and it is healthy.
#[derive(Debug, Clone)]
pub struct LeaderHealth {
    held: Weak<HeldLease>,
    term: u64,
    tolerance: Duration,
}

/// Why a leader is unhealthy; see [`LeaderHealth`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StaleLeadership {
    /// The term of the leadership still held.
    pub term: u64,
    /// How long it has not been sure: since its lease ran past
    /// [`valid_until`](crate::LockGuard::valid_until), or since it was lost.
    pub stale_for: Duration,
    /// The reason it was lost, if the keeper saw it lost.
    pub lost: Option<LossReason>,
}

impl fmt::Display for StaleLeadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.lost {
            Some(reason) => write!(
                f,
                "leadership (term {}) was lost {:?} ago ({reason}) but is still held",
                self.term, self.stale_for
            ),
            None => write!(
                f,
                "leadership (term {}) has not been confirmed for {:?} past its lease; \
                 its extension is stuck",
                self.term, self.stale_for
            ),
        }
    }
}

impl std::error::Error for StaleLeadership {}

impl LeaderHealth {
    pub(super) fn new(held: &Arc<HeldLease>, tolerance: Duration) -> Self {
        Self {
            held: Arc::downgrade(held),
            term: held.lease.fencing_token,
            tolerance,
        }
    }

    /// Whether the leader is healthy now.
    ///
    /// # Errors
    /// [`StaleLeadership`] when the leadership is still held but has not
    /// been sure for longer than the tolerance.
    pub fn check(&self) -> Result<(), StaleLeadership> {
        // Tokio's clock, as the keeper's deadlines are on.
        self.check_at(tokio::time::Instant::now().into_std())
    }

    fn check_at(&self, now: Instant) -> Result<(), StaleLeadership> {
        let Some(held) = self.held.upgrade() else {
            return Ok(());
        };
        let lost = held.loss();
        if held.is_let_go() || lost == Some(LossReason::Released) {
            return Ok(());
        }
        // A lock bound to the process has no deadline; it is unsure only
        // once lost.
        let stale_since = [held.deadline(), held.ended_at()]
            .into_iter()
            .flatten()
            .min();
        let Some(stale_since) = stale_since else {
            return Ok(());
        };
        let stale_for = now.saturating_duration_since(stale_since);
        if stale_for <= self.tolerance {
            return Ok(());
        }
        Err(StaleLeadership {
            term: self.term,
            stale_for,
            lost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::state::GrantState;
    use crate::backend::{AcquireRequest, Backend, Holder};
    use crate::claim::Claim;
    use crate::memory::MemoryBackend;
    use crate::name::LockName;

    fn held() -> Arc<HeldLease> {
        let request = AcquireRequest::new(
            LockName::new("leader").unwrap(),
            Claim::Exclusive,
            Duration::from_secs(30),
            Arc::new(Holder::this_process(None)),
        );
        let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        Arc::new(HeldLease::new(
            request.granted(7, GrantState::none()),
            backend,
            request.loss,
            false,
        ))
    }

    const TOLERANCE: Duration = Duration::from_secs(5);

    #[test]
    fn a_leadership_past_its_deadline_by_more_than_the_tolerance_is_unhealthy() {
        let held = held();
        let health = LeaderHealth::new(&held, TOLERANCE);
        let now = Instant::now();
        held.set_deadline(Some(now));
        assert_eq!(health.check_at(now + TOLERANCE), Ok(()));
        let stale = health
            .check_at(now + TOLERANCE + Duration::from_secs(1))
            .unwrap_err();
        assert_eq!((stale.term, stale.lost), (7, None));
        assert_eq!(stale.stale_for, TOLERANCE + Duration::from_secs(1));
        // Confirmed again: healthy.
        held.set_deadline(Some(now + Duration::from_secs(20)));
        assert_eq!(health.check_at(now + Duration::from_secs(10)), Ok(()));
    }

    #[test]
    fn a_lost_leadership_still_held_turns_unhealthy_after_the_tolerance() {
        let held = held();
        let health = LeaderHealth::new(&held, TOLERANCE);
        held.set_deadline(Some(Instant::now() + Duration::from_secs(3600)));
        held.end(LossReason::Refused);
        let lost_at = held.ended_at().expect("ended");
        assert_eq!(health.check_at(lost_at + TOLERANCE), Ok(()));
        let stale = health.check_at(lost_at + TOLERANCE * 2).unwrap_err();
        assert_eq!(stale.lost, Some(LossReason::Refused));
    }

    #[test]
    fn a_resigned_or_dropped_leadership_is_healthy() {
        let held = held();
        let health = LeaderHealth::new(&held, TOLERANCE);
        let long_ago = Instant::now();
        held.set_deadline(Some(long_ago));
        let later = long_ago + TOLERANCE * 10;
        assert!(health.check_at(later).is_err());
        held.end(LossReason::Released);
        assert_eq!(health.check_at(later), Ok(()));
        let held = self::held();
        let health = LeaderHealth::new(&held, TOLERANCE);
        held.set_deadline(Some(long_ago));
        held.end(LossReason::Expired);
        assert!(health.check_at(later).is_err());
        // Its guard dropped, releasing in the background.
        held.let_go();
        assert_eq!(health.check_at(later), Ok(()));
        drop(held);
        assert_eq!(health.check_at(later), Ok(()));
    }

    #[test]
    fn a_leadership_bound_to_its_process_is_unhealthy_only_once_lost() {
        let held = held();
        let health = LeaderHealth::new(&held, TOLERANCE);
        let later = Instant::now() + Duration::from_secs(86_400);
        assert_eq!(health.check_at(later), Ok(()));
        held.end(LossReason::Detected);
        assert!(health.check_at(later).is_err());
    }
}

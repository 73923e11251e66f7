//! Sessions: for a backend whose grants and waits all hang on one session
//! (an etcd lease for all of a client's keys), the keeper renews that
//! session once per extension period, while the client holds or waits for
//! anything, instead of extending grants one by one. 10,000 locks held
//! then cost one renewal per cadence.
//!
//! Each lease is kept with the session it was granted on: a renewal keeps
//! the leases of the session it renewed, and the end of a session ends its
//! leases, and no others (the backend may have replaced its session
//! between two grants).

use std::sync::Arc;

use tokio::time::Instant;

use super::{Keeper, Shared};
use crate::backend::{Renewal, SessionId};
use crate::engine::bounded;
use crate::engine::held::HeldLease;
use crate::error::{Error, Result};
use crate::lost::LossReason;
use crate::metrics;
use crate::risk::RiskReason;
use crate::sync::atomic::Ordering;

/// When the session is renewed next.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// `None` while nothing is held or waited for.
    next: Option<Instant>,
    in_flight: bool,
}

/// Keeps a session backend's session renewed while a wait is under way;
/// dropping it ends that.
#[derive(Debug)]
pub(crate) struct WaitTicket {
    shared: Arc<Shared>,
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        self.shared.waits.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Keeper {
    /// Notes that a wait begins, for a backend with a session; `None` for
    /// others, at no cost.
    pub(crate) fn begin_wait(&self) -> Option<WaitTicket> {
        self.shared.session.as_ref()?;
        if self.shared.waits.fetch_add(1, Ordering::AcqRel) == 0 {
            self.start();
            self.shared.wake.notify_one();
        }
        Some(WaitTicket {
            shared: self.shared.clone(),
        })
    }
}

impl Shared {
    /// Whether the session is due for renewal by `now` (it is then marked
    /// in flight), and when to look next, given the leases' next look.
    pub(super) fn take_session_due(
        &self,
        now: Instant,
        next_look: Option<Instant>,
    ) -> (bool, Option<Instant>) {
        if self.session.is_none() {
            return (false, next_look);
        }
        let mut schedule = self.lock();
        let in_use = !schedule.entries.is_empty() || self.waits.load(Ordering::Acquire) > 0;
        let plan = &mut schedule.session;
        if !in_use {
            plan.next = None;
            return (false, next_look);
        }
        if plan.in_flight {
            return (false, next_look);
        }
        // A session just put to use was confirmed by the grant or attempt
        // that used it: renew it a cadence from now.
        let due = *plan.next.get_or_insert(now + self.options.extend_every());
        if due <= now {
            plan.in_flight = true;
            return (true, next_look);
        }
        (false, Some(next_look.map_or(due, |at| at.min(due))))
    }

    /// The session `held` was granted on, as the backend tells.
    pub(super) fn session_of(&self, held: &HeldLease) -> Option<SessionId> {
        self.session
            .as_ref()?
            .abilities()
            .session?
            .session_of(&held.lease)
    }

    /// Renews the session, and applies the outcome to the leases.
    pub(super) async fn renew_session(self: Arc<Self>) {
        let sent_at = Instant::now();
        let outcome = self.ask_renewal().await;
        let _ = self.renewed(sent_at, outcome);
    }

    /// Renews the session now, as
    /// [`LockGuard::extend`](crate::LockGuard::extend) asks for `held`.
    pub(super) async fn renew_now(self: Arc<Self>, held: &HeldLease) -> Result<()> {
        let session = self.session_of(held);
        let sent_at = Instant::now();
        let outcome = self.ask_renewal().await;
        let answer = match &outcome {
            Ok(renewal) if session.is_some_and(|id| renewal.ended.contains(&id)) => {
                Some(Err(held.lost_error()))
            }
            Ok(renewal) if session.is_some() && renewal.renewed == session => Some(Ok(())),
            Ok(_) => Some(Err(Error::Backend {
                backend: self.store,
                message: format!(
                    "renewing the session did not confirm the one lock {} was granted on; \
                     it is kept until its lease runs out unless a later renewal confirms it",
                    held.lease.name
                ),
                source: None,
            })),
            Err(_) => None,
        };
        match self.renewed(sent_at, outcome) {
            Some(error) => Err(error),
            None if held.loss().is_some() => Err(held.lost_error()),
            None => answer.unwrap_or(Ok(())),
        }
    }

    async fn ask_renewal(&self) -> Result<Renewal> {
        let backend = self.session.as_ref().expect("only session backends renew");
        let timeout = self.options.operation_timeout();
        // Under a timer whatever the backend bounds itself: a renewal has
        // one operation timeout in all (see `bounded::keeper_call`).
        let renewal = async {
            match backend.abilities().session {
                Some(session) => session.renew().await,
                None => Err(Error::Unsupported("the backend keeps no session".into())),
            }
        };
        let started = std::time::Instant::now();
        let outcome = bounded::keeper_call(timeout, "renew session", renewal).await;
        metrics::extension_call(self.store, started.elapsed());
        // A renewal that found its session gone counts as a loss.
        let counted = outcome
            .as_ref()
            .map(|renewal| renewal.ended.is_empty())
            .map_err(|_| ());
        metrics::extension(self.store, metrics::Extension::of_outcome(counted));
        if let Err(error) = &outcome {
            metrics::backend_error(self.store, "renew session", error);
        }
        outcome
    }

    /// Applies a renewal sent at `sent_at`: the leases of the session it
    /// renewed are kept for a lease from then, and those of the sessions
    /// it found gone end. Hands back the error of a failed renewal.
    fn renewed(&self, sent_at: Instant, outcome: Result<Renewal>) -> Option<Error> {
        let mut schedule = self.lock();
        schedule.session.in_flight = false;
        let renewal = match outcome {
            Ok(renewal) => renewal,
            Err(error) => {
                schedule.session.next = Some(Instant::now() + self.retry_delay());
                for entry in schedule.entries.values() {
                    if entry.session.is_some() && entry.valid_until.is_some() {
                        entry.held.endanger(RiskReason::ExtensionFailed);
                    }
                }
                drop(schedule);
                tracing::warn!(%error, "renewing the session failed; retrying while the leases last");
                self.wake.notify_one();
                return Some(error);
            }
        };
        schedule.session.next = Some(sent_at + self.options.extend_every());
        let confirmation = self.confirmation(&schedule.clock, sent_at);
        let now = Instant::now();
        let mut kept = 0;
        let mut lost = Vec::new();
        let keys: Vec<u64> = schedule.entries.keys().copied().collect();
        for key in keys {
            let entry = schedule.entries.get_mut(&key).expect("listed just above");
            let Some(session) = entry.session else {
                continue;
            };
            if renewal.ended.contains(&session) {
                lost.extend(schedule.remove(key));
            } else if renewal.renewed == Some(session) {
                schedule.confirm(key, confirmation, now);
                kept += 1;
            }
        }
        drop(schedule);
        if !lost.is_empty() {
            tracing::warn!(
                leases = lost.len(),
                sessions = ?renewal.ended,
                "the backend's session is gone, and the leases granted on it"
            );
        }
        tracing::trace!(leases = kept, session = ?renewal.renewed, "session renewed");
        for entry in lost {
            entry.held.end(LossReason::Refused);
        }
        self.wake.notify_one();
        None
    }
}

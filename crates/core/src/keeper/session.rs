//! Sessions: for a backend whose grants and waits all hang on one session
//! (an etcd lease for all of a client's keys), the keeper renews that
//! session once per extension period, while the client holds or waits for
//! anything, instead of extending grants one by one. 10,000 locks held
//! then cost one renewal per cadence.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Keeper, Shared, lost_error};
use crate::bounded;
use crate::error::{Error, Result};
use crate::lease::{HeldLease, LossReason};
use crate::metrics;
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

    /// Renews the session, and applies the outcome to every lease.
    pub(super) async fn renew_session(self: Arc<Self>) {
        let sent_at = Instant::now();
        let outcome = self.ask_renewal().await;
        let _ = self.renewed(sent_at, outcome);
    }

    /// Renews the session now, as
    /// [`LockGuard::extend`](crate::LockGuard::extend) asks for `held`.
    pub(super) async fn renew_now(self: Arc<Self>, held: &HeldLease) -> Result<()> {
        let sent_at = Instant::now();
        let outcome = self.ask_renewal().await;
        let lost = matches!(outcome, Ok(false));
        match self.renewed(sent_at, outcome) {
            Some(error) => Err(error),
            None if lost => Err(lost_error(held)),
            None => Ok(()),
        }
    }

    async fn ask_renewal(&self) -> Result<bool> {
        let backend = self.session.as_ref().expect("only session backends renew");
        let timeout = self.options.operation_timeout();
        // Under a timer whatever the backend bounds itself: a renewal has
        // one operation timeout in all (see `bounded::keeper_call`).
        let renewal = async {
            match backend.session() {
                Some(session) => session.renew().await,
                None => Err(Error::Unsupported("the backend keeps no session".into())),
            }
        };
        let started = std::time::Instant::now();
        let outcome = bounded::keeper_call(timeout, "renew session", renewal).await;
        metrics::extension_call(self.store, started.elapsed());
        metrics::extension(self.store, metrics::Extension::of(&outcome));
        if let Err(error) = &outcome {
            metrics::backend_error(self.store, "renew session", error);
        }
        outcome
    }

    /// Applies a renewal sent at `sent_at`: every lease held is kept for a
    /// lease from then; a session that is gone takes every lease with it.
    /// Hands back the error of a failed renewal.
    fn renewed(&self, sent_at: Instant, outcome: Result<bool>) -> Option<Error> {
        let mut schedule = self.lock();
        schedule.session.in_flight = false;
        let mut failure = None;
        match outcome {
            Ok(true) => {
                schedule.session.next = Some(sent_at + self.options.extend_every());
                let valid_until = self.valid_until(sent_at);
                let keys: Vec<u64> = schedule.entries.keys().copied().collect();
                for key in keys {
                    let entry = schedule.entries.get_mut(&key).expect("listed just above");
                    entry.valid_until = entry.valid_until.max(valid_until);
                    schedule.reschedule(key);
                }
                tracing::trace!(leases = schedule.entries.len(), "session renewed");
            }
            Ok(false) => {
                schedule.session.next = None;
                let lost = schedule.clear();
                drop(schedule);
                tracing::warn!(leases = lost.len(), "the backend's session is gone");
                for entry in lost.into_values() {
                    entry.held.end(LossReason::Refused);
                }
                self.wake.notify_one();
                return None;
            }
            Err(error) => {
                schedule.session.next = Some(Instant::now() + self.retry_delay());
                tracing::warn!(%error, "renewing the session failed; retrying while the leases last");
                failure = Some(error);
            }
        }
        drop(schedule);
        self.wake.notify_one();
        failure
    }
}

//! The keeper: one task per client that extends every held lease in
//! batches, and ends leases that were refused or ran out.
//!
//! Leases are kept in a schedule ordered by when each next needs attention,
//! so the cost is per due lease, not per timer. Leases that fall due within
//! a short window of each other go to the backend together through
//! [`Backend::extend_many`](crate::backend::Backend::extend_many) (in calls of at
//! most [`Backend::extend_many_limit`](crate::backend::Backend::extend_many_limit)
//! leases, each bounded by the operation timeout, a few at once), so 10,000 locks
//! taken at once cost a few bulk calls per cadence, not 10,000 timers.
//!
//! A backend whose grants hang on one session instead has that session
//! renewed once per cadence (see [`session`]). A backend that reads its
//! server's clock in its extensions lets the keeper see that clock step
//! forward between two of its readings, and shorten the leases the step
//! shortened (see [`clock`]); a step before the first reading is not seen.

mod clock;
mod session;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{Backend, BackendExt, Lease, SessionId};
use crate::engine::bounded;
use crate::engine::held::HeldLease;
use crate::error::{Error, Result};
use crate::lost::LossReason;
use crate::metrics;
use crate::options::LockOptions;
use crate::risk::RiskReason;
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{Mutex, MutexGuard};

/// How many `extend_many` calls of one batch are in flight at once: enough
/// that a batch larger than one call is sent within a round trip or two,
/// few enough to leave a backend's pool of connections to acquisitions.
const EXTEND_CALLS_AT_ONCE: usize = 4;

/// Handle to a client's keeper.
#[derive(Debug, Clone)]
pub(crate) struct Keeper {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    schedule: Mutex<Schedule>,
    wake: Arc<Notify>,
    options: LockOptions,
    process_bound: bool,
    /// The store's name, for metrics.
    store: &'static str,
    /// The backend, when its grants hang on a session that the keeper
    /// renews instead of extending grants one by one.
    session: Option<Arc<dyn Backend>>,
    /// How many waits of the client are under way, for a session backend:
    /// its session must live while they wait too.
    waits: AtomicUsize,
    /// Whether the keeper task runs. It is started by the first insert, and
    /// again by the next insert after it stopped with the runtime it ran on
    /// (a client shared between runtimes outlives each of them).
    running: AtomicBool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Let the task see that it has nothing left to keep.
        self.wake.notify_one();
    }
}

#[derive(Debug, Default)]
struct Schedule {
    // Keys are handed out in order, so a B-tree keeps them without hashing.
    entries: BTreeMap<u64, Entry>,
    queue: BTreeSet<(Instant, u64)>,
    next_key: u64,
    /// When the keeper task means to look next (`None`: only when woken).
    planned: Option<Instant>,
    /// Whether the last look found nothing to keep.
    was_empty: bool,
    /// Whether a lease was added since the last look.
    added_since_look: bool,
    /// When a session backend's session is renewed next.
    session: session::Plan,
    /// The last reading of the server's clock.
    clock: clock::ClockWatch,
    /// How little of a lease may be left before it is at risk
    /// ([`LockOptions::at_risk_below`]).
    at_risk_below: Duration,
}

#[derive(Debug)]
struct Entry {
    held: Arc<HeldLease>,
    next_extension: Instant,
    /// When the lease must be given up unless an extension succeeds; `None`
    /// for process-bound backends, whose locks never run out.
    valid_until: Option<Instant>,
    in_flight: bool,
    wake_at: Instant,
    /// For a session backend, the session the lease was granted on: only
    /// that session's renewals keep it, and its end ends it.
    session: Option<SessionId>,
    /// Whether the lease was marked at risk for having little left since
    /// it was last confirmed.
    little_left_noted: bool,
}

impl Entry {
    /// Moves the lease's validity, and tells its guard.
    fn set_valid_until(&mut self, until: Option<Instant>) {
        self.valid_until = until;
        self.held.set_deadline(until.map(Instant::into_std));
    }

    /// When the lease will have less than `at_risk_below` left, unless
    /// that was noted already; `None` for a lease no clock ends, or when
    /// only failed extensions warn.
    fn at_risk_from(&self, at_risk_below: Duration) -> Option<Instant> {
        if self.little_left_noted || at_risk_below.is_zero() {
            return None;
        }
        let until = self.valid_until?;
        Some(until.checked_sub(at_risk_below).unwrap_or(until))
    }

    fn compute_wake(&self, at_risk_below: Duration) -> Instant {
        let far = far_future();
        let validity = self.valid_until.unwrap_or(far);
        let wake = if self.in_flight {
            validity
        } else {
            self.next_extension.min(validity)
        };
        self.at_risk_from(at_risk_below)
            .map_or(wake, |at_risk| wake.min(at_risk))
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// What one confirmation of a lease by the server (its grant, an
/// extension, its session's renewal) gives it, by
/// [`Shared::confirmation`].
#[derive(Debug, Clone, Copy)]
struct Confirmation {
    /// Until when the lease is valid; `None` for process-bound backends.
    until: Option<Instant>,
    /// Whether steps of the server's clock seen since it was sent cut it.
    stepped: bool,
}

impl Schedule {
    fn reschedule(&mut self, key: u64) {
        if let Some(entry) = self.entries.get_mut(&key) {
            self.queue.remove(&(entry.wake_at, key));
            entry.wake_at = entry.compute_wake(self.at_risk_below);
            self.queue.insert((entry.wake_at, key));
        }
    }

    /// Whether the keeper must be woken to look at `key` in time; with many
    /// locks taken in a row, most need no wake-up.
    fn plan(&mut self, key: u64) -> bool {
        let Some(wake_at) = self.entries.get(&key).map(|entry| entry.wake_at) else {
            return false;
        };
        let too_late = self.planned.is_none_or(|planned| wake_at < planned);
        if too_late {
            self.planned = Some(wake_at);
        }
        too_late
    }

    fn remove(&mut self, key: u64) -> Option<Entry> {
        let entry = self.entries.remove(&key)?;
        self.queue.remove(&(entry.wake_at, key));
        Some(entry)
    }

    /// Applies `confirmation` to the lease under `key`: it is valid until
    /// the later of what it had and what the confirmation gives (an older
    /// answer never shortens a newer one). A lease that steps of the
    /// server's clock left no time is ended at once
    /// ([`LossReason::ServerClockStepped`]); one that merely ran out is
    /// left to the next look ([`LossReason::Expired`]).
    fn confirm(&mut self, key: u64, confirmation: Confirmation, now: Instant) {
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        let until = match (entry.valid_until, confirmation.until) {
            (Some(had), Some(given)) => Some(had.max(given)),
            (_, given) => given,
        };
        entry.set_valid_until(until);
        entry.little_left_noted = false;
        entry.held.reassure();
        if confirmation.stepped && until.is_some_and(|until| until <= now) {
            if let Some(entry) = self.remove(key) {
                entry.held.end(LossReason::ServerClockStepped);
            }
            return;
        }
        self.reschedule(key);
    }

    /// Removes every entry.
    fn clear(&mut self) -> BTreeMap<u64, Entry> {
        self.queue.clear();
        self.planned = None;
        std::mem::take(&mut self.entries)
    }
}

impl Keeper {
    /// The keeper of a client of `backend` with `options`.
    pub(crate) fn new(options: LockOptions, backend: &Arc<dyn Backend>) -> Self {
        let capabilities = backend.capabilities();
        Self {
            shared: Arc::new(Shared {
                schedule: Mutex::new(Schedule {
                    at_risk_below: options.at_risk_below(),
                    ..Schedule::default()
                }),
                wake: Arc::new(Notify::new()),
                options,
                process_bound: capabilities.process_bound,
                store: backend.store_name(),
                session: backend
                    .abilities()
                    .session
                    .is_some()
                    .then(|| backend.clone()),
                waits: Default::default(),
                running: AtomicBool::new(false),
            }),
        }
    }

    /// Starts keeping `held`, granted by a request sent at `sent_at`.
    /// Returns the key to [`remove`](Self::remove) it with.
    pub(crate) fn insert(&self, held: Arc<HeldLease>, sent_at: Instant) -> u64 {
        self.start();
        let (key, too_late) = self.shared.schedule_lease(held, sent_at);
        if too_late {
            self.shared.wake.notify_one();
        }
        key
    }

    /// Stops keeping the lease under `key`.
    pub(crate) fn remove(&self, key: u64) {
        self.shared.lock().remove(key);
    }

    /// Extends one lease now, as [`LockGuard::extend`](crate::LockGuard::extend) asks.
    pub(crate) async fn extend_now(&self, key: u64, held: &HeldLease) -> Result<()> {
        let _ops = held.ops.lock().await;
        if held.loss().is_some() {
            return Err(held.lost_error());
        }
        if self.shared.session.is_some() {
            return self.shared.clone().renew_now(held).await;
        }
        let sent_at = Instant::now();
        let outcome = bounded::keeper_call(held.lease.operation_timeout, "extend", async {
            held.backend.extend(&held.lease).await
        })
        .await;
        metrics::extension_call(self.shared.store, sent_at.elapsed());
        // The keeper records the outcome; the caller gets the same error,
        // with its kind and source, or the loss an `Ok(false)` means.
        let failure = match &outcome {
            Err(_) | Ok(true) => None,
            Ok(false) => Some(held.lost_error()),
        };
        match self.shared.record(key, sent_at, outcome) {
            Some(error) => Err(error),
            // A confirmation that steps of the server's clock seen since
            // it was sent left no time ended the lease.
            None if held.loss().is_some() => Err(held.lost_error()),
            None => failure.map_or(Ok(()), Err),
        }
    }

    fn start(&self) {
        let shared = &self.shared;
        // On the hot path: a read, unless the task must be started.
        if shared.running.load(Ordering::Acquire) || shared.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(shared);
        let stopped = OnStop(weak.clone());
        crate::sync::spawn(run(weak, shared.wake.clone(), stopped));
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a confirmation of a lease by a request sent at `sent_at`
    /// gives it: validity until a lease from then, less the safety
    /// margin, less every step forward of the server's clock that `clock`
    /// saw revealed by a reading the request may predate. The server may
    /// have confirmed the lease by its clock before such a step, so the
    /// step took as much from its end on the server, however late the
    /// answer came. Every confirmation goes through here: a grant or a
    /// hand-over joining the keeper, an extension's answer, a session's
    /// renewal.
    fn confirmation(&self, clock: &clock::ClockWatch, sent_at: Instant) -> Confirmation {
        if self.process_bound {
            return Confirmation {
                until: None,
                stepped: false,
            };
        }
        let full = sent_at + self.options.lease() - self.options.safety_margin();
        let stepped = clock.stepped_since(sent_at);
        Confirmation {
            until: Some(full.checked_sub(stepped).unwrap_or(sent_at)),
            stepped: !stepped.is_zero(),
        }
    }

    /// Adds `held` to the schedule; returns its key and whether the keeper
    /// must be woken to look at it in time.
    fn schedule_lease(&self, held: Arc<HeldLease>, sent_at: Instant) -> (u64, bool) {
        let session = self.session_of(&held);
        let mut schedule = self.lock();
        let key = schedule.next_key;
        schedule.next_key += 1;
        // A session backend's grants are kept by renewing the session.
        let next_extension = if self.session.is_some() {
            far_future()
        } else {
            sent_at + self.options.extend_every()
        };
        // A lease confirmed before a step the keeper already saw (handed
        // over with its predecessor's confirmation) loses it as the leases
        // kept then did.
        let confirmation = self.confirmation(&schedule.clock, sent_at);
        let entry = Entry {
            held,
            next_extension,
            valid_until: None,
            in_flight: false,
            wake_at: sent_at,
            session,
            little_left_noted: false,
        };
        schedule.entries.insert(key, entry);
        schedule.added_since_look = true;
        schedule.queue.insert((sent_at, key));
        schedule.confirm(key, confirmation, Instant::now());
        let too_late = schedule.plan(key);
        (key, too_late)
    }

    /// How far ahead of time a lease may be extended, so that leases due
    /// close together share one batch.
    fn batch_window(&self) -> Duration {
        (self.options.extend_every() / 10).min(Duration::from_secs(1))
    }

    /// How soon to retry after an extension failed with an error.
    fn retry_delay(&self) -> Duration {
        (self.options.extend_every() / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// Ends the leases that ran out, picks the leases due for extension, and
    /// says when to look again.
    fn take_due(&self, now: Instant) -> (Vec<(u64, Arc<HeldLease>)>, Option<Instant>) {
        let horizon = now + self.batch_window();
        let mut schedule = self.lock();
        let mut due = Vec::new();
        let mut expired = Vec::new();
        let mut next_look: Option<Instant> = None;
        let mut touched = Vec::new();
        let mut endangered = Vec::new();
        for &(wake_at, key) in schedule.queue.iter() {
            if wake_at > horizon {
                next_look = Some(next_look.map_or(wake_at, |t| t.min(wake_at)));
                break;
            }
            let entry = &schedule.entries[&key];
            if entry.valid_until.is_some_and(|until| until <= now) {
                expired.push(key);
                continue;
            }
            let at_risk = entry
                .at_risk_from(schedule.at_risk_below)
                .is_some_and(|from| from <= now);
            if at_risk {
                endangered.push(key);
            }
            if !entry.in_flight && entry.next_extension <= horizon {
                touched.push(key);
            } else if !at_risk {
                // In flight, or only its validity is near: look again then.
                next_look = Some(next_look.map_or(wake_at, |t| t.min(wake_at)));
            }
        }
        for key in expired {
            if let Some(entry) = schedule.remove(key) {
                entry.held.end(LossReason::Expired);
            }
        }
        for key in endangered {
            let entry = schedule
                .entries
                .get_mut(&key)
                .expect("scheduled entries exist");
            entry.little_left_noted = true;
            entry.held.endanger(RiskReason::LittleLeft);
            schedule.reschedule(key);
            if !touched.contains(&key) {
                let wake_at = schedule.entries[&key].wake_at;
                next_look = Some(next_look.map_or(wake_at, |t| t.min(wake_at)));
            }
        }
        for key in touched {
            let entry = schedule
                .entries
                .get_mut(&key)
                .expect("scheduled entries exist");
            entry.in_flight = true;
            due.push((key, entry.held.clone()));
            schedule.reschedule(key);
            let wake_at = schedule.entries[&key].wake_at;
            next_look = Some(next_look.map_or(wake_at, |t| t.min(wake_at)));
        }
        if schedule.queue.is_empty() {
            // A task that takes and releases locks in a loop inserts one
            // lease after another, each due an extension period from now.
            // Looking again after that period means none of them has to
            // wake the keeper. Only a second look in a row that finds
            // nothing, with no lease added in between, lets it sleep until
            // woken: on a runtime of one thread, the keeper only ever
            // looks after the lease that woke it was released.
            next_look = if schedule.was_empty && !schedule.added_since_look {
                None
            } else {
                Some(now + self.options.extend_every())
            };
        }
        schedule.was_empty = schedule.queue.is_empty();
        schedule.added_since_look = false;
        schedule.planned = next_look;
        (due, next_look)
    }

    /// Puts back a lease that was due but busy being released or extended.
    fn skip(&self, key: u64) {
        let mut schedule = self.lock();
        if let Some(entry) = schedule.entries.get_mut(&key) {
            entry.in_flight = false;
            entry.next_extension = Instant::now() + self.retry_delay();
            schedule.reschedule(key);
        }
    }

    /// Applies the outcome of one extension sent at `sent_at`.
    /// Records how extending the lease under `key` went, and hands back
    /// the error of a failed extension.
    fn record(&self, key: u64, sent_at: Instant, outcome: Result<bool>) -> Option<Error> {
        metrics::extension(self.store, metrics::Extension::of(&outcome));
        if let Err(error) = &outcome {
            metrics::backend_error(self.store, "extend", error);
        }
        let mut schedule = self.lock();
        let confirmation = self.confirmation(&schedule.clock, sent_at);
        let Some(entry) = schedule.entries.get_mut(&key) else {
            return outcome.err();
        };
        entry.in_flight = false;
        let mut failure = None;
        match outcome {
            Ok(true) => {
                entry.next_extension = sent_at + self.options.extend_every();
                tracing::trace!(name = %entry.held.lease.name, "lease extended");
                schedule.confirm(key, confirmation, Instant::now());
            }
            Ok(false) => {
                if let Some(entry) = schedule.remove(key) {
                    entry.held.end(LossReason::Refused);
                }
                return None;
            }
            Err(error) => {
                entry.next_extension = Instant::now() + self.retry_delay();
                tracing::warn!(
                    name = %entry.held.lease.name,
                    %error,
                    "extension failed; retrying while the lease lasts"
                );
                // A lock bound to the process is not extended to be kept.
                if entry.valid_until.is_some() {
                    entry.held.endanger(RiskReason::ExtensionFailed);
                }
                failure = Some(error);
            }
        }
        schedule.reschedule(key);
        let too_late = schedule.plan(key);
        drop(schedule);
        if too_late {
            self.wake.notify_one();
        }
        failure
    }

    async fn extend_batch(self: Arc<Self>, batch: Vec<(u64, Arc<HeldLease>)>) {
        let Some((_, first)) = batch.first() else {
            return;
        };
        // Each call gets one operation timeout, so it carries only as many
        // leases as the backend extends within one. The calls run side by
        // side: sent one after another, the last calls of a large batch
        // would leave only after their leases ran out.
        let backend = first.backend.clone();
        let limit = backend.extend_many_limit().max(1);
        futures::stream::iter(batch.chunks(limit))
            .for_each_concurrent(EXTEND_CALLS_AT_ONCE, |chunk| {
                self.extend_chunk(&*backend, chunk)
            })
            .await;
    }

    /// Extends the leases of `chunk` in one call to `backend`.
    async fn extend_chunk(&self, backend: &dyn Backend, chunk: &[(u64, Arc<HeldLease>)]) {
        // Leases being released hold their lock; skip them (the release
        // removes them from the schedule).
        let mut guards = Vec::with_capacity(chunk.len());
        let mut keys = Vec::with_capacity(chunk.len());
        let mut leases: Vec<Lease> = Vec::with_capacity(chunk.len());
        for (key, held) in chunk {
            match held.ops.try_lock() {
                Ok(guard) => {
                    guards.push(guard);
                    keys.push(*key);
                    leases.push(held.lease.clone());
                }
                Err(_) => self.skip(*key),
            }
        }
        if leases.is_empty() {
            return;
        }
        let timeout = self.options.operation_timeout();
        let sent_at = Instant::now();
        let started = std::time::Instant::now();
        let batch = async { Ok(backend.extend_many(&leases).await) };
        let mut server_time = None;
        let outcomes = match bounded::keeper_call(timeout, "extend", batch).await {
            Ok(extended) if extended.outcomes.len() == leases.len() => {
                server_time = extended.server_time;
                extended.outcomes
            }
            Ok(_) => leases
                .iter()
                .map(|_| {
                    Err(Error::Backend {
                        backend: "core",
                        message: "extend_many returned the wrong number of results".into(),
                        source: None,
                    })
                })
                .collect(),
            Err(_) => leases
                .iter()
                .map(|_| Err(Error::operation_timeout("extend", timeout)))
                .collect(),
        };
        tracing::debug!(
            leases = leases.len(),
            duration_ms = started.elapsed().as_millis() as u64,
            "extended a batch of leases"
        );
        metrics::extension_call(self.store, started.elapsed());
        let received_at = Instant::now();
        drop(guards);
        let mut confirmed = HashSet::new();
        for (key, outcome) in keys.into_iter().zip(outcomes) {
            if matches!(outcome, Ok(true)) {
                confirmed.insert(key);
            }
            // The failure is logged there; nobody waits for this batch.
            let _ = self.record(key, sent_at, outcome);
        }
        if let Some(server_time) = server_time {
            let reading = clock::Reading {
                sent_at,
                received_at,
                server_time,
            };
            self.server_clock_read(reading, &confirmed);
        }
    }

    /// Takes in a reading of the server's clock, brought by an extension
    /// that confirmed the leases under `confirmed`. If it shows the
    /// server's clock stepped forward, every other lease is shortened by
    /// the step, and those it leaves no time are lost: they were confirmed
    /// before the step, by the server's clock as it was then. The leases
    /// just confirmed run from the clock as it is now.
    fn server_clock_read(&self, reading: clock::Reading, confirmed: &HashSet<u64>) {
        let now = Instant::now();
        let mut schedule = self.lock();
        let Some(step) = schedule.clock.observe(reading) else {
            return;
        };
        tracing::warn!(
            step_ms = step.as_millis() as u64,
            "the server's clock stepped forward: leases confirmed before the step end sooner by it"
        );
        let shortened: Vec<u64> = schedule
            .entries
            .keys()
            .filter(|key| !confirmed.contains(key))
            .copied()
            .collect();
        for key in shortened {
            let Some(entry) = schedule.entries.get_mut(&key) else {
                continue;
            };
            let Some(until) = entry.valid_until else {
                continue;
            };
            match until.checked_sub(step) {
                Some(until) if until > now => {
                    entry.set_valid_until(Some(until));
                    schedule.reschedule(key);
                }
                _ => {
                    if let Some(entry) = schedule.remove(key) {
                        entry.held.end(LossReason::ServerClockStepped);
                    }
                }
            }
        }
        // The leases left may now run out before the keeper's next look.
        schedule.planned = None;
        drop(schedule);
        self.wake.notify_one();
    }
}

/// Dropped with the keeper task. If the client still exists, the task did
/// not end of its own accord: its runtime shut down, and with it the
/// extensions in flight. Nothing extends the leases kept so far any more,
/// so their holders are told now rather than left believing they hold
/// their locks; the next insert starts a new task.
struct OnStop(Weak<Shared>);

impl Drop for OnStop {
    fn drop(&mut self) {
        let Some(shared) = self.0.upgrade() else {
            return;
        };
        // First, so that an insert from here on starts a new task; a lease
        // it inserts before the clear below is ended too, which is safe.
        shared.running.store(false, Ordering::Release);
        let orphaned = shared.lock().clear();
        for entry in orphaned.into_values() {
            entry.held.end(LossReason::KeeperStopped);
        }
    }
}

async fn run(weak: Weak<Shared>, wake: Arc<Notify>, _on_stop: OnStop) {
    loop {
        let next_look = {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            let now = Instant::now();
            let (due, next_look) = shared.take_due(now);
            if !due.is_empty() {
                crate::sync::spawn(shared.clone().extend_batch(due));
            }
            let (renew, next_look) = shared.take_session_due(now, next_look);
            if renew {
                crate::sync::spawn(shared.clone().renew_session());
            }
            next_look
        };
        match next_look {
            Some(at) => {
                tokio::select! {
                    () = wake.notified() => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::state::GrantState;
    use crate::backend::{AcquireRequest, Holder};
    use crate::claim::Claim;
    use crate::memory::MemoryBackend;
    use crate::name::LockName;

    fn keeper() -> Keeper {
        let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        Keeper::new(LockOptions::default(), &backend)
    }

    fn held() -> Arc<HeldLease> {
        let request = AcquireRequest {
            operation_timeout: Duration::from_secs(1),
            ..AcquireRequest::new(
                LockName::new("kept").unwrap(),
                Claim::Exclusive,
                LockOptions::DEFAULT_LEASE,
                Arc::new(Holder::this_process(None)),
            )
        };
        Arc::new(HeldLease::new(
            request.granted(1, GrantState::none()),
            Arc::new(MemoryBackend::new()),
            request.loss,
            false,
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_look_keeps_watch_for_one_extension_period_then_sleeps() {
        let keeper = keeper();
        let every = keeper.shared.options.extend_every();
        let now = Instant::now();
        let (due, next_look) = keeper.shared.take_due(now);
        assert!(due.is_empty());
        assert_eq!(next_look, Some(now + every));
        // A second look in a row that finds nothing sleeps until woken.
        let (_, next_look) = keeper.shared.take_due(now + every);
        assert_eq!(next_look, None);
    }

    /// On a runtime of one thread the keeper runs only when the task that
    /// took a lease waits, which it does after releasing it: every look
    /// finds nothing held, and the wake-up that started the keeper may
    /// bring a second look at once.
    #[tokio::test(start_paused = true)]
    async fn leases_released_before_each_look_stop_waking_the_keeper() {
        let keeper = keeper();
        let shared = &keeper.shared;
        let mut wake_ups = 0;
        for _ in 0..100 {
            tokio::time::advance(Duration::from_millis(1)).await;
            let (key, wake) = shared.schedule_lease(held(), Instant::now());
            shared.lock().remove(key);
            if wake {
                wake_ups += 1;
                let _ = shared.take_due(Instant::now());
                if wake_ups == 1 {
                    // The keeper task starts with the wake-up stored, and
                    // takes it as soon as it first waits.
                    let _ = shared.take_due(Instant::now());
                }
            }
        }
        assert!(wake_ups <= 2, "{wake_ups} of 100 leases woke the keeper");
    }

    #[tokio::test(start_paused = true)]
    async fn leases_taken_in_a_loop_do_not_wake_the_keeper() {
        let keeper = keeper();
        let shared = &keeper.shared;
        // The first lease finds the keeper asleep until woken.
        let (first, wake) = shared.schedule_lease(held(), Instant::now());
        assert!(wake);
        let _ = shared.take_due(Instant::now());
        shared.lock().remove(first);
        // The keeper looks while nothing is held, as happens between a
        // release and the next grant.
        tokio::time::advance(Duration::from_millis(1)).await;
        let _ = shared.take_due(Instant::now());
        for _ in 0..100 {
            tokio::time::advance(Duration::from_millis(1)).await;
            let (key, wake) = shared.schedule_lease(held(), Instant::now());
            assert!(!wake, "a lease due after the next look needs no wake-up");
            shared.lock().remove(key);
        }
        // A lease confirmed earlier is due sooner, and still wakes it.
        let earlier = Instant::now() - Duration::from_secs(5);
        let (_, wake) = shared.schedule_lease(held(), earlier);
        assert!(wake);
    }

    /// Lets `keeper` see its server's clock step `step` forward between a
    /// reading sent now and one sent `after` later; returns when the
    /// second was sent.
    async fn see_step(keeper: &Keeper, after: Duration, step: Duration) -> Instant {
        let server = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let first = Instant::now();
        tokio::time::advance(after).await;
        let second = Instant::now();
        for (at, server_time) in [(first, server), (second, server + after + step)] {
            let reading = clock::Reading {
                sent_at: at,
                received_at: at,
                server_time,
            };
            keeper.shared.server_clock_read(reading, &HashSet::new());
        }
        assert_eq!(keeper.shared.lock().clock.stepped_since(first), step);
        second
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_confirmation_sent_before_a_step_keeps_the_step() {
        let keeper = keeper();
        let shared = &keeper.shared;
        let options = &shared.options;
        let held = held();
        let (key, _) = shared.schedule_lease(held.clone(), Instant::now());
        let sent_at = Instant::now() + Duration::from_secs(1);
        tokio::time::advance(Duration::from_secs(1)).await;
        let step = Duration::from_secs(5);
        see_step(&keeper, Duration::from_secs(2), step).await;
        // The extension sent before the reading that showed the step is
        // answered only now.
        assert!(shared.record(key, sent_at, Ok(true)).is_none());
        let until = sent_at + options.lease() - options.safety_margin() - step;
        assert_eq!(held.deadline(), Some(until.into_std()));
        assert_eq!(held.loss(), None);
        // One sent after that reading runs from the clock as it is now.
        let later = Instant::now();
        assert!(shared.record(key, later, Ok(true)).is_none());
        let until = later + options.lease() - options.safety_margin();
        assert_eq!(held.deadline(), Some(until.into_std()));
        // And an older answer after it does not take that back.
        assert!(shared.record(key, sent_at, Ok(true)).is_none());
        assert_eq!(held.deadline(), Some(until.into_std()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_joining_with_a_confirmation_a_step_left_no_time_is_lost_at_once() {
        let keeper = keeper();
        let lease = keeper.shared.options.lease();
        let before = Instant::now();
        see_step(&keeper, Duration::from_secs(1), lease).await;
        // Handed over with a confirmation from before the step.
        let held = held();
        let (key, _) = keeper.shared.schedule_lease(held.clone(), before);
        assert_eq!(held.loss(), Some(LossReason::ServerClockStepped));
        assert!(!keeper.shared.lock().entries.contains_key(&key));
    }
}

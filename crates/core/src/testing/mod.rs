//! A backend that a test controls, for testing code that takes locks: lose
//! a held lock on demand, fail the next calls, slow every call down.
//!
//! [`TestBackend`] keeps its locks in memory (or forwards to any backend
//! given to [`TestBackend::wrapping`]) and works on Tokio's paused clock,
//! so a test can run leases, waits and extensions in virtual time. It is
//! also the one forwarding backend of distlock's own tests and benchmarks:
//! a [`Hook`] records, stalls, fails or changes any call, and the
//! backend's optional abilities (hand-overs, wake-ups, a session) can be
//! turned off or, for a session, emulated.
//!
//! For tests against a real server, a few helpers ([`unique_name`],
//! [`try_grant`], [`eventually`] and others) do what every such suite
//! needs.
//!
//! ```
//! use std::time::Duration;
//! use distlock_core::testing::{Failure, TestBackend};
//! use distlock_core::{LockClient, LossReason};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock_core::Error> {
//! let backend = TestBackend::new();
//! let client = LockClient::builder().build_shared(backend.shared())?;
//!
//! // Does the job stop when its lock is lost?
//! let guard = client.acquire("nightly-report").await?;
//! assert_eq!(backend.lose("nightly-report"), 1);
//! assert_eq!(guard.lost().await, LossReason::Detected);
//! drop(guard);
//!
//! // Does the caller survive a store that is briefly away?
//! backend.fail_next(2, Failure::Transient);
//! let again = client.acquire_with("nightly-report", Duration::from_secs(5)).await?;
//! again.release().await?;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::LossReporter;
use crate::backend::state::{GrantState, WaitState};
use crate::backend::wake::ReleaseWatch;
use crate::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, DelayedRelease, Extended, HandOver,
    HandOvers, Lease, LockInfo, Renewal, Session, SessionId, Wakeups,
};
use crate::error::{Error, Result};
use crate::memory::MemoryBackend;
use crate::name::{IntoLockName, LockName};
use crate::sync::{Mutex, MutexGuard};

mod hook;
mod mutant;
mod spoil;
mod support;

pub use hook::{Answer, Call, Hook, Operation};
pub use mutant::{MutantBackend, Mutation};
pub use spoil::{Spoil, SpoilGrant};
pub use support::{
    ADMIN_LIMIT, acquire_until_cancelled, assert_a_leaving_permit_holder_wakes_the_waiter,
    assert_fenced_writes, assert_invalid_config, assert_lost_to_a_restart, assert_still_held,
    eventually, free_loopback_port, quick_options, required_env, try_grant, unique_name,
    until_serving, waiting_request,
};

/// What the calls that [`TestBackend::fail_next`] fails answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// A transient [`Error::Backend`]: a store that is briefly away. Waits
    /// retry it until their deadline.
    Transient,
    /// [`Error::Denied`]: refused credentials or permissions. Waits end on
    /// it at once.
    Denied,
    /// [`Error::OperationTimeout`]: a call that did not answer.
    OperationTimeout,
}

impl Failure {
    fn error(self, operation: Operation) -> Error {
        let name = operation.name();
        match self {
            Self::Transient => Error::Backend {
                backend: "test",
                message: format!("{name} failed as the test asked"),
                source: None,
            },
            Self::Denied => Error::Denied {
                backend: "test",
                message: format!("{name} refused as the test asked"),
                source: None,
            },
            Self::OperationTimeout => Error::OperationTimeout {
                operation: name,
                after: Duration::ZERO,
            },
        }
    }
}

/// A backend under a test's control; see the [module docs](self).
///
/// Cheap to clone: clones share the locks, the controls and the hook.
#[derive(Debug, Clone)]
pub struct TestBackend {
    inner: Arc<dyn Backend>,
    controls: Arc<Mutex<Controls>>,
    hook: Option<Arc<dyn Hook>>,
    offered: Offered,
}

/// Which of the wrapped backend's optional abilities this one offers.
#[derive(Debug, Clone, Copy)]
struct Offered {
    hand_overs: bool,
    wakeups: bool,
    /// Grants hang on a session this backend keeps itself.
    emulated_session: bool,
    delayed_release: bool,
}

#[derive(Debug, Default)]
struct Controls {
    /// How many of the next calls fail, and how.
    failures: Option<(usize, Failure)>,
    /// How long every call waits before it is made.
    delay: Duration,
    /// The grants made through this backend and not yet released, by name.
    grants: HashMap<LockName, Vec<Grant>>,
    /// How many calls of each kind were made, failed ones included.
    calls: HashMap<Operation, u64>,
    /// The emulated session, while there is one; the next grant starts
    /// one when there is none.
    session: Option<SessionId>,
    /// The number of the last emulated session started.
    sessions_started: u64,
    /// Emulated sessions ended and not yet reported by a renewal.
    sessions_ended: Vec<SessionId>,
}

/// A grant made through the backend, with the signal that reports its loss.
#[derive(Debug)]
struct Grant {
    lease: Lease,
    loss: LossReporter,
    /// The emulated session it was granted on.
    session: Option<SessionId>,
}

impl Default for TestBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl TestBackend {
    /// A backend with its locks in memory.
    pub fn new() -> Self {
        Self::wrapping(Arc::new(MemoryBackend::new()))
    }

    /// A backend that forwards every call to `inner`, with the same
    /// controls: a real backend made to fail or slow down on demand. It
    /// offers the abilities `inner` offers.
    pub fn wrapping(inner: Arc<dyn Backend>) -> Self {
        Self {
            inner,
            controls: Arc::default(),
            hook: None,
            offered: Offered {
                hand_overs: true,
                wakeups: true,
                emulated_session: false,
                delayed_release: true,
            },
        }
    }

    /// This backend with `hook` run around every call.
    pub fn with_hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// This backend without one-step hand-overs: a lock passes between a
    /// client's tasks by a release and a new grant.
    pub fn without_hand_overs(mut self) -> Self {
        self.offered.hand_overs = false;
        self
    }

    /// This backend without delayed releases: an acquire with
    /// [`min_hold`](crate::AcquireOptions::min_hold) is refused.
    pub fn without_delayed_release(mut self) -> Self {
        self.offered.delayed_release = false;
        self
    }

    /// This backend without reports of releases: waiters poll.
    pub fn without_wakeups(mut self) -> Self {
        self.offered.wakeups = false;
        self
    }

    /// This backend with its grants on one session, as etcd keeps a
    /// client's keys on one lease: the client renews the session instead of
    /// extending grants, and a renewal extends every grant made on the
    /// current session. See [`end_session`](Self::end_session).
    pub fn with_session(mut self) -> Self {
        self.offered.emulated_session = true;
        self
    }

    /// This backend as a client takes it:
    /// `LockClient::builder().build_shared(backend.shared())`.
    pub fn shared(&self) -> Arc<dyn Backend> {
        Arc::new(self.clone())
    }

    /// Makes the next `calls` calls (of any kind: acquire, extend,
    /// release, list, …) fail with `failure`, then lets calls through
    /// again. Replaces what an earlier call asked.
    pub fn fail_next(&self, calls: usize, failure: Failure) {
        self.controls().failures = (calls > 0).then_some((calls, failure));
    }

    /// Makes every call wait `delay` before it is made (zero: none). On
    /// Tokio's paused clock the delay passes in virtual time.
    pub fn delay_calls(&self, delay: Duration) {
        self.controls().delay = delay;
    }

    /// Ends every grant of `name`: it is released on the backend, and each
    /// guard's [`lost`](crate::LockGuard::lost) resolves at once with
    /// [`LossReason::Detected`](crate::LossReason::Detected). Returns how
    /// many grants were lost (zero for a name nobody holds, or an invalid
    /// one).
    pub fn lose(&self, name: impl IntoLockName) -> usize {
        let Ok(name) = name.into_lock_name() else {
            return 0;
        };
        let grants = self.controls().grants.remove(&name).unwrap_or_default();
        let live: Vec<_> = grants
            .into_iter()
            .filter(|grant| !grant.loss.is_ended())
            .collect();
        // The guards learn first, so that nobody is granted the name while
        // a guard still believes it holds it.
        for grant in &live {
            grant.loss.report();
        }
        let lost = live.len();
        if lost > 0 {
            let inner = self.inner.clone();
            let leases: Vec<Lease> = live.into_iter().map(|grant| grant.lease).collect();
            // The memory backend answers at once; a wrapped one is asked in
            // the background, as a store would end a lease by itself. Each
            // lease by its identity: a grant made since the loss was
            // reported is not one of them, and stays.
            crate::sync::spawn(async move {
                for lease in &leases {
                    let _ = inner.release(lease).await;
                }
            });
        }
        lost
    }

    /// Ends the session of a backend made [`with_session`](Self::with_session):
    /// its grants are released on the wrapped backend, and the next renewal
    /// reports that the session ended, so each holder learns at that
    /// renewal that its lock was lost, as an etcd client learns that its
    /// lease expired. The next grant starts a new session, whose grants
    /// the end of this one leaves alone.
    pub fn end_session(&self) {
        let grants: Vec<Lease> = {
            let mut controls = self.controls();
            let Some(ended) = controls.session.take() else {
                return;
            };
            controls.sessions_ended.push(ended);
            let mut ended_grants = Vec::new();
            for grants in controls.grants.values_mut() {
                let (gone, kept) = std::mem::take(grants)
                    .into_iter()
                    .partition(|grant| grant.session == Some(ended));
                *grants = kept;
                ended_grants.extend(gone.into_iter().map(|grant: Grant| grant.lease));
            }
            controls.grants.retain(|_, grants| !grants.is_empty());
            ended_grants
        };
        let inner = self.inner.clone();
        crate::sync::spawn(async move {
            for lease in grants {
                let _ = inner.release(&lease).await;
            }
        });
    }

    /// How many calls this backend was asked to make, failed ones
    /// included.
    pub fn calls(&self) -> u64 {
        self.controls().calls.values().sum()
    }

    /// How many calls of one kind this backend was asked to make, failed
    /// ones included. An extension of a batch of leases is one call.
    pub fn calls_of(&self, operation: Operation) -> u64 {
        self.controls()
            .calls
            .get(&operation)
            .copied()
            .unwrap_or_default()
    }

    fn controls(&self) -> MutexGuard<'_, Controls> {
        self.controls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts the call, waits the delay, answers the failure due if one is,
    /// then runs the hook's `before`.
    async fn enter(&self, call: Call<'_>) -> Result<()> {
        let operation = call.operation();
        let (delay, failure) = {
            let mut controls = self.controls();
            *controls.calls.entry(operation).or_default() += 1;
            // The end of a wait is clean-up that core only logs: it spends
            // none of the failures asked for.
            let failure = match &mut controls.failures {
                Some((left, failure)) if operation != Operation::EndWait => {
                    let failure = *failure;
                    *left -= 1;
                    if *left == 0 {
                        controls.failures = None;
                    }
                    Some(failure)
                }
                _ => None,
            };
            (controls.delay, failure)
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if let Some(failure) = failure {
            return Err(failure.error(operation));
        }
        match &self.hook {
            Some(hook) => hook.before(call).await,
            None => Ok(()),
        }
    }

    /// Runs the hook's `after` on `answer`.
    async fn leave(&self, answer: Answer<'_>) {
        if let Some(hook) = &self.hook {
            hook.after(answer).await;
        }
    }

    fn remember(&self, request: &AcquireRequest, fencing_token: u64, state: &GrantState) {
        let lease = request.granted(fencing_token, state.clone());
        let mut controls = self.controls();
        let session = self.offered.emulated_session.then(|| {
            let Controls {
                session,
                sessions_started,
                ..
            } = &mut *controls;
            *session.get_or_insert_with(|| {
                *sessions_started += 1;
                SessionId(*sessions_started)
            })
        });
        let grants = controls.grants.entry(request.name.clone()).or_default();
        grants.retain(|grant| !grant.loss.is_ended());
        grants.push(Grant {
            lease,
            loss: request.loss.clone(),
            session,
        });
    }

    fn forget(&self, lease: &Lease) {
        let mut controls = self.controls();
        if let Some(grants) = controls.grants.get_mut(&lease.name) {
            grants.retain(|grant| grant.lease.id != lease.id);
            if grants.is_empty() {
                controls.grants.remove(&lease.name);
            }
        }
    }

    /// Extends `leases` through the hooks, in one call of the inner
    /// backend, whose reading of the server's clock comes back too.
    async fn extend_through(&self, leases: &[Lease]) -> Extended {
        let mut server_time = None;
        let mut outcomes = match self.enter(Call::Extend(leases)).await {
            Err(error) => {
                let mut outcomes: Vec<_> = leases[1..].iter().map(|_| Err(echo(&error))).collect();
                outcomes.insert(0, Err(error));
                outcomes
            }
            Ok(()) => {
                let extended = self.inner.extend_many(leases).await;
                server_time = extended.server_time;
                extended.outcomes
            }
        };
        self.leave(Answer::Extend {
            leases,
            outcomes: &mut outcomes,
        })
        .await;
        Extended::new(outcomes, server_time)
    }
}

/// An error for the other leases of a batch that failed as a whole with
/// `error`: transient exactly when `error` is, with its message.
fn echo(error: &Error) -> Error {
    match error {
        Error::OperationTimeout { operation, after } => Error::OperationTimeout {
            operation,
            after: *after,
        },
        Error::Denied { backend, .. } => Error::Denied {
            backend,
            message: error.to_string(),
            source: None,
        },
        _ if error.is_transient() => Error::Backend {
            backend: "test",
            message: error.to_string(),
            source: None,
        },
        _ => Error::Unsupported(error.to_string()),
    }
}

#[async_trait]
impl Backend for TestBackend {
    fn store_name(&self) -> &'static str {
        self.inner.store_name()
    }

    fn capabilities(&self) -> Capabilities {
        // Calls are bounded by the client: a delay longer than the
        // operation timeout is a timeout, as it would be on a real store.
        self.inner.capabilities().with_bounds_calls(false)
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        self.enter(Call::Acquire(request)).await?;
        let mut outcome = self.inner.try_acquire(request, wait).await;
        self.leave(Answer::Acquire {
            request,
            outcome: &mut outcome,
        })
        .await;
        if let Ok(Attempt::Acquired {
            fencing_token,
            state,
        }) = &outcome
        {
            self.remember(request, *fencing_token, state);
        }
        outcome
    }

    async fn end_wait(&self, request: &AcquireRequest, wait: WaitState) -> Result<()> {
        self.enter(Call::EndWait(request)).await?;
        let mut outcome = self.inner.end_wait(request, wait).await;
        self.leave(Answer::EndWait(&mut outcome)).await;
        outcome
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        if leases.is_empty() {
            return Extended::new(Vec::new(), None);
        }
        self.extend_through(leases).await
    }

    fn extend_many_limit(&self) -> usize {
        self.inner.extend_many_limit()
    }

    async fn server_info(&self, limit: Duration) -> Result<crate::backend::ServerInfo> {
        self.inner.server_info(limit).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.enter(Call::Release(lease)).await?;
        let mut outcome = self.inner.release(lease).await;
        self.leave(Answer::Release {
            lease,
            outcome: &mut outcome,
        })
        .await;
        if outcome.is_ok() {
            self.forget(lease);
        }
        outcome
    }

    async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        self.enter(Call::List).await?;
        let mut outcome = self.inner.list(limit).await;
        self.leave(Answer::List(&mut outcome)).await;
        outcome
    }

    async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool> {
        self.enter(Call::ForceRelease(name)).await?;
        let mut outcome = self.inner.force_release(name, limit).await;
        self.leave(Answer::ForceRelease {
            name,
            outcome: &mut outcome,
        })
        .await;
        outcome
    }

    /// The inner backend's abilities, each through the hooks where this
    /// backend offers it; the record of terms is the inner backend's,
    /// called directly: no hook sees it. No later release with an
    /// emulated session, whose renewals extend every grant, released ones
    /// too.
    fn abilities(&self) -> Abilities<'_> {
        let inner = self.inner.abilities();
        let mut abilities = Abilities::none();
        if inner.hand_overs.is_some() && self.offered.hand_overs {
            abilities = abilities.with_hand_overs(self);
        }
        if self.offered.emulated_session || inner.session.is_some() {
            abilities = abilities.with_session(self);
        }
        if inner.wakeups.is_some() && self.offered.wakeups {
            abilities = abilities.with_wakeups(self);
        }
        if let Some(term_log) = inner.term_log {
            abilities = abilities.with_term_log(term_log);
        }
        if let Some(waiters) = inner.waiters {
            abilities = abilities.with_waiters(waiters);
        }
        if let crate::backend::Resuming::By(resumes) = inner.resumes {
            abilities = abilities.with_resumes(resumes);
        }
        let releases_later = crate::engine::min_hold::check_release_later(&*self.inner).is_ok();
        if self.offered.delayed_release && !self.offered.emulated_session && releases_later {
            abilities.with_delayed_release(self)
        } else {
            abilities.without_delayed_release(
                "this test backend keeps no lock after its release (min_hold)",
            )
        }
    }

    async fn close(&self) -> Result<()> {
        self.enter(Call::Close).await?;
        let mut outcome = self.inner.close().await;
        self.leave(Answer::Close(&mut outcome)).await;
        outcome
    }
}

#[async_trait]
impl DelayedRelease for TestBackend {
    async fn release_after(&self, lease: &Lease, remaining: Duration) -> Result<bool> {
        self.enter(Call::DelayedRelease { lease, remaining })
            .await?;
        let mut outcome =
            crate::engine::min_hold::release_later(&*self.inner, lease, remaining).await;
        self.leave(Answer::DelayedRelease {
            lease,
            outcome: &mut outcome,
        })
        .await;
        if outcome.is_ok() {
            self.forget(lease);
        }
        outcome
    }
}

#[async_trait]
impl HandOvers for TestBackend {
    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        self.enter(Call::HandOver { lease, next }).await?;
        let mut outcome = match self.inner.abilities().hand_overs {
            Some(inner) => inner.hand_over(lease, next).await,
            None => Err(Error::Unsupported(
                "the wrapped backend no longer hands locks over".into(),
            )),
        };
        self.leave(Answer::HandOver {
            lease,
            next,
            outcome: &mut outcome,
        })
        .await;
        if let Ok(outcome) = &outcome {
            self.forget(lease);
            if let HandOver::Granted {
                fencing_token,
                state,
                ..
            } = outcome
            {
                self.remember(next, *fencing_token, state);
            }
        }
        outcome
    }
}

#[async_trait]
impl Session for TestBackend {
    fn session_of(&self, lease: &Lease) -> Option<SessionId> {
        if !self.offered.emulated_session {
            return self.inner.abilities().session?.session_of(lease);
        }
        let controls = self.controls();
        let grants = controls.grants.get(&lease.name)?;
        let grant = grants.iter().find(|grant| grant.lease.id == lease.id)?;
        grant.session
    }

    async fn renew(&self) -> Result<Renewal> {
        self.enter(Call::RenewSession).await?;
        let mut outcome = if self.offered.emulated_session {
            self.renew_emulated().await
        } else {
            match self.inner.abilities().session {
                Some(inner) => inner.renew().await,
                None => Err(Error::Unsupported(
                    "the wrapped backend no longer keeps a session".into(),
                )),
            }
        };
        self.leave(Answer::RenewSession(&mut outcome)).await;
        outcome
    }
}

impl TestBackend {
    /// Extends every grant of the emulated session on the wrapped backend,
    /// and reports the sessions ended since the last renewal.
    async fn renew_emulated(&self) -> Result<Renewal> {
        let (session, leases) = {
            let controls = self.controls();
            let leases: Vec<Lease> = controls
                .grants
                .values()
                .flatten()
                .filter(|grant| grant.session.is_some() && grant.session == controls.session)
                .map(|grant| grant.lease.clone())
                .collect();
            (controls.session, leases)
        };
        if !leases.is_empty() {
            for outcome in self.inner.extend_many(&leases).await.outcomes {
                outcome?;
            }
        }
        // Taken only once the renewal succeeded, so that none is unheard.
        let ended = std::mem::take(&mut self.controls().sessions_ended);
        let renewal = session.map_or_else(Renewal::nothing, Renewal::of);
        Ok(ended.into_iter().fold(renewal, Renewal::with_ended))
    }
}

impl Wakeups for TestBackend {
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        if let Some(hook) = &self.hook
            && !hook.watches(name)
        {
            return None;
        }
        self.inner.abilities().wakeups?.watch(name)
    }
}

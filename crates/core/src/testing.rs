//! A backend that a test controls, for testing code that takes locks: lose
//! a held lock on demand, fail the next calls, slow every call down.
//!
//! [`TestBackend`] keeps its locks in memory (or forwards to any backend
//! given to [`TestBackend::wrapping`]) and works on Tokio's paused clock,
//! so a test can run leases, waits and extensions in virtual time.
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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{
    AcquireRequest, Attempt, Backend, Capabilities, HandOver, Lease, LeaseId, LockInfo,
};
use crate::error::{Error, Result};
use crate::lease::LossReporter;
use crate::memory::MemoryBackend;
use crate::name::{IntoLockName, LockName};
use crate::state::WaitState;
use crate::wake::ReleaseWatch;

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
    fn error(self, operation: &'static str) -> Error {
        match self {
            Self::Transient => Error::Backend {
                backend: "test",
                message: format!("{operation} failed as the test asked"),
                source: None,
            },
            Self::Denied => Error::Denied {
                backend: "test",
                message: format!("{operation} refused as the test asked"),
                source: None,
            },
            Self::OperationTimeout => Error::OperationTimeout {
                operation,
                after: Duration::ZERO,
            },
        }
    }
}

/// A backend under a test's control; see the [module docs](self).
///
/// Cheap to clone: clones share the locks and the controls.
#[derive(Debug, Clone)]
pub struct TestBackend {
    inner: Arc<dyn Backend>,
    controls: Arc<Mutex<Controls>>,
}

#[derive(Debug, Default)]
struct Controls {
    /// How many of the next calls fail, and how.
    failures: Option<(usize, Failure)>,
    /// How long every call waits before it is made.
    delay: Duration,
    /// The loss reporters of the grants made through this backend, by name.
    grants: HashMap<LockName, Vec<(LeaseId, LossReporter)>>,
    /// How many calls were made, failed ones included.
    calls: u64,
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
    /// controls: a real backend made to fail or slow down on demand.
    pub fn wrapping(inner: Arc<dyn Backend>) -> Self {
        Self {
            inner,
            controls: Arc::default(),
        }
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
            .filter(|(_, reporter)| !reporter.is_ended())
            .collect();
        // The guards learn first, so that nobody is granted the name while
        // a guard still believes it holds it.
        for (_, reporter) in &live {
            reporter.report();
        }
        if !live.is_empty() {
            let inner = self.inner.clone();
            let name = name.clone();
            // The memory backend answers at once; a wrapped one is asked in
            // the background, as a store would end a lease by itself.
            tokio::spawn(async move { inner.force_release(&name).await });
        }
        live.len()
    }

    /// How many calls this backend was asked to make, failed ones
    /// included.
    pub fn calls(&self) -> u64 {
        self.controls().calls
    }

    fn controls(&self) -> std::sync::MutexGuard<'_, Controls> {
        self.controls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts the call, waits the delay, and answers the failure due, if
    /// one is.
    async fn enter(&self, operation: &'static str) -> Result<()> {
        let (delay, failure) = {
            let mut controls = self.controls();
            controls.calls += 1;
            let failure = match &mut controls.failures {
                Some((left, failure)) => {
                    let failure = *failure;
                    *left -= 1;
                    if *left == 0 {
                        controls.failures = None;
                    }
                    Some(failure)
                }
                None => None,
            };
            (controls.delay, failure)
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        failure.map_or(Ok(()), |failure| Err(failure.error(operation)))
    }

    fn remember(&self, request: &AcquireRequest) {
        let mut controls = self.controls();
        let grants = controls.grants.entry(request.name.clone()).or_default();
        grants.retain(|(_, reporter)| !reporter.is_ended());
        grants.push((request.lease_id, request.loss.clone()));
    }

    fn forget(&self, lease: &Lease) {
        let mut controls = self.controls();
        if let Some(grants) = controls.grants.get_mut(&lease.name) {
            grants.retain(|(id, _)| *id != lease.id);
            if grants.is_empty() {
                controls.grants.remove(&lease.name);
            }
        }
    }
}

#[async_trait]
impl Backend for TestBackend {
    fn capabilities(&self) -> Capabilities {
        // Calls are bounded by the client: a delay longer than the
        // operation timeout is a timeout, as it would be on a real store.
        self.inner.capabilities().with_bounds_calls(false)
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        self.enter("acquire").await?;
        let attempt = self.inner.try_acquire(request, wait).await?;
        if matches!(attempt, Attempt::Acquired { .. }) {
            self.remember(request);
        }
        Ok(attempt)
    }

    async fn end_wait(&self, request: &AcquireRequest, wait: WaitState) -> Result<()> {
        self.inner.end_wait(request, wait).await
    }

    async fn extend(&self, lease: &Lease) -> Result<bool> {
        self.enter("extend").await?;
        self.inner.extend(lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.enter("release").await?;
        let released = self.inner.release(lease).await?;
        self.forget(lease);
        Ok(released)
    }

    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        self.enter("hand-over").await?;
        let outcome = self.inner.hand_over(lease, next).await?;
        self.forget(lease);
        if matches!(outcome, HandOver::Granted { .. }) {
            self.remember(next);
        }
        Ok(outcome)
    }

    async fn renew_session(&self) -> Result<bool> {
        self.enter("renew session").await?;
        self.inner.renew_session().await
    }

    fn extend_many_limit(&self) -> usize {
        self.inner.extend_many_limit()
    }

    async fn list(&self) -> Result<Vec<LockInfo>> {
        self.enter("list").await?;
        self.inner.list().await
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        self.enter("force release").await?;
        self.inner.force_release(name).await
    }

    fn watch_releases(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.inner.watch_releases(name)
    }
}

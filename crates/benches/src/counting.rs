//! A backend wrapper that counts the calls core makes, for scenarios where
//! the server cannot count commands itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use distlock::backend::{
    AcquireRequest, Attempt, Backend, Capabilities, HandOver, Lease, ReleaseWatch, WaitState,
};
use distlock::{LockInfo, LockName, Result};

/// Calls made through a [`Counting`] backend.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    pub(crate) acquire: AtomicU64,
    pub(crate) extend_batches: AtomicU64,
    pub(crate) extended_leases: AtomicU64,
    /// Renewals of a session backend's session (etcd), which keep every
    /// lease of the client at once.
    pub(crate) session_renewals: AtomicU64,
    pub(crate) release: AtomicU64,
}

impl Calls {
    pub(crate) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Passes every call to `inner`, counting it.
#[derive(Debug)]
pub(crate) struct Counting {
    inner: Arc<dyn Backend>,
    pub(crate) calls: Arc<Calls>,
}

impl Counting {
    pub(crate) fn new(inner: Arc<dyn Backend>) -> Self {
        Self {
            inner,
            calls: Arc::default(),
        }
    }
}

#[distlock::backend::async_trait]
impl Backend for Counting {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        self.calls.acquire.fetch_add(1, Ordering::Relaxed);
        self.inner.try_acquire(request, wait).await
    }

    async fn end_wait(&self, request: &AcquireRequest, wait: WaitState) -> Result<()> {
        self.inner.end_wait(request, wait).await
    }

    async fn extend(&self, lease: &Lease) -> Result<bool> {
        self.calls.extend_batches.fetch_add(1, Ordering::Relaxed);
        self.calls.extended_leases.fetch_add(1, Ordering::Relaxed);
        self.inner.extend(lease).await
    }

    fn extend_many_limit(&self) -> usize {
        self.inner.extend_many_limit()
    }

    async fn extend_many(&self, leases: &[Lease]) -> Vec<Result<bool>> {
        self.calls.extend_batches.fetch_add(1, Ordering::Relaxed);
        self.calls
            .extended_leases
            .fetch_add(leases.len() as u64, Ordering::Relaxed);
        self.inner.extend_many(leases).await
    }

    // Core renews a session backend's leases only through this call; the
    // trait's default would refuse it, and every lease would be lost.
    async fn renew_session(&self) -> Result<bool> {
        self.calls.session_renewals.fetch_add(1, Ordering::Relaxed);
        self.inner.renew_session().await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.calls.release.fetch_add(1, Ordering::Relaxed);
        self.inner.release(lease).await
    }

    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        self.calls.acquire.fetch_add(1, Ordering::Relaxed);
        self.calls.release.fetch_add(1, Ordering::Relaxed);
        self.inner.hand_over(lease, next).await
    }

    async fn list(&self) -> Result<Vec<LockInfo>> {
        self.inner.list().await
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        self.inner.force_release(name).await
    }

    fn watch_releases(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.inner.watch_releases(name)
    }
}

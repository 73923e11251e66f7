//! The keeper and a backend that extends lease by lease.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireRequest, Attempt, Backend, Capabilities, Lease, LockClient, LockInfo, LockName,
    LockOptions, MemoryBackend, Result, WaitState,
};

/// The memory backend with extensions that take 30 ms each, and no bulk
/// extension of its own.
#[derive(Debug, Default)]
struct SlowExtensions {
    inner: MemoryBackend,
}

#[async_trait]
impl Backend for SlowExtensions {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        self.inner.try_acquire(request, wait).await
    }

    async fn extend(&self, lease: &Lease) -> Result<bool> {
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.inner.extend(lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }

    async fn list(&self) -> Result<Vec<LockInfo>> {
        self.inner.list().await
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        self.inner.force_release(name).await
    }
}

/// Many leases fall due together, more than such a backend extends within
/// one operation timeout if given them all at once; the keeper hands them
/// over a few at a time, each call with its own timeout, so none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_a_backend_without_bulk_extension_are_all_kept() {
    const LOCKS: usize = 200;
    let options = LockOptions::builder()
        .lease(Duration::from_millis(900))
        .operation_timeout(Duration::from_millis(80))
        .build()
        .unwrap();
    let client = LockClient::new(Arc::new(SlowExtensions::default()), options);
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        let name = LockName::new(format!("slow-{i}")).unwrap();
        guards.push(client.acquire_with(&name, Duration::ZERO).await.unwrap());
    }
    // Three leases' worth: every lease was extended several times.
    tokio::time::sleep(Duration::from_millis(2700)).await;
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    assert_eq!(lost, 0, "{lost} of {LOCKS} leases were lost");
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
}

//! Releases wake waiters; forced releases reach the holder.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireRequest, Attempt, Backend, Capabilities, HandOver, Lease, LockClient, LockInfo,
    LockName, LockOptions, LossReason, ReleaseWatch, Result, WaitState,
};
use distlock_mongodb::MongoBackend;

use crate::common::*;

/// How long a woken waiter may take to get a released lock: far below the
/// 30 s leases and 25 s waits of these tests, so that only a wake-up (or
/// polling) can meet it, never the lease's end or the waiter's last attempt
/// at its deadline.
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

/// How long the waiters of these tests are willing to wait.
const PATIENCE: Duration = Duration::from_secs(25);

/// The lock a waiter got once the holder released it.
async fn woken(
    waiter: tokio::task::JoinHandle<Result<distlock_core::LockGuard>>,
) -> distlock_core::LockGuard {
    tokio::time::timeout(WOKEN_WITHIN, waiter)
        .await
        .expect("the waiter is woken by the release, long before the lease ends")
        .unwrap()
        .expect("the waiter gets the lock")
}

#[tokio::test]
async fn a_release_wakes_a_waiter_in_another_client() {
    let url = shared_url();
    let collection = unique("wake");
    let holder_backend = backend_at(&url, &collection).await;
    let waiter_backend = backend_at(&url, &collection).await;
    assert!(waiter_backend.capabilities().release_wakeups);
    let long = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .build()
        .unwrap();
    let holder = client(holder_backend, long.clone());
    let waiter = client(waiter_backend, long);
    let name = lock_name("wake");
    let guard = holder.acquire(&name, Duration::from_secs(5)).await.unwrap();
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move { waiter.acquire(&name, Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(guard.release().await.unwrap());
    let taken = woken(waiting).await;
    assert!(taken.release().await.unwrap());
}

#[tokio::test]
async fn many_waiters_on_many_names_are_all_woken() {
    let url = shared_url();
    let collection = unique("wake-many");
    let holder = client(backend_at(&url, &collection).await, LockOptions::default());
    let waiter = client(backend_at(&url, &collection).await, LockOptions::default());
    let names: Vec<_> = (0..8).map(|i| lock_name(&format!("many{i}"))).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(holder.acquire(name, Duration::from_secs(5)).await.unwrap());
    }
    let mut waiting = Vec::new();
    for name in &names {
        let waiter = waiter.clone();
        let name = name.clone();
        waiting.push(tokio::spawn(async move {
            waiter.acquire(&name, PATIENCE).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
    for waiting in waiting {
        let taken = woken(waiting).await;
        assert!(taken.release().await.unwrap());
    }
}

#[tokio::test]
async fn a_forced_release_makes_the_holder_report_the_loss() {
    let url = shared_url();
    let collection = unique("force");
    let holder = client(
        backend_at(&url, &collection).await,
        short_lease(Duration::from_secs(3)),
    );
    let admin = backend_at(&url, &collection).await;
    let name = lock_name("force");
    let guard = holder.acquire(&name, Duration::from_secs(5)).await.unwrap();
    assert!(admin.force_release(&name).await.unwrap());
    assert!(!admin.force_release(&name).await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(30), guard.lost())
        .await
        .expect("the holder learns of the forced release");
    assert_eq!(reason, LossReason::Refused);
    assert!(!guard.release().await.unwrap());
    assert!(admin.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn without_change_streams_waiters_poll() {
    let server = OwnServer::start_with(&["--standalone"]);
    let url = server.url();
    let collection = unique("standalone");
    let backend = backend_at(&url, &collection).await;
    assert!(!backend.capabilities().release_wakeups);
    assert!(backend.watch_releases(&lock_name("x")).is_none());
    let long = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .build()
        .unwrap();
    let holder = client(backend, long.clone());
    let waiter = client(backend_at(&url, &collection).await, long);
    let name = lock_name("poll");
    let guard = holder.acquire(&name, Duration::from_secs(5)).await.unwrap();
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move { waiter.acquire(&name, PATIENCE).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(guard.release().await.unwrap());
    let taken = woken(waiting).await;
    assert!(taken.release().await.unwrap());
}

/// Counts acquisition attempts.
#[derive(Debug)]
struct Attempts {
    inner: Arc<MongoBackend>,
    count: AtomicUsize,
}

#[async_trait]
impl Backend for Attempts {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(request, wait).await
    }
    async fn extend(&self, lease: &Lease) -> Result<bool> {
        self.inner.extend(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }
    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
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

#[tokio::test]
async fn extensions_wake_no_waiter() {
    let url = shared_url();
    let collection = unique("quiet");
    // The holder extends ten times a second; its lease is far from ending.
    let busy = LockOptions::builder()
        .lease(Duration::from_secs(20))
        .extend_every(Duration::from_millis(100))
        .build()
        .unwrap();
    let holder = client(backend_at(&url, &collection).await, busy);
    let attempts = Arc::new(Attempts {
        inner: backend_at(&url, &collection).await,
        count: AtomicUsize::new(0),
    });
    let waiter = LockClient::new(attempts.clone(), LockOptions::default());
    let name = lock_name("quiet");
    let guard = holder.acquire(&name, Duration::from_secs(5)).await.unwrap();
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move { waiter.acquire(&name, PATIENCE).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The first attempt, and at most one more when the change stream starts
    // covering the name; none for the extensions in between.
    let during = attempts.count.load(Ordering::SeqCst);
    assert!((1..=2).contains(&during), "{during} attempts while held");
    assert!(guard.release().await.unwrap());
    let taken = woken(waiting).await;
    assert!(taken.release().await.unwrap());
}

#[tokio::test]
async fn waiting_for_a_new_name_while_the_stream_polls_keeps_every_wake_up() {
    let url = shared_url();
    let collection = unique("rebuild");
    let long = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .build()
        .unwrap();
    let holder = client(backend_at(&url, &collection).await, long.clone());
    let waiters = client(backend_at(&url, &collection).await, long);
    let first = lock_name("first");
    let second = lock_name("second");
    let first_guard = holder
        .acquire(&first, Duration::from_secs(5))
        .await
        .unwrap();
    let second_guard = holder
        .acquire(&second, Duration::from_secs(5))
        .await
        .unwrap();
    let wait_for = |name: distlock_core::LockName| {
        let waiters = waiters.clone();
        tokio::spawn(async move { waiters.acquire(&name, PATIENCE).await })
    };
    let first_waiter = wait_for(first.clone());
    // Let the stream for the first name settle into polling, then make it
    // take in a second name.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second_waiter = wait_for(second.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(second_guard.release().await.unwrap());
    let taken = woken(second_waiter).await;
    assert!(taken.release().await.unwrap());
    assert!(first_guard.release().await.unwrap());
    let taken = woken(first_waiter).await;
    assert!(taken.release().await.unwrap());
}

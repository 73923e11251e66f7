//! Core logic on the in-memory backend, instrumented to count and stall
//! backend calls: coalescing, batched extension, loss detection and
//! cancel safety.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireRequest, Attempt, Backend, Capabilities, Error, Lease, LockClient, LockInfo, LockName,
    LockOptions, LossReason, MemoryBackend, ReleaseWatch, Result,
};

/// The memory backend with counters, a switch that makes extensions hang,
/// and an optional delay between granting and answering.
#[derive(Debug, Default)]
struct Instrumented {
    inner: MemoryBackend,
    attempts: AtomicUsize,
    extend_calls: AtomicUsize,
    extended_leases: AtomicUsize,
    stall_extensions: AtomicBool,
    reply_delay_ms: AtomicUsize,
    wakeups: bool,
}

impl Instrumented {
    fn with_wakeups() -> Self {
        Self {
            wakeups: true,
            ..Self::default()
        }
    }
}

#[async_trait]
impl Backend for Instrumented {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_release_wakeups(self.wakeups)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Attempt> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let attempt = self.inner.try_acquire(request).await;
        let delay = self.reply_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay as u64)).await;
        }
        attempt
    }

    async fn extend(&self, lease: &Lease) -> Result<bool> {
        self.extend_many(std::slice::from_ref(lease))
            .await
            .remove(0)
    }

    async fn extend_many(&self, leases: &[Lease]) -> Vec<Result<bool>> {
        self.extend_calls.fetch_add(1, Ordering::SeqCst);
        self.extended_leases
            .fetch_add(leases.len(), Ordering::SeqCst);
        if self.stall_extensions.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.inner.extend_many(leases).await
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

    fn watch_releases(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.inner.watch_releases(name)
    }
}

fn options(lease: Duration) -> LockOptions {
    LockOptions::builder()
        .lease(lease)
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .build()
        .unwrap()
}

fn name(text: &str) -> LockName {
    LockName::new(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_in_one_process_cost_one_attempt_each() {
    let backend = Arc::new(Instrumented::with_wakeups());
    let holder = LockClient::new(backend.clone(), options(Duration::from_secs(30)));
    let waiters = LockClient::new(backend.clone(), options(Duration::from_secs(30)));
    let lock = name("coalesce");
    let guard = holder.acquire(&lock, Duration::ZERO).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (waiters, lock) = (waiters.clone(), lock.clone());
            tokio::spawn(async move {
                let guard = waiters
                    .acquire(&lock, Duration::from_secs(30))
                    .await
                    .unwrap();
                guard.release().await.unwrap();
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    // One attempt by the holder, one by the first waiter while the lock was
    // held, then one per waiter as the lock passed along locally. Without
    // coalescing, every waiter would poll the backend while it waited.
    let attempts = backend.attempts.load(Ordering::SeqCst);
    assert!(
        attempts <= 1 + 1 + 16,
        "{attempts} backend attempts for 16 waiters"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_waiter_gets_the_lock_without_polling() {
    let backend = Arc::new(Instrumented::default());
    let client = LockClient::new(backend.clone(), options(Duration::from_secs(30)));
    let lock = name("handoff");
    let guard = client.acquire(&lock, Duration::ZERO).await.unwrap();
    let waiter = {
        let (client, lock) = (client.clone(), lock.clone());
        tokio::spawn(async move { client.acquire(&lock, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        backend.attempts.load(Ordering::SeqCst),
        1,
        "the waiter queued locally"
    );
    guard.release().await.unwrap();
    let second = waiter.await.unwrap().unwrap();
    assert_eq!(
        backend.attempts.load(Ordering::SeqCst),
        2,
        "handed off with one attempt"
    );
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_are_extended_in_batches() {
    const LOCKS: usize = 2000;
    let backend = Arc::new(Instrumented::default());
    let lease = Duration::from_millis(600);
    let client = LockClient::new(backend.clone(), options(lease));
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        guards.push(
            client
                .acquire(&name(&format!("batch-{i}")), Duration::ZERO)
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(lease * 2).await;
    let calls = backend.extend_calls.load(Ordering::SeqCst);
    let extended = backend.extended_leases.load(Ordering::SeqCst);
    assert!(
        extended >= LOCKS * 4,
        "every lease was extended each cadence: {extended}"
    );
    assert!(
        calls * 20 <= extended,
        "{calls} calls for {extended} extensions: leases should share calls"
    );
    assert!(guards.iter().all(|guard| !guard.is_lost()));
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_extensions_end_the_lease_before_the_server_would() {
    let backend = Arc::new(Instrumented::default());
    let lease = Duration::from_millis(1000);
    let options = LockOptions::builder()
        .lease(lease)
        .safety_margin(Duration::from_millis(300))
        .build()
        .unwrap();
    let client = LockClient::new(backend.clone(), options);
    let other = LockClient::new(backend.clone(), self::options(lease));
    let lock = name("stall");
    let guard = client.acquire(&lock, Duration::ZERO).await.unwrap();
    backend.stall_extensions.store(true, Ordering::SeqCst);
    let reason = tokio::time::timeout(lease * 5, guard.lost())
        .await
        .expect("lost fires");
    assert_eq!(reason, LossReason::Expired);
    // The server still has the lease: nobody else could hold it yet.
    assert!(other.try_acquire(&lock).await.unwrap().is_none());
    let taken = other
        .acquire(&lock, lease * 2)
        .await
        .expect("the lease runs out on the server");
    assert!(taken.fencing_token() > guard.fencing_token());
    assert!(!guard.release().await.unwrap());
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_answered_after_cancellation_is_released() {
    let backend = Arc::new(Instrumented::default());
    let client = LockClient::new(backend.clone(), options(Duration::from_secs(60)));
    let lock = name("late-grant");
    backend.reply_delay_ms.store(200, Ordering::SeqCst);
    let attempt = {
        let (client, lock) = (client.clone(), lock.clone());
        tokio::spawn(async move { client.acquire(&lock, Duration::from_secs(30)).await })
    };
    // The backend has granted but not yet answered.
    tokio::time::sleep(Duration::from_millis(50)).await;
    attempt.abort();
    backend.reply_delay_ms.store(0, Ordering::SeqCst);
    let guard = client
        .acquire(&lock, Duration::from_secs(5))
        .await
        .expect("the late grant was released, not leaked for its 60 s lease");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn try_acquire_of_a_held_lock_is_none_not_an_error() {
    let client = LockClient::new(Arc::new(MemoryBackend::new()), LockOptions::default());
    let lock = name("held");
    let guard = client.try_acquire(&lock).await.unwrap().expect("free");
    assert!(client.try_acquire(&lock).await.unwrap().is_none());
    match client.acquire(&lock, Duration::from_millis(20)).await {
        Err(Error::Timeout { name, .. }) => assert_eq!(name, "held"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    guard.release().await.unwrap();
}

//! Backends whose grants hang on one session: the keeper renews the
//! session once per cadence while anything is held or waited for, and
//! never extends grants one by one.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireRequest, Attempt, Backend, Capabilities, Error, Lease, LockClient, LockInfo, LockName,
    LockOptions, LossReason, MemoryBackend, ReleaseWatch, Result, WaitState,
};

const ALIVE: u8 = 0;
const GONE: u8 = 1;
const FAILING: u8 = 2;

/// The memory backend behind a session, as etcd keeps keys on one lease:
/// a renewal extends every grant made through this instance.
#[derive(Debug)]
struct Session {
    inner: Arc<MemoryBackend>,
    granted: Mutex<Vec<Lease>>,
    renewals: AtomicUsize,
    extensions: AtomicUsize,
    state: AtomicU8,
}

impl Session {
    fn over(inner: Arc<MemoryBackend>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            granted: Mutex::default(),
            renewals: AtomicUsize::new(0),
            extensions: AtomicUsize::new(0),
            state: AtomicU8::new(ALIVE),
        })
    }

    fn renewals(&self) -> usize {
        self.renewals.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Backend for Session {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_sessions(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        let attempt = self.inner.try_acquire(request, wait).await?;
        if let Attempt::Acquired {
            fencing_token,
            state,
        } = &attempt
        {
            let lease = request.granted(*fencing_token, state.clone());
            self.granted.lock().unwrap().push(lease);
        }
        Ok(attempt)
    }

    async fn end_wait(&self, request: &AcquireRequest, wait: WaitState) -> Result<()> {
        self.inner.end_wait(request, wait).await
    }

    async fn renew_session(&self) -> Result<bool> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        match self.state.load(Ordering::SeqCst) {
            GONE => Ok(false),
            FAILING => Err(Error::Backend {
                backend: "test",
                message: "the session server does not answer".into(),
                source: None,
            }),
            _ => {
                let granted = self.granted.lock().unwrap().clone();
                for lease in &granted {
                    self.inner.extend(lease).await?;
                }
                Ok(true)
            }
        }
    }

    async fn extend(&self, lease: &Lease) -> Result<bool> {
        self.extensions.fetch_add(1, Ordering::SeqCst);
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

    fn watch_releases(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.inner.watch_releases(name)
    }
}

fn options() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(3))
        .build()
        .unwrap()
}

fn names(count: usize) -> Vec<LockName> {
    (0..count)
        .map(|i| LockName::new(format!("session-{i}")).unwrap())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn many_locks_cost_one_renewal_per_cadence_and_no_extension() {
    let backend = Session::over(Arc::default());
    let client = LockClient::new(backend.clone(), options());
    let mut guards = Vec::new();
    for name in names(100) {
        guards.push(client.acquire_with(&name, Duration::ZERO).await.unwrap());
    }
    // Five cadences of a second each.
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let renewals = backend.renewals();
    assert!(
        (4..=6).contains(&renewals),
        "{renewals} renewals in five cadences for 100 locks"
    );
    assert_eq!(backend.extensions.load(Ordering::SeqCst), 0);
    for guard in &guards {
        assert!(!guard.is_lost(), "the session kept {}", guard.name());
    }
    // Nothing held: the renewals stop.
    for guard in guards {
        guard.release().await.unwrap();
    }
    let after_release = backend.renewals();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(backend.renewals() <= after_release + 1);
}

#[tokio::test(start_paused = true)]
async fn a_session_that_is_gone_takes_every_lease_with_it() {
    let backend = Session::over(Arc::default());
    let client = LockClient::new(backend.clone(), options());
    let mut guards = Vec::new();
    for name in names(3) {
        guards.push(client.acquire_with(&name, Duration::ZERO).await.unwrap());
    }
    backend.state.store(GONE, Ordering::SeqCst);
    for guard in &guards {
        let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
            .await
            .expect("lost within a cadence");
        assert_eq!(reason, LossReason::Refused);
    }
}

#[tokio::test(start_paused = true)]
async fn unanswered_renewals_end_the_leases_when_they_run_out() {
    let backend = Session::over(Arc::default());
    let client = LockClient::new(backend.clone(), options());
    let guard = client
        .acquire_with(&names(1)[0], Duration::ZERO)
        .await
        .unwrap();
    backend.state.store(FAILING, Ordering::SeqCst);
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost once the lease ran out");
    assert_eq!(reason, LossReason::Expired);
    assert!(backend.renewals() >= 2, "the keeper kept trying");
}

#[tokio::test(start_paused = true)]
async fn a_wait_alone_keeps_the_session_renewed() {
    let store = Arc::new(MemoryBackend::new());
    let holder = LockClient::new(store.clone(), options());
    let name = &names(1)[0];
    let held = holder.acquire_with(name, Duration::ZERO).await.unwrap();
    let backend = Session::over(store);
    let waiter = LockClient::new(backend.clone(), options());
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire_with(&name, Duration::from_secs(60)).await })
    };
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert!(
        backend.renewals() >= 2,
        "a waiter holding nothing keeps its session: {} renewals",
        backend.renewals()
    );
    held.release().await.unwrap();
    let guard = waiting.await.unwrap().unwrap();
    guard.release().await.unwrap();
}

//! The one timeout rule (`LockOptions::operation_timeout`): every backend
//! call carries the client's operation timeout and ends within it, and a
//! wait ends at its deadline, giving its first attempt the whole operation
//! timeout and an attempt made at the deadline `FINAL_ATTEMPT`. An
//! administrative call gets the operation timeout as its limit, and ends
//! at it whatever the backend says of its own bounds.
//!
//! Time is paused, so the durations below are the runtime's logical time:
//! these tests check the rule's arithmetic, not the machine's speed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, Extended, Lease, Term, TermLog,
    WaitState,
};
use distlock_core::testing::{Call, Hook, TestBackend};
use distlock_core::{
    Error, Holder, LockClient, LockInfo, LockName, LockOptions, MemoryBackend, Result,
};
use tokio::time::Instant;

const OPERATION_TIMEOUT: Duration = Duration::from_millis(700);

/// Records the operation timeout each call carries, and never lets
/// attempts from the `hang_from`-th on through.
#[derive(Debug)]
struct Recording {
    /// The store every client of this recording shares.
    memory: Arc<MemoryBackend>,
    attempts: AtomicUsize,
    hang_from: usize,
    seen: Mutex<Vec<(&'static str, Duration)>>,
}

impl Recording {
    fn hanging_from(attempt: usize) -> Arc<Self> {
        Arc::new(Self {
            memory: Arc::default(),
            attempts: AtomicUsize::new(0),
            hang_from: attempt,
            seen: Mutex::default(),
        })
    }

    fn see(&self, call: &'static str, timeout: Duration) {
        self.seen.lock().unwrap().push((call, timeout));
    }
}

#[async_trait]
impl Hook for Recording {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        match call {
            Call::Acquire(request) => {
                self.see("acquire", request.operation_timeout);
                if self.attempts.fetch_add(1, Ordering::SeqCst) >= self.hang_from {
                    std::future::pending::<()>().await;
                }
            }
            Call::Extend(leases) => {
                for lease in leases {
                    self.see("extend", lease.operation_timeout);
                }
            }
            Call::Release(lease) => self.see("release", lease.operation_timeout),
            _ => {}
        }
        Ok(())
    }
}

fn client(recording: &Arc<Recording>) -> LockClient {
    let options = LockOptions::builder()
        .lease(Duration::from_secs(3))
        .operation_timeout(OPERATION_TIMEOUT)
        .build()
        .unwrap();
    let backend = TestBackend::wrapping(recording.memory.clone()).with_hook(recording.clone());
    LockClient::new(backend.shared(), options)
}

fn name(text: &str) -> LockName {
    LockName::new(text).unwrap()
}

#[tokio::test(start_paused = true)]
async fn every_call_carries_the_clients_operation_timeout() {
    let backend = Recording::hanging_from(usize::MAX);
    let client = client(&backend);
    let guard = client
        .acquire_with(&name("carried"), Duration::ZERO)
        .await
        .unwrap();
    // Two extension cadences (a third of the lease each).
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert!(guard.release().await.unwrap());

    let seen = backend.seen.lock().unwrap().clone();
    for call in ["acquire", "extend", "release"] {
        assert!(
            seen.iter().any(|(made, _)| *made == call),
            "no {call} was made: {seen:?}"
        );
    }
    assert!(
        seen.iter()
            .all(|(_, timeout)| *timeout == OPERATION_TIMEOUT),
        "every call carries the client's operation timeout: {seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_gets_the_whole_operation_timeout_even_with_a_zero_wait() {
    let backend = Recording::hanging_from(0);
    let client = client(&backend);
    let started = Instant::now();
    let outcome = client.acquire_with(&name("hung"), Duration::ZERO).await;
    // The wait's deadline passed during a call that never answered: a
    // timeout, which keeps the call's own timeout, naming the call.
    assert!(
        matches!(
            &outcome,
            Err(Error::Timeout { last_error: Some(error), .. })
                if matches!(&**error, Error::OperationTimeout { operation: "acquire", after }
                    if *after == OPERATION_TIMEOUT)
        ),
        "{outcome:?}"
    );
    assert_eq!(started.elapsed(), OPERATION_TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn later_attempts_end_by_the_deadline_and_the_final_attempts_moment() {
    // The holder's attempt and the waiter's first answer; later ones hang.
    let backend = Recording::hanging_from(2);
    let client = client(&backend);
    let name = name("held");
    let _held = client.try_acquire(&name).await.unwrap().expect("free");

    let other = self::client(&backend);
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let outcome = other.acquire_with(&name, wait).await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    // The later attempts hang: the wait ends at its deadline, or, for an
    // attempt made at the deadline, a moment after it; never after a whole
    // operation timeout of a later attempt.
    let waited = started.elapsed();
    assert!(waited >= wait, "{waited:?}");
    assert!(waited <= wait + LockOptions::FINAL_ATTEMPT, "{waited:?}");
}

/// A backend that says it bounds its own calls, and never answers an
/// administrative one: core's timer alone must end each at the limit it
/// handed the backend.
#[derive(Debug, Default)]
struct SilentAdmin {
    memory: MemoryBackend,
    limits: Mutex<Vec<(&'static str, Duration)>>,
}

impl SilentAdmin {
    async fn never_answer<T>(&self, call: &'static str, limit: Duration) -> Result<T> {
        self.limits.lock().unwrap().push((call, limit));
        std::future::pending().await
    }
}

#[async_trait]
impl Backend for SilentAdmin {
    fn capabilities(&self) -> Capabilities {
        self.memory.capabilities().with_bounds_calls(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        self.memory.try_acquire(request, wait).await
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        self.memory.extend_many(leases).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.memory.release(lease).await
    }

    async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        self.never_answer("list", limit).await
    }

    async fn force_release(&self, _: &LockName, limit: Duration) -> Result<bool> {
        self.never_answer("force release", limit).await
    }

    fn abilities(&self) -> Abilities<'_> {
        Abilities::none().with_term_log(self)
    }
}

#[async_trait]
impl TermLog for SilentAdmin {
    async fn terms_after(&self, _: &LockName, _: u64, limit: Duration) -> Result<Vec<Term>> {
        self.never_answer("read terms", limit).await
    }

    async fn withdraw(&self, _: &Lease, _: &Holder) -> Result<()> {
        Ok(())
    }
}

fn timed_out_naming<T: std::fmt::Debug>(outcome: &Result<T>, operation: &str) -> bool {
    matches!(outcome, Err(Error::OperationTimeout { operation: named, after })
        if *named == operation && *after == OPERATION_TIMEOUT)
}

#[tokio::test(start_paused = true)]
async fn administrative_calls_get_the_operation_timeout_and_end_at_it() {
    let backend = Arc::new(SilentAdmin::default());
    let options = LockOptions::builder()
        .lease(Duration::from_secs(3))
        .operation_timeout(OPERATION_TIMEOUT)
        .build()
        .unwrap();
    let client = LockClient::new(backend.clone(), options);

    let started = Instant::now();
    let listed = client.list().await;
    assert!(timed_out_naming(&listed, "list"), "{listed:?}");
    assert_eq!(started.elapsed(), OPERATION_TIMEOUT);

    let started = Instant::now();
    let forced = client.force_release("job").await;
    assert!(timed_out_naming(&forced, "force release"), "{forced:?}");
    assert_eq!(started.elapsed(), OPERATION_TIMEOUT);

    let started = Instant::now();
    let observed = client.election("job").unwrap().observe().next().await;
    assert!(timed_out_naming(&observed, "read terms"), "{observed:?}");
    assert_eq!(started.elapsed(), OPERATION_TIMEOUT);

    assert_eq!(
        *backend.limits.lock().unwrap(),
        vec![
            ("list", OPERATION_TIMEOUT),
            ("force release", OPERATION_TIMEOUT),
            ("read terms", OPERATION_TIMEOUT),
        ]
    );
}

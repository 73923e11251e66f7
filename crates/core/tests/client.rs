//! Core logic on the in-memory backend, instrumented to count and stall
//! backend calls: coalescing, batched extension, loss detection and
//! cancel safety.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{Backend, HandOver};
use distlock_core::testing::ADMIN_LIMIT;
use distlock_core::testing::{Answer, Call, Hook, TestBackend};
use distlock_core::{
    AcquireOptions, Error, LockClient, LockName, LockOptions, LossReason, MemoryBackend, Result,
};

/// Counters around the memory backend, a switch that makes extensions
/// hang, and optional delays between granting and answering.
#[derive(Debug, Default)]
struct Instrumented {
    memory: Arc<MemoryBackend>,
    attempts: AtomicUsize,
    extend_calls: AtomicUsize,
    extended_leases: AtomicUsize,
    stall_extensions: AtomicBool,
    reply_delay_ms: AtomicUsize,
    hand_overs: AtomicUsize,
    hand_over_delay_ms: AtomicUsize,
    /// Hand-overs claim the lease was confirmed this long ago.
    hand_over_confirmed_ms_ago: AtomicUsize,
    /// Hand-overs are made, and answered as if the old grant was not ours,
    /// as a hand-over script run twice answered before issue 38's fix.
    hand_over_answers_not_ours: AtomicBool,
    wakeups: bool,
    hands_over: bool,
    /// While set, waits get no watch of releases, as from a backend whose
    /// wake-ups have not started yet.
    no_watch_yet: AtomicBool,
    watches_given: AtomicUsize,
}

impl Instrumented {
    fn with_wakeups() -> Self {
        Self {
            wakeups: true,
            ..Self::default()
        }
    }

    fn handing_over() -> Self {
        Self {
            wakeups: true,
            hands_over: true,
            ..Self::default()
        }
    }

    /// A backend over the one memory store, counted by this.
    fn shared(self: &Arc<Self>) -> Arc<dyn Backend> {
        let mut backend = TestBackend::wrapping(self.memory.clone()).with_hook(self.clone());
        if !self.wakeups {
            backend = backend.without_wakeups();
        }
        if !self.hands_over {
            backend = backend.without_hand_overs();
        }
        backend.shared()
    }
}

/// Sleeps `ms` milliseconds, if any.
async fn pause(ms: &AtomicUsize) {
    let ms = ms.load(Ordering::SeqCst);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms as u64)).await;
    }
}

#[async_trait]
impl Hook for Instrumented {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        match call {
            Call::Acquire(_) => {
                self.attempts.fetch_add(1, Ordering::SeqCst);
            }
            Call::Extend(leases) => {
                self.extend_calls.fetch_add(1, Ordering::SeqCst);
                self.extended_leases
                    .fetch_add(leases.len(), Ordering::SeqCst);
                if self.stall_extensions.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
            }
            Call::HandOver { .. } => {
                self.hand_overs.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
        Ok(())
    }

    async fn after(&self, answer: Answer<'_>) {
        match answer {
            Answer::Acquire { .. } => pause(&self.reply_delay_ms).await,
            Answer::HandOver { outcome, .. } => {
                let ago = self.hand_over_confirmed_ms_ago.load(Ordering::SeqCst);
                if let (Ok(HandOver::Granted { confirmed_at, .. }), true) = (&mut *outcome, ago > 0)
                {
                    *confirmed_at =
                        Some(tokio::time::Instant::now() - Duration::from_millis(ago as u64));
                }
                if self.hand_over_answers_not_ours.load(Ordering::SeqCst) {
                    *outcome = Ok(HandOver::NotOurs);
                }
                pause(&self.hand_over_delay_ms).await;
            }
            _ => {}
        }
    }

    fn watches(&self, _: &LockName) -> bool {
        if self.no_watch_yet.load(Ordering::SeqCst) {
            return false;
        }
        self.watches_given.fetch_add(1, Ordering::SeqCst);
        true
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
    let holder = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let waiters = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let lock = name("coalesce");
    let guard = holder.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (waiters, lock) = (waiters.clone(), lock.clone());
            tokio::spawn(async move {
                let guard = waiters
                    .acquire_with(&lock, Duration::from_secs(30))
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
    let client = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let lock = name("handoff");
    let guard = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let waiter = {
        let (client, lock) = (client.clone(), lock.clone());
        tokio::spawn(async move { client.acquire_with(&lock, Duration::from_secs(30)).await })
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
    let client = LockClient::new(backend.shared(), options(lease));
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        guards.push(
            client
                .acquire_with(&name(&format!("batch-{i}")), Duration::ZERO)
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
    let client = LockClient::new(backend.shared(), options);
    let other = LockClient::new(backend.shared(), self::options(lease));
    let lock = name("stall");
    let guard = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    backend.stall_extensions.store(true, Ordering::SeqCst);
    let reason = tokio::time::timeout(lease * 5, guard.lost())
        .await
        .expect("lost fires");
    assert_eq!(reason, LossReason::Expired);
    // The server still has the lease: nobody else could hold it yet.
    assert!(other.try_acquire(&lock).await.unwrap().is_none());
    let taken = other
        .acquire_with(&lock, lease * 2)
        .await
        .expect("the lease runs out on the server");
    assert!(taken.fencing_token() > guard.fencing_token());
    assert!(!guard.release().await.unwrap());
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_answered_after_cancellation_is_released() {
    let backend = Arc::new(Instrumented::default());
    let client = LockClient::new(backend.shared(), options(Duration::from_secs(60)));
    let lock = name("late-grant");
    backend.reply_delay_ms.store(200, Ordering::SeqCst);
    let attempt = {
        let (client, lock) = (client.clone(), lock.clone());
        tokio::spawn(async move { client.acquire_with(&lock, Duration::from_secs(30)).await })
    };
    // The backend has granted but not yet answered.
    tokio::time::sleep(Duration::from_millis(50)).await;
    attempt.abort();
    backend.reply_delay_ms.store(0, Ordering::SeqCst);
    let guard = client
        .acquire_with(&lock, Duration::from_secs(5))
        .await
        .expect("the late grant was released, not leaked for its 60 s lease");
    guard.release().await.unwrap();
}

/// Dropping `acquire` leaves a late grant to be released in the background;
/// cancelling `acquire_or_cancel` releases it before returning, so the
/// lock is free the moment the call ends, even if the runtime ends then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_releases_the_grant_in_flight_before_it_returns() {
    let backend = Arc::new(Instrumented::default());
    let client = LockClient::new(backend.shared(), options(Duration::from_secs(60)));
    let lock = name("cancelled-in-flight");
    backend.reply_delay_ms.store(200, Ordering::SeqCst);
    // The cancellation comes while the backend has granted but not answered.
    let cancel = tokio::time::sleep(Duration::from_millis(50));
    match client
        .acquire_with(
            &lock,
            AcquireOptions::new()
                .timeout(Duration::from_secs(30))
                .cancel_on(cancel),
        )
        .await
    {
        Err(Error::Cancelled { name, .. }) => assert_eq!(name, "cancelled-in-flight"),
        other => panic!("expected a cancellation, got {other:?}"),
    }
    assert!(
        backend.memory.list(ADMIN_LIMIT).await.unwrap().is_empty(),
        "the grant was released before the call returned"
    );
    assert_eq!(backend.attempts.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_for_a_held_lock_ends_holding_nothing() {
    let backend = Arc::new(Instrumented::default());
    let holder = LockClient::new(backend.shared(), options(Duration::from_secs(60)));
    let waiter = LockClient::new(backend.shared(), options(Duration::from_secs(60)));
    let lock = name("cancelled-while-held");
    let held = holder.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let waiting = {
        let (waiter, lock) = (waiter.clone(), lock.clone());
        tokio::spawn(async move {
            let cancel = async {
                let _ = stopped.await;
            };
            waiter
                .acquire_with(
                    &lock,
                    AcquireOptions::new()
                        .timeout(Duration::from_secs(30))
                        .cancel_on(cancel),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("a cancelled wait ends")
        .unwrap();
    assert!(
        matches!(outcome, Err(Error::Cancelled { .. })),
        "{outcome:?}"
    );
    let holders = backend.memory.list(ADMIN_LIMIT).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].fencing_token, Some(held.fencing_token()));
    held.release().await.unwrap();
    // The waiter's slot for the name was given up: it can take the lock now.
    let later = waiter.acquire_with(&lock, Duration::ZERO).await.unwrap();
    later.release().await.unwrap();
}

#[tokio::test]
async fn a_wait_cancelled_before_it_starts_asks_nothing() {
    let backend = Arc::new(Instrumented::default());
    let client = LockClient::new(backend.shared(), options(Duration::from_secs(60)));
    let outcome = client
        .acquire_with(
            &name("never"),
            AcquireOptions::new()
                .timeout(Duration::from_secs(30))
                .cancel_on(async {}),
        )
        .await;
    assert!(
        matches!(outcome, Err(Error::Cancelled { .. })),
        "{outcome:?}"
    );
    assert_eq!(backend.attempts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_wait_that_is_never_cancelled_acquires_as_acquire_does() {
    let client = LockClient::new(Arc::new(MemoryBackend::new()), LockOptions::default());
    let guard = client
        .acquire_with(
            &name("plain"),
            AcquireOptions::new()
                .timeout(Duration::ZERO)
                .cancel_on(std::future::pending()),
        )
        .await
        .unwrap();
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn try_acquire_of_a_held_lock_is_none_not_an_error() {
    let client = LockClient::new(Arc::new(MemoryBackend::new()), LockOptions::default());
    let lock = name("held");
    let guard = client.try_acquire(&lock).await.unwrap().expect("free");
    assert!(client.try_acquire(&lock).await.unwrap().is_none());
    match client.acquire_with(&lock, Duration::from_millis(20)).await {
        Err(Error::Timeout { name, .. }) => assert_eq!(name, "held"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    guard.release().await.unwrap();
}

/// Spawns a task that waits for `lock` and sends its guard back, and waits
/// until the task has queued in the client.
async fn queue_waiter(
    client: &LockClient,
    lock: &LockName,
    timeout: Duration,
) -> tokio::task::JoinHandle<Result<distlock_core::LockGuard>> {
    let (client, lock) = (client.clone(), lock.clone());
    let task = tokio::spawn(async move { client.acquire_with(&lock, timeout).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_waiter_is_handed_the_lock_in_one_step() {
    let backend = Arc::new(Instrumented::handing_over());
    let client = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let lock = name("hand-over");
    let first = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let waiter = queue_waiter(&client, &lock, Duration::from_secs(30)).await;
    let first_token = first.fencing_token();
    let first_lost = first.lost_signal();
    assert!(first.release().await.unwrap(), "the first lease was ours");
    let second = waiter.await.unwrap().unwrap();
    assert!(second.fencing_token() > first_token);
    assert_eq!(first_lost.lost().await, LossReason::Released);
    assert_eq!(
        backend.attempts.load(Ordering::SeqCst),
        1,
        "only the first asked"
    );
    assert_eq!(backend.hand_overs.load(Ordering::SeqCst), 1);
    // The new grant is a real lease: listed, extended, released.
    let listed = client.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].fencing_token, Some(second.fencing_token()));
    second.extend().await.unwrap();
    assert!(second.release().await.unwrap());
    assert!(client.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_made_by_a_hand_over_answered_not_ours_is_released() {
    let backend = Arc::new(Instrumented::handing_over());
    backend
        .hand_over_answers_not_ours
        .store(true, Ordering::SeqCst);
    let client = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let lock = name("orphan");
    let first = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let waiter = queue_waiter(&client, &lock, Duration::from_secs(30)).await;
    assert!(
        first.release().await.unwrap(),
        "the hand-over's grant was there to release: the old one was ours"
    );
    assert_eq!(backend.hand_overs.load(Ordering::SeqCst), 1);
    // Nobody owns the grant the hand-over made: unless it is released, the
    // waiter waits out its 30 s lease.
    let second = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter takes the lock at once, not a lease later")
        .unwrap()
        .unwrap();
    assert_eq!(backend.attempts.load(Ordering::SeqCst), 2);
    assert!(second.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_hand_overs_are_bounded() {
    let backend = Arc::new(Instrumented::handing_over());
    let options = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .local_hand_overs(2)
        .min_local_run(Duration::ZERO)
        .build()
        .unwrap();
    let client = LockClient::new(backend.shared(), options);
    let lock = name("bounded");
    let mut guard = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..4 {
        waiters.push(queue_waiter(&client, &lock, Duration::from_secs(30)).await);
    }
    let mut tokens = vec![guard.fencing_token()];
    for waiter in waiters {
        assert!(guard.release().await.unwrap());
        guard = waiter.await.unwrap().unwrap();
        tokens.push(guard.fencing_token());
    }
    assert!(guard.release().await.unwrap());
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "{tokens:?}"
    );
    // Two hand-overs, then a release and a fresh attempt, then a new run.
    assert_eq!(backend.hand_overs.load(Ordering::SeqCst), 3);
    assert_eq!(backend.attempts.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_goes_on_past_the_bound() {
    let backend = Arc::new(Instrumented::handing_over());
    let options = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .local_hand_overs(1)
        .min_local_run(Duration::from_secs(20))
        .build()
        .unwrap();
    let client = LockClient::new(backend.shared(), options);
    let lock = name("short-run");
    let mut guard = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..3 {
        waiters.push(queue_waiter(&client, &lock, Duration::from_secs(30)).await);
    }
    for waiter in waiters {
        assert!(guard.release().await.unwrap());
        guard = waiter.await.unwrap().unwrap();
    }
    assert!(guard.release().await.unwrap());
    // Well within 20 s of the first hand-over, so the run never ended.
    assert_eq!(backend.hand_overs.load(Ordering::SeqCst), 3);
    assert_eq!(backend.attempts.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_under_an_earlier_confirmation_is_extended_by_its_schedule() {
    let backend = Arc::new(Instrumented::handing_over());
    let client = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let lock = name("confirmed-earlier");
    let first = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let waiter = queue_waiter(&client, &lock, Duration::from_secs(30)).await;
    // The backend hands over without asking the server, under a lease it
    // confirmed 25 s ago: the extension that was due 15 s ago runs now.
    backend
        .hand_over_confirmed_ms_ago
        .store(25_000, Ordering::SeqCst);
    assert!(first.release().await.unwrap());
    let second = waiter.await.unwrap().unwrap();
    let extended = async {
        while backend.extended_leases.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), extended)
        .await
        .expect("the keeper extended the handed-over lease at once");
    assert!(!second.is_lost());
    assert!(second.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_bound_always_releases() {
    let backend = Arc::new(Instrumented::handing_over());
    let options = LockOptions::builder().local_hand_overs(0).build().unwrap();
    let client = LockClient::new(backend.shared(), options);
    let lock = name("no-hand-over");
    let first = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let waiter = queue_waiter(&client, &lock, Duration::from_secs(30)).await;
    first.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();
    assert_eq!(backend.hand_overs.load(Ordering::SeqCst), 0);
    assert_eq!(backend.attempts.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_to_a_waiter_that_gave_up_is_released() {
    let backend = Arc::new(Instrumented::handing_over());
    let client = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let lock = name("gave-up");
    let first = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let waiter = queue_waiter(&client, &lock, Duration::from_millis(100)).await;
    // The hand-over is granted at once but answers after the waiter's
    // deadline, so the new grant finds nobody to take it.
    backend.hand_over_delay_ms.store(300, Ordering::SeqCst);
    assert!(first.release().await.unwrap());
    assert!(matches!(waiter.await.unwrap(), Err(Error::Timeout { .. })));
    assert_eq!(backend.hand_overs.load(Ordering::SeqCst), 1);
    let other = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let taken = other
        .acquire_with(&lock, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(taken.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_hands_over_too() {
    let backend = Arc::new(Instrumented::handing_over());
    let client = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let lock = name("dropped");
    let first = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let waiter = queue_waiter(&client, &lock, Duration::from_secs(30)).await;
    drop(first);
    let second = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .unwrap();
    assert_eq!(backend.hand_overs.load(Ordering::SeqCst), 1);
    assert!(second.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_began_before_wake_ups_started_stops_polling_once_they_have() {
    let backend = Arc::new(Instrumented::with_wakeups());
    backend.no_watch_yet.store(true, Ordering::SeqCst);
    let holder = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let waiters = LockClient::new(backend.shared(), options(Duration::from_secs(30)));
    let lock = name("late wake-ups");
    let guard = holder.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { waiters.acquire_with(&lock, Duration::from_secs(30)).await })
    };
    // Without wake-ups the waiter polls with its backoff (at most 50 ms).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        backend.attempts.load(Ordering::SeqCst) >= 3,
        "the waiter polls"
    );
    backend.no_watch_yet.store(false, Ordering::SeqCst);
    while backend.watches_given.load(Ordering::SeqCst) == 0 {
        assert!(
            !waiter.is_finished(),
            "the waiter ended while the lock was held"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // It asked again before an attempt and now waits for a release, or for
    // the holder's lease to end, 30 s away: no more attempts meanwhile. The
    // attempt that followed the watch may still be on its way.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let attempts = backend.attempts.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        backend.attempts.load(Ordering::SeqCst),
        attempts,
        "the waiter stopped polling"
    );
    guard.release().await.unwrap();
    let granted = waiter.await.unwrap().expect("woken by the release");
    granted.release().await.unwrap();
}

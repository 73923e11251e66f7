//! A server's clock that steps forward, seen through the readings of it
//! that extensions bring back (the memory backend reports its own clock,
//! which can be stepped). Time is Tokio's paused clock, which moves on to
//! the next timer whenever every task waits: the instants below are the
//! order of events, not timings.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::{Backend, Lease, async_trait};
use distlock_core::testing::{Answer, Call, Hook, TestBackend};
use distlock_core::{LockClient, LockGuard, LossReason, MemoryBackend};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep};

const LEASE: Duration = Duration::from_secs(30);

/// A client of `backend` with a 30 s lease, extended every 10 s, holding
/// `a` (taken at 0 s) and `b` (taken at 5 s): their extensions go to the
/// backend in different batches. Returns at 16 s, after each was extended
/// once.
async fn two_holds(backend: &Arc<MemoryBackend>) -> (LockClient, LockGuard, LockGuard, Instant) {
    let shared: Arc<dyn Backend> = backend.clone();
    let locks = LockClient::builder()
        .lease(LEASE)
        .extend_every(Duration::from_secs(10))
        .build_shared(shared)
        .unwrap();
    let start = Instant::now();
    let a = locks.acquire("a").await.unwrap();
    sleep(Duration::from_secs(5)).await;
    let b = locks.acquire("b").await.unwrap();
    sleep(Duration::from_secs(11)).await;
    (locks, a, b, start)
}

#[tokio::test(start_paused = true)]
async fn a_step_forward_seen_by_one_extension_ends_the_other_leases_it_cut_short() {
    let backend = Arc::new(MemoryBackend::new());
    let (_locks, a, b, start) = two_holds(&backend).await;
    // Two leases forward: both leases are over on the backend now.
    backend.step_clock(2 * LEASE);
    // `a`'s extension, due at 20 s, is refused, and its reading of the
    // clock shows the step; `b`, whose own extension is due at 25 s, is
    // given up at once.
    assert_eq!(a.lost().await, LossReason::Refused);
    assert_eq!(b.lost().await, LossReason::ServerClockStepped);
    let heard = start.elapsed();
    assert!(
        heard < Duration::from_secs(25),
        "b's loss was heard at {heard:?}, not before its own extension"
    );
}

#[tokio::test(start_paused = true)]
async fn a_step_shorter_than_what_is_left_of_a_lease_ends_nothing() {
    let backend = Arc::new(MemoryBackend::new());
    let (_locks, a, b, _) = two_holds(&backend).await;
    backend.step_clock(Duration::from_secs(5));
    // Past both leases' next extensions, and the one after: each was still
    // live on the backend when extended, so nothing was lost.
    sleep(Duration::from_secs(20)).await;
    assert!(!a.is_lost());
    assert!(!b.is_lost());
    assert!(a.release().await.unwrap());
    assert!(b.release().await.unwrap());
}

/// Holds back the answer to the first extension of lock `a` until told,
/// and notes when that extension was sent.
#[derive(Debug, Default)]
struct LateAnswerForA {
    sent_at: Mutex<Option<Instant>>,
    answered: AtomicBool,
    release: Notify,
}

fn extends_a(leases: &[Lease]) -> bool {
    leases.iter().any(|lease| lease.name.as_str() == "a")
}

#[async_trait]
impl Hook for LateAnswerForA {
    async fn before(&self, call: Call<'_>) -> distlock_core::Result<()> {
        if let Call::Extend(leases) = call
            && extends_a(leases)
        {
            let mut sent_at = self.sent_at.lock().unwrap();
            sent_at.get_or_insert_with(Instant::now);
        }
        Ok(())
    }

    async fn after(&self, answer: Answer<'_>) {
        // The server extended `a` (and read its clock) before the step;
        // only its answer is late.
        if let Answer::Extend { leases, .. } = answer
            && extends_a(leases)
            && !self.answered.swap(true, Ordering::SeqCst)
        {
            self.release.notified().await;
        }
    }
}

/// An extension sent before the step and answered after another
/// extension's reading revealed it was confirmed on the server's clock as
/// it was before the step: its late answer must not give back what the
/// step took from the lease.
#[tokio::test(start_paused = true)]
async fn a_late_answer_to_an_extension_sent_before_a_step_keeps_the_lease_shortened() {
    let memory = Arc::new(MemoryBackend::new());
    let hook = Arc::new(LateAnswerForA::default());
    let backend = TestBackend::wrapping(memory.clone()).with_hook(hook.clone());
    let locks = LockClient::builder()
        .lease(LEASE)
        .extend_every(Duration::from_secs(10))
        .build_shared(backend.shared())
        .unwrap();
    let margin = locks.options().safety_margin();
    let start = Instant::now();
    // `b` at 0 s, extended at 10 s (the first reading) and at 20 s; `a`
    // at 5 s, extended at 15 s, the answer held back.
    let b = locks.acquire("b").await.unwrap();
    sleep(Duration::from_secs(5)).await;
    let a = locks.acquire("a").await.unwrap();
    sleep(Duration::from_secs(11)).await;
    let a_sent_at = hook
        .sent_at
        .lock()
        .unwrap()
        .expect("a's extension was sent");
    assert!(a_sent_at < start + Duration::from_secs(16));
    // At 16 s the server's clock steps 5 s forward; `b`'s extension at
    // 20 s reads it 15 s after its reading at 10 s, 10 s later here.
    let step = Duration::from_secs(5);
    memory.step_clock(step);
    sleep(Duration::from_secs(5)).await;
    // The server ends `a` a lease after it extended it, by its clock
    // before the step: `step` sooner than that here.
    let shortened = a_sent_at.into_std() + LEASE - margin - step;
    let before = a.valid_until().expect("a lease backend");
    assert!(
        before <= shortened,
        "the step seen at 20 s shortened a: {before:?} > {shortened:?}"
    );
    // Now the answer to `a`'s extension comes.
    hook.release.notify_one();
    sleep(Duration::from_millis(10)).await;
    let after = a.valid_until().expect("a lease backend");
    assert!(after > before, "the late answer was applied");
    assert!(
        after <= shortened,
        "the late answer to a's extension sent at {:?} gave back the step: valid until {:?}, \
         at most {:?}",
        a_sent_at - start,
        after.saturating_duration_since(start.into_std()),
        shortened.saturating_duration_since(start.into_std()),
    );
    assert!(!a.is_lost());
    assert!(!b.is_lost());
}

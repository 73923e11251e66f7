//! A server's clock that steps forward, seen through the readings of it
//! that extensions bring back (the memory backend reports its own clock,
//! which can be stepped). Time is Tokio's paused clock, which moves on to
//! the next timer whenever every task waits: the instants below are the
//! order of events, not timings.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{Backend, LockClient, LockGuard, LossReason, MemoryBackend};
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

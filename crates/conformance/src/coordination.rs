//! The cases of coordination built on locks: several locks taken together
//! ([`LockClient::acquire_all`](distlock_core::LockClient::acquire_all)).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock_core::{AcquireOptions, Error, LossReason};

use crate::Fixture;
use crate::support::{LEAK_CATCHING_LEASE, bounded, client, client_with, shared, unique_name};

/// How many times each of two callers takes the same pair of names in
/// opposite orders.
const ROUNDS: usize = 200;

/// Two callers take the same two names in opposite orders, 200 times each,
/// at the same time: neither ever waits for the other in a cycle (each
/// take is bounded, and a deadlock would time out), and the two never hold
/// the pair at once.
pub async fn opposite_orders_never_deadlock(fixture: &dyn Fixture) {
    let (first, second) = (unique_name("set-a"), unique_name("set-b"));
    let inside = shared(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for order in [
        [first.clone(), second.clone()],
        [second.clone(), first.clone()],
    ] {
        let locks = client(fixture).await;
        let inside = inside.clone();
        callers.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let set = locks
                    .acquire_all(order.clone(), Duration::from_secs(30))
                    .await
                    .unwrap_or_else(|error| panic!("round {round}: {error}"));
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two callers held the pair at once"
                );
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(set.release().await.expect("release"), "held throughout");
            }
        }));
    }
    for caller in callers {
        bounded("200 rounds of sets in opposite orders", caller)
            .await
            .expect("a caller panicked");
    }
}

/// A set whose last lock is held elsewhere times out naming that lock,
/// and holds nothing afterwards: the first lock is free at once.
pub async fn a_set_that_times_out_holds_nothing(fixture: &dyn Fixture) {
    let (free, taken) = (unique_name("set-free"), unique_name("set-taken"));
    let holder = client(fixture).await;
    let blocking = holder
        .acquire_with(&taken, Duration::from_secs(10))
        .await
        .expect("acquire");
    // A long lease: a leaked grant of `free` would outlast the check.
    let locks = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let error = locks
        .acquire_all([&free, &taken], Duration::from_millis(300))
        .await
        .expect_err("the second lock is held");
    match &error {
        Error::Timeout { name, .. } => assert_eq!(name, taken.as_str()),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let other = client(fixture).await;
    let again = other
        .try_acquire(&free)
        .await
        .expect("try")
        .expect("the set released the lock it took");
    again.release().await.expect("release");
    blocking.release().await.expect("release");
}

/// A cancelled set holds nothing afterwards.
pub async fn a_cancelled_set_holds_nothing(fixture: &dyn Fixture) {
    let (free, taken) = (unique_name("set-free"), unique_name("set-taken"));
    let holder = client(fixture).await;
    let blocking = holder
        .acquire_with(&taken, Duration::from_secs(10))
        .await
        .expect("acquire");
    let locks = client_with(fixture, LEAK_CATCHING_LEASE).await;
    let options = AcquireOptions::new()
        .timeout(Duration::from_secs(30))
        .cancel_on(tokio::time::sleep(Duration::from_millis(300)));
    let error = locks
        .acquire_all([&taken, &free], options)
        .await
        .expect_err("cancelled");
    match &error {
        Error::Cancelled { name, .. } => assert_eq!(name, taken.as_str()),
        other => panic!("expected a cancellation, got {other:?}"),
    }
    let other = client(fixture).await;
    let again = other
        .try_acquire(&free)
        .await
        .expect("try")
        .expect("the cancelled set released the lock it took");
    again.release().await.expect("release");
    blocking.release().await.expect("release");
}

/// The loss of any one lock of a set is the set's, named; the others stay
/// held until the set is released, which then reports the loss.
pub async fn a_set_reports_the_loss_of_any_member(fixture: &dyn Fixture) {
    let (kept, forced) = (unique_name("set-kept"), unique_name("set-forced"));
    let locks = client(fixture).await;
    let set = locks
        .acquire_all([&kept, &forced], Duration::from_secs(10))
        .await
        .expect("acquire the set");
    let tokens: Vec<(String, u64)> = set
        .fencing_tokens()
        .map(|(name, token)| (name.to_string(), token))
        .collect();
    assert_eq!(tokens.len(), 2);
    assert!(tokens.iter().all(|(_, token)| *token > 0));
    let admin = fixture.backend().await;
    assert!(admin.force_release(&forced).await.expect("force release"));
    let (name, reason) = bounded("the set's lost()", set.lost()).await;
    assert_eq!(name, &forced);
    assert!(
        matches!(reason, LossReason::Refused | LossReason::Detected),
        "{reason:?}"
    );
    assert!(set.is_lost());
    let other = client(fixture).await;
    assert!(
        other.try_acquire(&kept).await.expect("try").is_none(),
        "the other lock of the set is still held"
    );
    assert!(!set.release().await.expect("release"), "one was lost");
    let again = other
        .try_acquire(&kept)
        .await
        .expect("try")
        .expect("released with the set");
    again.release().await.expect("release");
}

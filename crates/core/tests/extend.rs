//! The keeper and a backend that extends lease by lease.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::testing::{Call, Hook, Operation, TestBackend};
use distlock_core::{LockClient, LockName, LockOptions, Result};

/// Extensions that take `per_call`, plus `per_32_leases` for each 32
/// leases a call carries.
#[derive(Debug)]
struct SlowExtensions {
    per_call: Duration,
    per_32_leases: Duration,
}

#[async_trait]
impl Hook for SlowExtensions {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        if let Call::Extend(leases) = call {
            let rounds = leases.len().div_ceil(32) as u32;
            tokio::time::sleep(self.per_call + self.per_32_leases * rounds).await;
        }
        Ok(())
    }
}

fn options(lease: Duration, operation_timeout: Duration) -> LockOptions {
    LockOptions::builder()
        .lease(lease)
        .operation_timeout(operation_timeout)
        .build()
        .unwrap()
}

/// Many leases fall due together, more than such a backend extends within
/// one operation timeout if given them all at once; the keeper hands them
/// over a few at a time, each call with its own timeout, so none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_a_backend_without_bulk_extension_are_all_kept() {
    const LOCKS: usize = 200;
    let options = options(Duration::from_millis(900), Duration::from_millis(80));
    let client = LockClient::new(
        TestBackend::new()
            // 30 ms for each 32 leases, as the default bulk extension
            // makes them 32 at a time: a batch of all of them would take
            // longer than one operation timeout.
            .with_hook(Arc::new(SlowExtensions {
                per_call: Duration::ZERO,
                per_32_leases: Duration::from_millis(30),
            }))
            .shared(),
        options,
    );
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

/// A batch of ten calls' worth of leases: sent one after another, the last
/// calls would leave after their leases ran out (10 × 150 ms from the
/// first extension, against a 1.2 s lease); the keeper sends them a few at
/// once, so none is lost.
#[tokio::test(start_paused = true)]
async fn the_calls_of_a_large_batch_are_sent_side_by_side() {
    const LOCKS: usize = 320;
    let options = options(Duration::from_millis(1200), Duration::from_millis(1000));
    // 150 ms a call, whatever its size, as a bulk statement on a busy
    // server takes.
    let backend = TestBackend::new().with_hook(Arc::new(SlowExtensions {
        per_call: Duration::from_millis(150),
        per_32_leases: Duration::ZERO,
    }));
    let client = LockClient::new(backend.shared(), options);
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        let name = LockName::new(format!("batched-{i}")).unwrap();
        guards.push(client.acquire_with(&name, Duration::ZERO).await.unwrap());
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let extensions = backend.calls_of(Operation::Extend);
    assert!(
        extensions >= 30,
        "only {extensions} extension calls: the leases were not kept by extending them"
    );
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    assert_eq!(lost, 0, "{lost} of {LOCKS} leases were lost");
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
}

/// Extensions that fail while `failing` is set, as a cut network would.
#[derive(Debug, Default)]
struct Unreachable {
    failing: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl Hook for Unreachable {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        if matches!(call, Call::Extend(_)) && self.failing.load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(distlock_core::Error::backend(
                "test",
                "the server cannot be reached",
                std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            ));
        }
        Ok(())
    }
}

/// `valid_until` is the send time of the last confirmed grant or
/// extension plus the lease less the margin; it moves with each
/// confirmation, and stays where it was once the lease is lost.
#[tokio::test]
async fn valid_until_follows_the_last_confirmation_and_outlives_the_loss() {
    let (lease, margin) = (Duration::from_millis(600), Duration::from_millis(100));
    let options = LockOptions::builder()
        .lease(lease)
        .safety_margin(margin)
        .build()
        .unwrap();
    let hook = Arc::new(Unreachable::default());
    let client = LockClient::new(TestBackend::new().with_hook(hook.clone()).shared(), options);
    let name = LockName::new("valid-until").unwrap();
    let asked = std::time::Instant::now();
    let guard = client.acquire_with(&name, Duration::ZERO).await.unwrap();
    let answered = std::time::Instant::now();
    let granted = guard.valid_until().expect("a lease that expires");
    assert!(asked + lease - margin <= granted && granted <= answered + lease - margin);

    let asked = std::time::Instant::now();
    guard.extend().await.unwrap();
    let extended = guard.valid_until().unwrap();
    assert!(asked + lease - margin <= extended && extended >= granted);

    hook.failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let reason = guard.lost().await;
    assert_eq!(reason, distlock_core::LossReason::Expired);
    let kept = guard.valid_until().unwrap();
    assert!(kept >= extended, "the last confirmation is kept");
    assert!(
        kept <= std::time::Instant::now(),
        "it had passed when the loss fired"
    );
}

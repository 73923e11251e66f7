//! Shared locks, semaphores and what the trait carries for them, in core:
//! local queues that mix kinds, and losses a backend reports by itself.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{Attempt, LossReporter};
use distlock_core::testing::{Answer, Call, Hook, TestBackend};
use distlock_core::{
    AcquireOptions, Claim, LockClient, LockName, LockOptions, LossReason, MemoryBackend, Payload,
    Result, TryOptions,
};

const PATIENCE: Duration = Duration::from_secs(10);

/// Keeps the loss reporter of each grant, so that a test can report the
/// grant lost as a backend whose connection dropped would, and the payload
/// of each attempt.
#[derive(Debug, Default)]
struct Reporting {
    reporters: Mutex<Vec<LossReporter>>,
    payloads: Mutex<Vec<Option<u32>>>,
}

impl Reporting {
    /// A backend in memory that reports to a new `Reporting`.
    fn backend() -> (TestBackend, Arc<Self>) {
        let reporting = Arc::new(Self::default());
        (TestBackend::new().with_hook(reporting.clone()), reporting)
    }
}

#[async_trait]
impl Hook for Reporting {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        if let Call::Acquire(request) = call {
            let payload = request.payload.get::<u32>().copied();
            self.payloads.lock().unwrap().push(payload);
        }
        Ok(())
    }

    async fn after(&self, answer: Answer<'_>) {
        if let Answer::Acquire {
            request,
            outcome: Ok(Attempt::Acquired { .. }),
        } = answer
        {
            self.reporters.lock().unwrap().push(request.loss.clone());
        }
    }
}

fn name(text: &str) -> LockName {
    LockName::new(text).unwrap()
}

#[tokio::test]
async fn a_loss_the_backend_reports_ends_the_guard_at_once() {
    let (backend, reporting) = Reporting::backend();
    let client = LockClient::new(backend.shared(), LockOptions::default());
    let guard = client
        .acquire_with(&name("reported"), PATIENCE)
        .await
        .unwrap();
    let other = client
        .acquire_with(
            &name("untouched"),
            AcquireOptions::new().shared().timeout(PATIENCE),
        )
        .await
        .unwrap();
    assert!(!guard.is_lost());
    let reporter = reporting.reporters.lock().unwrap()[0].clone();
    reporter.report();
    assert_eq!(
        tokio::time::timeout(PATIENCE, guard.lost()).await.unwrap(),
        LossReason::Detected
    );
    assert!(reporter.is_ended());
    assert!(!other.is_lost(), "only the reported grant is lost");
    other.release().await.unwrap();
}

#[tokio::test]
async fn a_lock_is_handed_over_only_to_a_local_writer() {
    let client = LockClient::new(Arc::new(MemoryBackend::new()), LockOptions::default());
    let lock = name("mixed-queue");
    let writer = client.acquire_with(&lock, PATIENCE).await.unwrap();
    let reader = {
        let (client, lock) = (client.clone(), lock.clone());
        tokio::spawn(async move {
            client
                .acquire_with(&lock, AcquireOptions::new().shared().timeout(PATIENCE))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let writer_token = writer.fencing_token();
    assert!(writer.release().await.unwrap());
    let reader = reader.await.unwrap().unwrap();
    assert_eq!(
        reader.claim(),
        Claim::Shared,
        "a reader gets a reader's grant"
    );
    assert!(reader.fencing_token() > writer_token);
    // It is a reader's share: another reader joins it.
    let second = client
        .try_acquire_with(&lock, TryOptions::new().shared())
        .await
        .unwrap()
        .unwrap();
    reader.release().await.unwrap();
    second.release().await.unwrap();
}

#[tokio::test]
async fn tasks_of_one_client_share_a_semaphore_up_to_its_limit() {
    let client = LockClient::new(Arc::new(MemoryBackend::new()), LockOptions::default());
    let exports = name("exports");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            client
                .acquire_with(&exports, AcquireOptions::new().permit(3).timeout(PATIENCE))
                .await
                .unwrap(),
        );
    }
    assert!(
        client
            .try_acquire_with(&exports, TryOptions::new().permit(3))
            .await
            .unwrap()
            .is_none()
    );
    let waiter = {
        let (client, exports) = (client.clone(), exports.clone());
        tokio::spawn(async move {
            client
                .acquire_with(&exports, AcquireOptions::new().permit(3).timeout(PATIENCE))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished());
    held.pop().unwrap().release().await.unwrap();
    let fourth = waiter.await.unwrap().unwrap();
    assert_eq!(fourth.claim(), Claim::Permit { limit: 3 });
    let listed = client.list().await.unwrap();
    assert_eq!(listed.len(), 3);
    assert!(
        listed
            .iter()
            .all(|info| info.permits.is_some_and(|p| p.in_use == 3 && p.limit == 3))
    );
    fourth.release().await.unwrap();
    for permit in held {
        permit.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_zero_timeout_writer_leaves_no_mark_behind() {
    let client = LockClient::new(Arc::new(MemoryBackend::new()), LockOptions::default());
    let lock = name("zero-writer");
    let reader = client
        .acquire_with(&lock, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .unwrap();
    let other = LockClient::new(client.backend().clone(), LockOptions::default());
    assert!(other.acquire_with(&lock, Duration::ZERO).await.is_err());
    assert!(
        other
            .try_acquire_with(&lock, TryOptions::new().shared())
            .await
            .unwrap()
            .is_some(),
        "a writer that tried once holds no reader back"
    );
    reader.release().await.unwrap();
}

/// Without wake-ups a waiter polls with backoff; a permit released by
/// another task of the same client lets it in at once all the same.
#[tokio::test(start_paused = true)]
async fn a_local_release_lets_the_local_waiter_in_without_polling() {
    let backoff = Duration::from_secs(5);
    let options = LockOptions::builder()
        .lease(Duration::from_secs(60))
        .backoff(backoff, backoff)
        .build()
        .unwrap();
    let client = LockClient::new(TestBackend::new().without_wakeups().shared(), options);
    let exports = name("deaf-exports");
    let first = client
        .acquire_with(&exports, AcquireOptions::new().permit(1).timeout(PATIENCE))
        .await
        .unwrap();
    let waiter = {
        let (client, exports) = (client.clone(), exports.clone());
        tokio::spawn(async move {
            client
                .acquire_with(
                    &exports,
                    AcquireOptions::new()
                        .permit(1)
                        .timeout(Duration::from_secs(60)),
                )
                .await
        })
    };
    // The waiter has asked once and sleeps its backoff.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let released_at = tokio::time::Instant::now();
    first.release().await.unwrap();
    let second = waiter.await.unwrap().unwrap();
    // Time is paused: only a poll would move it on, by most of a backoff.
    assert!(
        released_at.elapsed() < backoff / 5,
        "the waiter was let in by the release, not by its next poll, {:?} later",
        released_at.elapsed()
    );
    second.release().await.unwrap();
}

#[tokio::test]
async fn a_payload_reaches_every_attempt_of_its_call_only() {
    let (backend, reporting) = Reporting::backend();
    let client = LockClient::new(backend.shared(), LockOptions::default());
    let lock = name("payload");
    let held = client.acquire_with(&lock, PATIENCE).await.unwrap();
    let other = LockClient::new(backend.shared(), LockOptions::default());
    let waiting = {
        let (other, lock) = (other.clone(), lock.clone());
        tokio::spawn(async move {
            other
                .acquire_with(
                    &lock,
                    AcquireOptions::new()
                        .claim(Claim::Exclusive)
                        .timeout(PATIENCE)
                        .payload(Payload::new(7u32)),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
    let payloads = reporting.payloads.lock().unwrap().clone();
    assert_eq!(payloads[0], None, "the first call had none");
    assert!(
        payloads.len() >= 3,
        "the waiter asked at least twice: {payloads:?}"
    );
    assert!(payloads[1..].iter().all(|p| *p == Some(7)), "{payloads:?}");
}

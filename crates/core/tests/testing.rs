//! The test backend users test their own code with: each control does what
//! it says, on Tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::testing::{Failure, TestBackend};
use distlock_core::{Error, LockClient, LockOptions, LossReason, MemoryBackend, TryOptions};

fn client(backend: &TestBackend) -> LockClient {
    LockClient::builder()
        .lease(Duration::from_secs(3))
        .build_shared(backend.shared())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_lost_lock_is_reported_at_once_and_the_name_is_free_again() {
    let backend = TestBackend::new();
    let (one, two) = (client(&backend), client(&backend));
    let guard = one.acquire("job").await.unwrap();
    let reader = two
        .try_acquire_with("other", TryOptions::new().shared())
        .await
        .unwrap()
        .unwrap();

    assert_eq!(backend.lose("job"), 1);
    assert_eq!(guard.lost().await, LossReason::Detected);
    assert!(!reader.is_lost(), "only the named lock is lost");
    let next = two
        .acquire_with("job", Duration::from_secs(1))
        .await
        .unwrap();
    assert!(next.fencing_token() > guard.fencing_token());
    assert!(
        !guard.release().await.unwrap(),
        "the lost grant is not ours"
    );
    assert_eq!(backend.lose("nobody-holds-this"), 0);
    assert_eq!(backend.lose(""), 0);
}

#[tokio::test(start_paused = true)]
async fn transient_failures_are_waited_out_and_denials_end_the_wait() {
    let backend = TestBackend::new();
    let client = client(&backend);
    backend.fail_next(3, Failure::Transient);
    let before = backend.calls();
    let guard = client
        .acquire_with("flaky", Duration::from_secs(10))
        .await
        .unwrap();
    // Each failed attempt's identity is released too (its outcome was
    // unknown), so the three failures are spent on more than three calls.
    assert!(backend.calls() - before > 3);
    guard.release().await.unwrap();

    backend.fail_next(1, Failure::Denied);
    let outcome = client.acquire_with("flaky", Duration::from_secs(10)).await;
    assert!(matches!(outcome, Err(Error::Denied { .. })), "{outcome:?}");
    assert!(client.try_acquire("flaky").await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_failing_store_makes_a_holder_lose_its_lease_in_virtual_time() {
    let backend = TestBackend::new();
    let client = client(&backend);
    let guard = client.acquire("held").await.unwrap();
    backend.fail_next(usize::MAX, Failure::OperationTimeout);
    let started = tokio::time::Instant::now();
    assert_eq!(guard.lost().await, LossReason::Expired);
    // Given up before the lease (3 s) ends, by the safety margin.
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_delay_longer_than_the_operation_timeout_is_a_timeout() {
    let backend = TestBackend::new();
    let client = client(&backend);
    let operation_timeout = client.options().operation_timeout();

    backend.delay_calls(operation_timeout / 2);
    let started = tokio::time::Instant::now();
    let guard = client.try_acquire("slow").await.unwrap().unwrap();
    assert_eq!(started.elapsed(), operation_timeout / 2);
    guard.release().await.unwrap();

    backend.delay_calls(operation_timeout * 2);
    let outcome = client.try_acquire("slow").await;
    assert!(
        matches!(
            outcome,
            Err(Error::OperationTimeout {
                operation: "acquire",
                ..
            })
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn it_wraps_any_backend() {
    let backend = TestBackend::wrapping(Arc::new(MemoryBackend::new()));
    let client = LockClient::new(backend.shared(), LockOptions::default());
    let guard = client.acquire("wrapped").await.unwrap();
    assert_eq!(client.list().await.unwrap().len(), 1);
    backend.fail_next(1, Failure::Transient);
    assert!(client.list().await.unwrap_err().is_transient());
    guard.release().await.unwrap();
}

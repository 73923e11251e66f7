//! `LockGuard::release_with`: a backend-specific operation in place of the
//! release, with the release's ordering, hand-off and cancel safety.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::backend::Backend;
use distlock_core::{Error, LockClient, LockName, LockOptions, LossReason, MemoryBackend};

fn client(backend: &Arc<MemoryBackend>) -> LockClient {
    let options = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .build()
        .unwrap();
    LockClient::new(backend.clone(), options)
}

fn name(text: &str) -> LockName {
    LockName::new(text).unwrap()
}

#[tokio::test]
async fn the_operation_gets_the_lease_and_its_output_is_returned() {
    let backend = Arc::new(MemoryBackend::new());
    let client = client(&backend);
    let lock = name("with");
    let guard = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let token = guard.fencing_token();
    let signal = guard.lost_signal();
    let operation_backend = backend.clone();
    let (still_ours, seen_token) = guard
        .release_with(move |lease| async move {
            let released = operation_backend.release(&lease).await?;
            Ok((released, lease.fencing_token))
        })
        .await
        .unwrap();
    assert!(still_ours);
    assert_eq!(seen_token, token);
    assert_eq!(signal.lost().await, LossReason::Released);
    let again = client.try_acquire(&lock).await.unwrap().expect("released");
    assert!(again.fencing_token() > token);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_local_waiter_goes_after_the_operation() {
    let backend = Arc::new(MemoryBackend::new());
    let client = client(&backend);
    let lock = name("handoff");
    let guard = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let finished = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (client, lock, finished) = (client.clone(), lock.clone(), finished.clone());
        tokio::spawn(async move {
            let guard = client
                .acquire_with(&lock, Duration::from_secs(30))
                .await
                .unwrap();
            assert!(finished.load(Ordering::SeqCst), "the operation ran first");
            guard.release().await.unwrap();
        })
    };
    let operation_backend = backend.clone();
    guard
        .release_with(move |lease| async move {
            tokio::task::yield_now().await;
            let released = operation_backend.release(&lease).await;
            finished.store(true, Ordering::SeqCst);
            released
        })
        .await
        .unwrap();
    waiter.await.unwrap();
}

#[tokio::test]
async fn a_lost_lease_skips_the_operation_and_is_lost() {
    let backend = Arc::new(MemoryBackend::new());
    let client = client(&backend);
    let lock = name("lost");
    let guard = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    assert!(client.force_release(&lock).await.unwrap());
    assert!(matches!(guard.extend().await, Err(Error::Lost { .. })));
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let outcome = guard
        .release_with(move |_| async move {
            flag.store(true, Ordering::SeqCst);
            Ok(())
        })
        .await;
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
    assert!(!called.load(Ordering::SeqCst));
    // The name is free for this client's next task.
    let next = client.try_acquire(&lock).await.unwrap().expect("free");
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_release_with_still_runs_the_operation_to_its_end() {
    let backend = Arc::new(MemoryBackend::new());
    let client = client(&backend);
    let lock = name("dropped");
    let guard = client.acquire_with(&lock, Duration::ZERO).await.unwrap();
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let (done, finished) = tokio::sync::oneshot::channel::<bool>();
    let operation_backend = backend.clone();
    let release = guard.release_with(move |lease| async move {
        let _ = wait.await;
        let released = operation_backend.release(&lease).await;
        let _ = done.send(*released.as_ref().unwrap_or(&false));
        released
    });
    // Give up on the release while the operation waits.
    assert!(
        tokio::time::timeout(Duration::from_millis(20), release)
            .await
            .is_err()
    );
    go.send(()).unwrap();
    assert!(finished.await.unwrap(), "the operation ran to its end");
    let next = client
        .acquire_with(&lock, Duration::from_secs(30))
        .await
        .expect("the name is handed on");
    next.release().await.unwrap();
}

#[tokio::test]
async fn an_operation_that_does_not_answer_times_out() {
    let backend = Arc::new(MemoryBackend::new());
    let options = LockOptions::builder()
        .lease(Duration::from_millis(600))
        .build()
        .unwrap();
    let client = LockClient::new(backend.clone(), options);
    let guard = client
        .acquire_with(&name("hangs"), Duration::ZERO)
        .await
        .unwrap();
    let signal = guard.lost_signal();
    let outcome = guard
        .release_with(|_| std::future::pending::<distlock_core::Result<()>>())
        .await;
    match outcome {
        Err(
            error @ Error::OperationTimeout {
                operation: "release",
                ..
            },
        ) => {
            assert!(error.is_transient())
        }
        other => panic!("expected the release to time out, got {other:?}"),
    }
    assert!(signal.is_lost());
}

#[test]
fn new_errors_say_what_and_where() {
    let missing = Error::NotFound {
        what: "entity \"r-1\" in app.reports".into(),
    };
    assert_eq!(
        missing.to_string(),
        "entity \"r-1\" in app.reports not found"
    );
    assert!(!missing.is_transient());
    let invalid = Error::InvalidData {
        what: "entity 7".into(),
        field: "items[2].qty".into(),
        reason: "invalid type: string, expected i64".into(),
    };
    assert_eq!(
        invalid.to_string(),
        "entity 7: field `items[2].qty`: invalid type: string, expected i64"
    );
    assert!(!invalid.is_transient());
}

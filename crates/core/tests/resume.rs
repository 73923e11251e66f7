//! Resuming a grant by its handle, on the memory backend: the guard it
//! gives is kept as any other, a handle of another store is refused, and
//! a resume waits for this client's own slot of the name.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{Error, LockClient, LockOptions, MemoryBackend, ResumeHandle};

fn options() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(3))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_resumed_guard_is_extended_and_released_like_any_other() {
    let backend = Arc::new(MemoryBackend::new());
    let before = LockClient::new(backend.clone(), options());
    let old = before.acquire("job").await.unwrap();
    let handle = old.handle();
    let after = LockClient::new(backend.clone(), options());
    let resumed = after.resume(&handle).await.unwrap();
    assert_eq!(resumed.fencing_token(), old.fencing_token());
    // Many leases later, the keeper still extends it, and the old guard
    // found out it lost it.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!resumed.is_lost());
    assert!(old.is_lost());
    let other = LockClient::new(backend, options());
    assert!(other.try_acquire("job").await.unwrap().is_none());
    assert!(resumed.release().await.unwrap());
    assert!(other.try_acquire("job").await.unwrap().is_some());
}

#[tokio::test]
async fn a_handle_of_another_store_is_refused_by_name() {
    let client = LockClient::new(Arc::new(MemoryBackend::new()), options());
    let guard = client.acquire("job").await.unwrap();
    let text = guard.handle().to_string().replace(" memory ", " redis ");
    let handle: ResumeHandle = text.parse().unwrap();
    match client.resume(&handle).await {
        Err(Error::InvalidConfig { field, reason }) => {
            assert_eq!(field, "resume handle");
            assert!(reason.contains("redis"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(guard.release().await.unwrap(), "untouched");
}

#[tokio::test(start_paused = true)]
async fn a_resume_waits_for_this_clients_own_holder_at_most_an_operation_timeout() {
    let client = LockClient::new(Arc::new(MemoryBackend::new()), options());
    let guard = client.acquire("job").await.unwrap();
    let handle = guard.handle();
    match client.resume(&handle).await {
        Err(Error::Timeout { name, waited, .. }) => {
            assert_eq!(name, "job");
            assert_eq!(waited, options().operation_timeout());
        }
        other => panic!("{other:?}"),
    }
    assert!(guard.extend().await.is_ok(), "the holder keeps its grant");
    // Once this client's holder is done with it, a resume takes the slot.
    let held_on = {
        let client = client.clone();
        let handle = handle.clone();
        tokio::spawn(async move { client.resume(&handle).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(guard);
    let outcome = held_on.await.unwrap();
    assert!(
        matches!(outcome, Err(Error::Lost { .. })),
        "the grant was released by then: {outcome:?}"
    );
}

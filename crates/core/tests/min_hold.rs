//! The shortest hold on the memory backend and the test backend: what the
//! conformance suite cannot reach on every backend (bad input, a dropped
//! guard, a set that fails, a release after the hold has passed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::backend::Backend;
use distlock_core::testing::ADMIN_LIMIT;
use distlock_core::testing::{Operation, TestBackend};
use distlock_core::{
    AcquireOptions, Claim, Error, LockClient, LockName, LossReason, MemoryBackend, TryOptions,
};

fn client() -> LockClient {
    LockClient::builder().build(MemoryBackend::new()).unwrap()
}

/// Two clients of one store, as two processes would be.
fn two_clients() -> (LockClient, LockClient) {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let client = || LockClient::builder().build_shared(store.clone()).unwrap();
    (client(), client())
}

/// A hold far longer than any test: a lock it keeps is held for the test.
const FOR_THE_TEST: Duration = Duration::from_secs(600);

fn is_min_hold_config(error: &Error) -> bool {
    matches!(error, Error::InvalidConfig { field, .. } if field == "min_hold")
}

#[tokio::test]
async fn bounds_that_cannot_be_kept_are_refused_before_anything_is_taken() {
    let locks = client();
    let asked = [
        AcquireOptions::new().min_hold(Duration::ZERO),
        AcquireOptions::new()
            .min_hold(Duration::from_secs(2))
            .max_hold(Duration::from_secs(1)),
        AcquireOptions::new()
            .shared()
            .min_hold(Duration::from_secs(1)),
        AcquireOptions::new()
            .permit(2)
            .min_hold(Duration::from_secs(1)),
    ];
    for options in asked {
        let described = format!("{options:?}");
        let error = locks.acquire_with("job", options).await.unwrap_err();
        assert!(is_min_hold_config(&error), "{described}: {error:?}");
    }
    let error = locks
        .try_acquire_with("job", TryOptions::new().min_hold(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(is_min_hold_config(&error), "{error:?}");
    let error = locks
        .acquire_all(
            [("a", Claim::Exclusive), ("b", Claim::Shared)],
            AcquireOptions::new().min_hold(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert!(is_min_hold_config(&error), "{error:?}");
    // Nothing was taken.
    for name in ["job", "a", "b"] {
        let free = locks.try_acquire(name).await.unwrap().expect("free");
        assert!(free.release().await.unwrap());
    }
}

#[tokio::test]
async fn a_backend_without_delayed_releases_refuses_min_hold_at_once() {
    let backend = TestBackend::new().without_delayed_release();
    let locks = LockClient::builder()
        .build_shared(backend.shared())
        .unwrap();
    let options = || TryOptions::new().min_hold(Duration::from_secs(1));
    for outcome in [
        locks.acquire_with("job", options()).await.map(|_| ()),
        locks.try_acquire_with("job", options()).await.map(|_| ()),
        locks.acquire_all(["job"], options()).await.map(|_| ()),
    ] {
        assert!(
            matches!(&outcome, Err(Error::Unsupported(why)) if why.contains("min_hold")),
            "{outcome:?}"
        );
    }
    assert_eq!(backend.calls_of(Operation::Acquire), 0);
}

#[tokio::test]
async fn a_lock_released_early_stays_held_and_its_guard_says_released() {
    let (holder, other) = two_clients();
    let guard = holder
        .acquire_with("job", AcquireOptions::new().min_hold(FOR_THE_TEST))
        .await
        .unwrap();
    let lost = guard.lost_signal();
    assert!(guard.release().await.unwrap(), "it was ours");
    assert_eq!(lost.lost().await, LossReason::Released);
    assert!(other.try_acquire("job").await.unwrap().is_none());
    assert!(holder.try_acquire("job").await.unwrap().is_none());
    // Held by nobody's guard: only a forced release ends it early.
    assert!(
        other
            .backend()
            .force_release(&LockName::new("job").unwrap(), ADMIN_LIMIT)
            .await
            .unwrap()
    );
    let next = other.try_acquire("job").await.unwrap().expect("free");
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn a_dropped_guard_keeps_its_min_hold_too() {
    let (holder, other) = two_clients();
    let asked_at = Instant::now();
    let guard = holder
        .acquire_with(
            "job",
            AcquireOptions::new().min_hold(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    drop(guard);
    let next = other
        .acquire_with("job", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        asked_at.elapsed() >= Duration::from_millis(300),
        "granted again {:?} after it was asked for",
        asked_at.elapsed()
    );
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn a_release_after_the_min_hold_frees_the_lock_at_once() {
    let locks = client();
    let min_hold = Duration::from_millis(50);
    let guard = locks
        .acquire_with("job", AcquireOptions::new().min_hold(min_hold))
        .await
        .unwrap();
    tokio::time::sleep(min_hold * 2).await;
    assert!(guard.release().await.unwrap());
    let next = locks
        .try_acquire("job")
        .await
        .unwrap()
        .expect("free at once");
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn a_set_that_fails_releases_what_it_took_at_once() {
    let locks = client();
    let blocker = locks.try_acquire("b").await.unwrap().expect("free");
    let error = locks
        .acquire_all(
            ["a", "b"],
            AcquireOptions::new()
                .timeout(Duration::ZERO)
                .min_hold(FOR_THE_TEST),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error:?}");
    let a = locks
        .try_acquire("a")
        .await
        .unwrap()
        .expect("a was released at once");
    assert!(a.release().await.unwrap());
    assert!(blocker.release().await.unwrap());
}

#[tokio::test]
async fn a_held_set_keeps_each_member_for_its_min_hold() {
    let (holder, other) = two_clients();
    let set = holder
        .acquire_all(["a", "b"], AcquireOptions::new().min_hold(FOR_THE_TEST))
        .await
        .unwrap();
    assert!(set.release().await.unwrap());
    for name in ["a", "b"] {
        assert!(other.try_acquire(name).await.unwrap().is_none(), "{name}");
    }
}

#[tokio::test]
async fn no_extension_follows_a_delayed_release() {
    let backend = TestBackend::new();
    let options = distlock_core::LockOptions::builder()
        .lease(Duration::from_millis(400))
        .extend_every(Duration::from_millis(50))
        .build()
        .unwrap();
    let locks = LockClient::builder()
        .options(&options)
        .build_shared(backend.shared())
        .unwrap();
    let guard = locks
        .acquire_with("job", AcquireOptions::new().min_hold(FOR_THE_TEST))
        .await
        .unwrap();
    assert!(guard.release().await.unwrap());
    // The release went through the backend's hooks, as a delayed one.
    assert_eq!(backend.calls_of(Operation::DelayedRelease), 1);
    assert_eq!(backend.calls_of(Operation::Release), 0);
    let extensions = backend.calls_of(Operation::Extend);
    // Past several extension periods and the whole lease: still held, by
    // the delayed release alone.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(backend.calls_of(Operation::Extend), extensions);
    assert!(locks.try_acquire("job").await.unwrap().is_none());
}

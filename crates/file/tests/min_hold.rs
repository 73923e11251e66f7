//! The marker a release before `min_hold` leaves in a lock file: it keeps
//! writers, readers and permits out until it passes, is listed with its time
//! left, outlives the client that left it, and a forced release removes it.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::Backend;
use distlock_core::testing::ADMIN_LIMIT;
use distlock_core::{AcquireOptions, Error, LockClient, LockKind, LockName, TryOptions};
use distlock_file::FileBackend;

/// Far longer than the test: a marker of this length is live throughout.
const FOR_THE_TEST: Duration = Duration::from_secs(600);

fn client(dir: &std::path::Path) -> LockClient {
    let backend: Arc<dyn Backend> = Arc::new(FileBackend::open(dir).unwrap());
    LockClient::builder().build_shared(backend).unwrap()
}

#[tokio::test]
async fn a_marker_keeps_every_kind_out_and_outlives_its_client() {
    let dir = tempfile::tempdir().unwrap();
    let name = LockName::new("marked").unwrap();
    {
        let holder = client(dir.path());
        let guard = holder
            .acquire_with(&name, AcquireOptions::new().min_hold(FOR_THE_TEST))
            .await
            .unwrap();
        assert!(guard.release().await.unwrap());
    }
    let other = client(dir.path());
    assert!(other.try_acquire(&name).await.unwrap().is_none());
    let reader = other
        .try_acquire_with(&name, TryOptions::new().shared())
        .await
        .unwrap();
    assert!(reader.is_none(), "a reader got in past the marker");
    let permit = other
        .try_acquire_with(&name, TryOptions::new().permit(2))
        .await;
    assert!(
        matches!(permit, Err(Error::KindConflict { .. })),
        "{permit:?}"
    );
    let listed = other.backend().list(ADMIN_LIMIT).await.unwrap();
    let [info] = listed.as_slice() else {
        panic!("{listed:?}")
    };
    assert_eq!((&info.name, info.kind), (&name, LockKind::Exclusive));
    let left = info.expires_in.expect("the marker's time left");
    // The marker adds a millisecond, for the clock's rounding down.
    assert!(left <= FOR_THE_TEST + Duration::from_millis(1), "{left:?}");
}

#[tokio::test]
async fn a_forced_release_removes_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    let name = LockName::new("forced").unwrap();
    let holder = client(dir.path());
    let guard = holder
        .acquire_with(&name, AcquireOptions::new().min_hold(FOR_THE_TEST))
        .await
        .unwrap();
    let token = guard.fencing_token();
    assert!(guard.release().await.unwrap());
    assert!(
        holder
            .backend()
            .force_release(&name, ADMIN_LIMIT)
            .await
            .unwrap(),
        "it was held"
    );
    let next = holder.try_acquire(&name).await.unwrap().expect("free");
    assert!(next.fencing_token() > token);
    assert!(next.release().await.unwrap());
    assert!(holder.backend().list(ADMIN_LIMIT).await.unwrap().is_empty());
}

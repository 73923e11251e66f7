//! Unlocking an entity wakes the waiters of other handles at once.
//!
//! The waiters here poll only every 20 s and the leases last 30 s, so a
//! waiter that gets the entity within [`WOKEN_WITHIN`] was woken by the
//! change stream: neither a poll nor the lease's end could have come so
//! soon.

use std::time::Duration;

use distlock_core::{Error, LockOptions};
use distlock_mongodb::EntityLocks;
use distlock_mongodb::mongodb::Collection;
use distlock_mongodb::mongodb::bson::oid::ObjectId;
use distlock_mongodb::mongodb::bson::{Document, doc};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::*;

/// Far below the 20 s between polls.
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

/// How long the waiters are willing to wait.
const PATIENCE: Duration = Duration::from_secs(25);

/// A 30 s lease, and 20 s between attempts on a held entity.
fn slow_polling() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(30))
        .backoff(Duration::from_secs(20), Duration::from_secs(20))
        .build()
        .unwrap()
}

/// A handle whose waiters are woken from the first wait on.
async fn woken_handle<T>(collection: &Collection<T>) -> EntityLocks<T>
where
    T: Serialize + DeserializeOwned + Send + Sync,
{
    let locks = handle(collection, slow_polling());
    assert!(
        locks.start_release_wakeups().await,
        "the test server is a replica set, so it has change streams"
    );
    locks
}

/// The outcome of a waiter, which must come long before a poll could.
async fn promptly<G>(waiter: tokio::task::JoinHandle<G>) -> G {
    tokio::time::timeout(WOKEN_WITHIN, waiter)
        .await
        .expect("the waiter is woken by the unlock, long before its next poll")
        .unwrap()
}

/// Lets a spawned waiter make its first attempt and start waiting.
async fn until_waiting() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_with_a_new_value_wakes_a_waiter_of_another_handle() {
    let (reports, raw) = collections::<Report>("entity-wake").await;
    let id = ObjectId::new();
    insert_raw(&raw, doc! { "_id": id, "title": "q3", "count": 0_i64 }).await;
    let holder = handle(&reports, slow_polling());
    let waiter = woken_handle(&reports).await;

    let held = holder.lock(&id, Duration::from_secs(5)).await.unwrap();
    let waiting = tokio::spawn(async move { waiter.lock(&id, PATIENCE).await });
    until_waiting().await;
    held.release(Report::new("q3", 1)).await.unwrap();

    let next = promptly(waiting).await.expect("the waiter gets the entity");
    assert_eq!(next.value(), &Report::new("q3", 1));
    next.release_unchanged().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_to_insert_are_woken_and_ids_match_across_number_types() {
    let (reports, raw) = collections::<Report>("entity-wake-num").await;
    // Stored as a 32-bit integer; the handles name it as a 64-bit one,
    // which MongoDB takes for the same `_id`.
    insert_raw(
        &raw,
        doc! { "_id": 7_i32, "title": "seven", "count": 0_i64 },
    )
    .await;
    let holder = handle(&reports, slow_polling());
    let waiter = woken_handle(&reports).await;

    let held = holder.lock(&7_i64, Duration::from_secs(5)).await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .lock_or_insert(&7_i64, &Report::new("never", 0), PATIENCE)
            .await
    });
    until_waiting().await;
    held.release_unchanged().await.unwrap();

    let next = promptly(waiting).await.expect("the waiter gets the entity");
    assert_eq!(
        next.value(),
        &Report::new("seven", 0),
        "it was not inserted"
    );
    next.release_unchanged().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_locked_entity_wakes_its_waiters_with_not_found() {
    let (reports, raw) = collections::<Report>("entity-wake-del").await;
    let id = ObjectId::new();
    insert_raw(&raw, doc! { "_id": id, "title": "gone", "count": 0_i64 }).await;
    let holder = handle(&reports, slow_polling());
    let waiter = woken_handle(&reports).await;

    let held = holder.lock(&id, Duration::from_secs(5)).await.unwrap();
    let waiting = tokio::spawn(async move { waiter.lock(&id, PATIENCE).await });
    until_waiting().await;
    raw.delete_one(doc! { "_id": id }).await.unwrap();

    match promptly(waiting).await {
        Err(Error::NotFound { .. }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(
        !held.release_unchanged().await.unwrap(),
        "the entity is gone, and its lock with it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_lock_field_is_watched() {
    let (reports, raw) = collections::<Report>("entity-wake-field").await;
    let id = ObjectId::new();
    insert_raw(&raw, doc! { "_id": id, "title": "q4", "count": 0_i64 }).await;
    let build = || {
        EntityLocks::builder(reports.clone())
            .options(slow_polling())
            .lock_id_field("heldBy")
            .build()
            .unwrap()
    };
    let holder = build();
    let waiter = build();
    assert!(waiter.start_release_wakeups().await);

    let held = holder.lock(&id, Duration::from_secs(5)).await.unwrap();
    assert!(stored(&raw, id).await.contains_key("heldBy"));
    let waiting = tokio::spawn(async move { waiter.lock(&id, PATIENCE).await });
    until_waiting().await;
    held.release(Report::new("q4", 2)).await.unwrap();

    let next = promptly(waiting).await.expect("the waiter gets the entity");
    assert_eq!(next.value(), &Report::new("q4", 2));
    next.release_unchanged().await.unwrap();
}

#[tokio::test]
async fn wake_ups_can_be_turned_off() {
    let (reports, _raw) = collections::<Document>("entity-wake-off").await;
    let locks = EntityLocks::builder(reports)
        .release_wakeups(false)
        .build()
        .unwrap();
    assert!(!locks.start_release_wakeups().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_that_failed_is_made_again() {
    let server = OwnServer::start();
    let url = server.url();
    let admin = inspector(&url).await;
    let app = inspector(&with_app_name(&url, "probe-fails")).await;
    let reports: Collection<Report> = app.database("distlock_test").collection(&unique("probe"));
    // The probe's `aggregate` is refused once, as for missing privileges.
    fail_point(
        &admin,
        doc! { "times": 1 },
        doc! { "failCommands": ["aggregate"], "errorCode": 13, "appName": "probe-fails" },
    )
    .await;
    let locks = handle(&reports, slow_polling());
    assert!(
        !locks.start_release_wakeups().await,
        "the probe was refused"
    );
    assert!(
        locks.start_release_wakeups().await,
        "a refusal may pass, so the next call probes again"
    );
}

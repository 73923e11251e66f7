//! Entity locks on a handle whose own reads prefer secondaries and use a
//! read concern change streams refuse: every lock command still goes to
//! the primary, and wake-ups still work. On a one-node replica set the
//! primary is the only member, so this shows that such a handle's options
//! are replaced, not where a secondary would have answered (a unit test
//! checks the options themselves).

use std::time::Duration;

use distlock_core::LockOptions;
use distlock_mongodb::mongodb::Collection;
use distlock_mongodb::mongodb::bson::doc;
use distlock_mongodb::mongodb::bson::oid::ObjectId;
use distlock_mongodb::mongodb::options::{
    CollectionOptions, ReadConcern, ReadPreference, SelectionCriteria,
};

use super::*;

/// `name` in the test database, through a handle that prefers secondaries
/// and reads with `local`.
async fn preferring_secondaries(name: &str) -> Collection<Report> {
    let client = inspector(&shared_url()).await;
    let options = CollectionOptions::builder()
        .selection_criteria(SelectionCriteria::ReadPreference(
            ReadPreference::SecondaryPreferred { options: None },
        ))
        .read_concern(ReadConcern::local())
        .build();
    client
        .database("distlock_test")
        .collection_with_options(name, options)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_preferring_secondaries_locks_extends_and_wakes_on_the_primary() {
    let name = unique("entity-secondary");
    let reports = preferring_secondaries(&name).await;
    let raw = raw_collection(&inspector(&shared_url()).await, &name);
    let id = ObjectId::new();
    insert_raw(&raw, doc! { "_id": id, "title": "t", "count": 0_i64 }).await;

    // A 2 s lease, held through three leases' worth of background
    // extensions, none of them taken for a loss.
    let extending = handle(&reports, short_lease(Duration::from_secs(2)));
    let held = extending.lock(&id, Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!held.is_lost(), "the lease was extended on the primary");
    held.extend().await.unwrap();
    held.release(Report::new("t", 1)).await.unwrap();

    // 30 s leases, and waiters that poll only every 20 s, past their
    // patience: only a wake-up can serve them.
    let slow = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .backoff(Duration::from_secs(20), Duration::from_secs(20))
        .build()
        .unwrap();
    let holder = handle(&reports, slow.clone());
    let waiter = handle(&reports, slow);
    assert!(
        waiter.start_release_wakeups().await,
        "the change stream opens whatever read concern the handle has"
    );
    let held = holder.lock(&id, Duration::from_secs(5)).await.unwrap();
    let waiting = tokio::spawn(async move { waiter.lock(&id, Duration::from_secs(15)).await });
    // Let the waiter make its first attempt and start waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release(Report::new("t", 2)).await.unwrap();
    let next = waiting
        .await
        .unwrap()
        .expect("the waiter is woken by the release");
    assert_eq!(next.value(), &Report::new("t", 2), "it read the write");
    next.release_unchanged().await.unwrap();

    let read = holder.read(&id).await.unwrap();
    assert_eq!((read.value, read.version), (Report::new("t", 2), 2));
    assert!(
        holder
            .update_if_unchanged(&id, 2, &Report::new("t", 3))
            .await
            .unwrap()
    );
}

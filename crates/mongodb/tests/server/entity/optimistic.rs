//! Optimistic updates: version checks, and how they meet entity locks.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::Error;
use distlock_mongodb::mongodb::bson::doc;
use tokio::sync::Barrier;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_concurrent_updates_at_one_version_applies() {
    let (reports, raw) = collections::<Report>("entity-optimistic").await;
    insert_raw(
        &raw,
        doc! { "_id": "r", "title": "t", "count": 0_i64, "owner": "ops" },
    )
    .await;
    let a = handle(&reports, options());
    let b = handle(&reports, options());
    for round in 0..10_u64 {
        let read = a.read("r").await.unwrap();
        assert_eq!(read.version, round);
        let barrier = Arc::new(Barrier::new(2));
        let updates: Vec<_> = [(a.clone(), "a"), (b.clone(), "b")]
            .into_iter()
            .map(|(locks, who)| {
                let barrier = barrier.clone();
                let next = Report::new(who, read.value.count + 1);
                tokio::spawn(async move {
                    barrier.wait().await;
                    locks.update_if_unchanged("r", round, &next).await
                })
            })
            .collect();
        let mut applied = 0;
        for update in updates {
            if update.await.unwrap().unwrap() {
                applied += 1;
            }
        }
        assert_eq!(applied, 1, "round {round}");
    }
    let last = stored(&raw, "r").await;
    assert_eq!(last.get_i64("count").unwrap(), 10);
    assert_eq!(last.get_i64("version").unwrap(), 10);
    assert_eq!(last.get_str("owner").unwrap(), "ops");
}

#[tokio::test]
async fn optimistic_updates_yield_to_entity_locks() {
    let (reports, raw) = collections::<Report>("entity-mixed").await;
    insert_raw(&raw, doc! { "_id": "r", "title": "t", "count": 0_i64 }).await;
    let locks = handle(&reports, options());
    let before = locks.read("r").await.unwrap();
    assert_eq!(before.version, 0, "a missing version counts as 0");

    let guard = locks.lock("r", Duration::from_secs(5)).await.unwrap();
    assert!(
        !locks
            .update_if_unchanged("r", before.version, &Report::new("optimist", 1))
            .await
            .unwrap(),
        "refused while the entity is locked"
    );
    guard.release(Report::new("pessimist", 1)).await.unwrap();
    assert!(
        !locks
            .update_if_unchanged("r", before.version, &Report::new("optimist", 1))
            .await
            .unwrap(),
        "refused: the locked write moved the version on"
    );
    let fresh = locks.read("r").await.unwrap();
    assert_eq!(fresh.value, Report::new("pessimist", 1));
    assert!(
        locks
            .update_if_unchanged("r", fresh.version, &Report::new("optimist", 2))
            .await
            .unwrap()
    );
    assert_eq!(
        stored(&raw, "r").await.get_str("title").unwrap(),
        "optimist"
    );
}

#[tokio::test]
async fn an_optimistic_update_of_a_missing_entity_is_not_found() {
    let (reports, raw) = collections::<Report>("entity-optimistic-missing").await;
    let locks = handle(&reports, options());
    assert!(matches!(
        locks
            .update_if_unchanged("nope", 0, &Report::new("t", 1))
            .await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 0);
}

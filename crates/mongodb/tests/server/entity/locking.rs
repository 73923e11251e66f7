//! Mutual exclusion, waiting, tokens, extension, loss and errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::{Error, LossReason};
use distlock_mongodb::mongodb::bson::oid::ObjectId;
use distlock_mongodb::mongodb::bson::{Bson, DateTime, Uuid, doc};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_cannot_both_hold_the_same_entity() {
    let (reports, raw) = collections::<Report>("entity-excl").await;
    let id = ObjectId::new();
    insert_raw(&raw, doc! { "_id": id, "title": "q3", "count": 0_i64 }).await;
    let a = handle(&reports, options());
    let b = handle(&reports, options());

    let held = a.lock(&id, Duration::from_secs(5)).await.unwrap();
    assert!(b.try_lock(&id).await.unwrap().is_none());
    assert!(a.try_lock(&id).await.unwrap().is_none(), "same handle too");
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock(&id, Duration::from_secs(30)).await })
    };
    held.release(Report::new("q3", 1)).await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert_eq!(
        next.value(),
        &Report::new("q3", 1),
        "it saw the first write"
    );
    next.release_unchanged().await.unwrap();

    // Two tasks, each with its own handle, increment concurrently; an
    // overlap detector checks that they never hold the entity together.
    const ROUNDS: i64 = 20;
    let inside = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = [a, b]
        .into_iter()
        .map(|locks| {
            let inside = inside.clone();
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let mut guard = locks.lock(&id, Duration::from_secs(30)).await.unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokio::task::yield_now().await;
                    guard.value_mut().count += 1;
                    inside.store(false, Ordering::SeqCst);
                    guard.commit().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        stored(&raw, id).await.get_i64("count").unwrap(),
        1 + 2 * ROUNDS
    );
}

#[tokio::test]
async fn different_entities_never_block_each_other() {
    let (reports, raw) = collections::<Report>("entity-indep").await;
    for id in ["a", "b"] {
        insert_raw(&raw, doc! { "_id": id, "title": id, "count": 0_i64 }).await;
    }
    let one = handle(&reports, options());
    let other = handle(&reports, options());
    let a = one.lock("a", Duration::from_secs(5)).await.unwrap();
    let b = other.try_lock("b").await.unwrap().expect("b is free");
    let b_again = one.try_lock("b").await.unwrap();
    assert!(b_again.is_none(), "b is held, by the other handle");
    b.release_unchanged().await.unwrap();
    let b = one
        .try_lock("b")
        .await
        .unwrap()
        .expect("one handle holds two");
    assert_eq!(b.value().title, "b");
    assert!(a.release_unchanged().await.unwrap());
    assert!(b.release_unchanged().await.unwrap());
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_per_entity() {
    let (reports, raw) = collections::<Report>("entity-tokens").await;
    insert_raw(&raw, doc! { "_id": 1, "title": "t", "count": 0_i64 }).await;
    let locks = handle(&reports, options());
    let mut last = 0;
    for round in 0..6 {
        let guard = locks.lock(&1, Duration::from_secs(5)).await.unwrap();
        let token = guard.fencing_token();
        assert!(token > last, "round {round}: {token} after {last}");
        assert_eq!(
            stored(&raw, 1).await.get_i64("lockToken").unwrap(),
            token as i64
        );
        last = token;
        match round % 4 {
            0 => guard.release(Report::new("t", round)).await.unwrap(),
            1 => assert!(guard.release_unchanged().await.unwrap()),
            2 => guard.commit().await.unwrap(),
            _ => drop(guard),
        }
    }
    // Even after the entity is deleted and inserted again.
    raw.delete_one(doc! { "_id": 1 }).await.unwrap();
    let guard = locks
        .lock_or_insert(&1, &Report::new("again", 0), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(guard.inserted());
    assert!(guard.fencing_token() > last);
    guard.release_unchanged().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_extended_in_the_background_and_by_hand() {
    let (reports, raw) = collections::<Report>("entity-extend").await;
    insert_raw(&raw, doc! { "_id": "r", "title": "t", "count": 0_i64 }).await;
    let lease = Duration::from_secs(2);
    let locks = handle(&reports, short_lease(lease));
    let guard = locks.lock("r", Duration::from_secs(5)).await.unwrap();
    let first = stored(&raw, "r")
        .await
        .get_datetime("lockExpiresAt")
        .copied()
        .unwrap();
    // Two and a half leases: the lock would have expired without the keeper.
    tokio::time::sleep(lease * 5 / 2).await;
    assert!(!guard.is_lost());
    let later = stored(&raw, "r")
        .await
        .get_datetime("lockExpiresAt")
        .copied()
        .unwrap();
    assert!(later > first, "{later} after {first}");
    guard.extend().await.unwrap();
    assert!(locks.try_lock("r").await.unwrap().is_none());
    guard.commit().await.unwrap();
}

#[tokio::test]
async fn a_forced_unlock_is_reported_as_lost() {
    let (reports, raw) = collections::<Report>("entity-forced").await;
    insert_raw(&raw, doc! { "_id": "r", "title": "t", "count": 0_i64 }).await;
    let holder = handle(&reports, options());
    let admin = handle(&reports, options());
    let guard = holder.lock("r", Duration::from_secs(5)).await.unwrap();
    assert!(admin.force_unlock("r").await.unwrap());
    match guard.extend().await {
        Err(Error::Lost { name }) => assert!(name.contains("\"r\""), "{name}"),
        other => panic!("expected Lost, got {other:?}"),
    }
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost() resolves");
    assert_eq!(reason, LossReason::Refused);
    match guard.release(Report::new("t", 99)).await {
        Err(Error::Lost { .. }) => {}
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(stored(&raw, "r").await.get_i64("count").unwrap(), 0);
}

#[tokio::test]
async fn a_stale_holder_gets_lost_and_writes_nothing() {
    let (reports, raw) = collections::<Report>("entity-stale").await;
    insert_raw(&raw, doc! { "_id": "r", "title": "t", "count": 0_i64 }).await;
    let stale = handle(&reports, options());
    let next = handle(&reports, options());
    let old = stale.lock("r", Duration::from_secs(5)).await.unwrap();
    // The server's clock passes the stale holder's expiry (moved back,
    // rather than waited for).
    let past = DateTime::from_millis(DateTime::now().timestamp_millis() - 60_000);
    raw.update_one(
        doc! { "_id": "r" },
        doc! { "$set": { "lockExpiresAt": past } },
    )
    .await
    .unwrap();
    let new = next.lock("r", Duration::from_secs(5)).await.unwrap();
    assert!(new.fencing_token() > old.fencing_token());

    // While the new holder holds it, and after it released it.
    match old.release(Report::new("stale", 99)).await {
        Err(Error::Lost { .. }) => {}
        other => panic!("expected Lost, got {other:?}"),
    }
    let held = stored(&raw, "r").await;
    assert_eq!(held.get_str("title").unwrap(), "t");
    assert!(
        held.get_str("lockId").is_ok(),
        "the new holder keeps its lock"
    );
    new.release(Report::new("fresh", 1)).await.unwrap();

    let again = stale.lock("r", Duration::from_secs(5)).await.unwrap();
    raw.update_one(
        doc! { "_id": "r" },
        doc! { "$set": { "lockExpiresAt": past } },
    )
    .await
    .unwrap();
    next.lock("r", Duration::from_secs(5))
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert!(matches!(
        again.release(Report::new("stale", 99)).await,
        Err(Error::Lost { .. })
    ));
    let after = stored(&raw, "r").await;
    assert_eq!(after.get_str("title").unwrap(), "fresh");
    assert_eq!(after.get_i64("count").unwrap(), 1);
}

#[tokio::test]
async fn a_missing_entity_is_not_found() {
    let (reports, raw) = collections::<Report>("entity-missing").await;
    let locks = handle(&reports, options());
    let id = ObjectId::new();
    match locks.lock(&id, Duration::from_secs(30)).await {
        Err(Error::NotFound { what }) => assert!(what.contains(&id.to_hex()), "{what}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(
        locks.try_lock(&id).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(locks.read(&id).await, Err(Error::NotFound { .. })));
    assert_eq!(
        raw.count_documents(doc! {}).await.unwrap(),
        0,
        "nothing was created"
    );
}

#[tokio::test]
async fn a_malformed_document_names_the_field_and_stays_unlocked() {
    let (reports, raw) = collections::<Report>("entity-malformed").await;
    insert_raw(
        &raw,
        doc! { "_id": "wrong-type", "title": "t", "count": "many" },
    )
    .await;
    insert_raw(&raw, doc! { "_id": "missing", "count": 1_i64 }).await;
    let locks = handle(&reports, options());
    for (id, field) in [("wrong-type", "count"), ("missing", "title")] {
        match locks.lock(id, Duration::from_secs(5)).await {
            Err(error @ Error::InvalidData { .. }) => {
                let Error::InvalidData { field: got, .. } = &error else {
                    unreachable!()
                };
                assert_eq!(got, field, "{error}");
                assert!(error.to_string().contains(field), "{error}");
            }
            other => panic!("expected InvalidData, got {other:?}"),
        }
        let document = stored(&raw, id).await;
        assert!(
            document.get("lockId").is_none(),
            "unlocked again: {document}"
        );
    }
}

#[tokio::test]
async fn ids_of_every_kind_lock_their_own_entity() {
    let (reports, raw) = collections::<Report>("entity-ids").await;
    let ids = [
        Bson::ObjectId(ObjectId::new()),
        Bson::from(Uuid::new()),
        Bson::String("$$NOW".into()),
        Bson::String("a.b\0c".into()),
        Bson::Int32(7),
        Bson::Int64(1 << 40),
    ];
    for id in &ids {
        insert_raw(
            &raw,
            doc! { "_id": id.clone(), "title": "t", "count": 0_i64 },
        )
        .await;
    }
    let locks = handle(&reports, options());
    for id in &ids {
        let mut guard = locks.lock(id, Duration::from_secs(5)).await.unwrap();
        assert_eq!(guard.id(), id);
        guard.value_mut().count += 1;
        guard.commit().await.unwrap();
    }
    for id in &ids {
        let document = stored(&raw, id.clone()).await;
        assert_eq!(document.get_i64("count").unwrap(), 1, "{document}");
        assert!(document.get("lockId").is_none(), "{document}");
    }
    // The server compares numbers by value: 7 as int32 and as int64 are one
    // entity, and so one lock.
    let guard = locks.lock(&7_i32, Duration::from_secs(5)).await.unwrap();
    let other = handle(&reports, options());
    assert!(other.try_lock(&7_i64).await.unwrap().is_none());
    guard.release_unchanged().await.unwrap();
    assert_eq!(
        raw.count_documents(doc! {}).await.unwrap(),
        ids.len() as u64
    );
}

#[tokio::test]
async fn an_id_that_is_a_query_locks_and_reads_nothing() {
    let (reports, raw) = collections::<Report>("entity-query-id").await;
    insert_raw(
        &raw,
        doc! { "_id": "victim", "title": "mine", "count": 1_i64 },
    )
    .await;
    let locks = handle(&reports, options());
    // What a request body might carry where an id is expected.
    let crafted = serde_json::json!({ "$gt": "" });
    for outcome in [
        locks.try_lock(&crafted).await.map(|_| ()),
        locks.read(&crafted).await.map(|_| ()),
        locks
            .update_if_unchanged(&crafted, 0, &Report::new("mallory", 0))
            .await
            .map(|_| ()),
    ] {
        assert!(
            matches!(outcome, Err(Error::InvalidName { .. })),
            "{outcome:?}"
        );
    }
    let victim = stored(&raw, "victim").await;
    assert_eq!(victim.get_str("title").unwrap(), "mine");
    assert!(!victim.contains_key("lockId"), "{victim}");
}

//! What locking, extending and releasing write, and what they leave alone.

use std::time::Duration;

use distlock_core::Error;
use distlock_mongodb::EntityLocks;
use distlock_mongodb::mongodb::bson::{Bson, DateTime, doc};
use serde::{Deserialize, Serialize};

use super::*;

#[tokio::test]
async fn release_persists_the_value_and_clears_the_lock() {
    let (reports, raw) = collections::<Report>("entity-persist").await;
    insert_raw(&raw, doc! { "_id": "r", "title": "draft", "count": 1_i64 }).await;
    let locks = handle(&reports, options());
    let guard = locks.lock("r", Duration::from_secs(5)).await.unwrap();
    assert_eq!(guard.value(), &Report::new("draft", 1));
    let token = guard.fencing_token();
    let locked = stored(&raw, "r").await;
    assert_eq!(locked.get_str("lockId").unwrap().len(), 32, "{locked}");
    assert!(locked.get_datetime("lockExpiresAt").is_ok(), "{locked}");

    guard.release(Report::new("final", 2)).await.unwrap();
    let released = stored(&raw, "r").await;
    assert_eq!(released.get_str("title").unwrap(), "final");
    assert_eq!(released.get_i64("count").unwrap(), 2);
    assert!(released.get("lockId").is_none(), "{released}");
    assert!(released.get("lockExpiresAt").is_none(), "{released}");
    assert_eq!(released.get_i64("lockToken").unwrap(), token as i64);
    assert_eq!(
        released.get_i64("version").unwrap(),
        1,
        "a write bumps the version"
    );

    let read = locks.read("r").await.unwrap();
    assert_eq!(read.value, Report::new("final", 2));
    assert_eq!(read.version, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_the_type_does_not_model_survive_lock_extend_and_release() {
    let (reports, raw) = collections::<Report>("entity-unmodelled").await;
    let created = DateTime::from_millis(1_700_000_000_000);
    let extra = doc! {
        "owner": "ops",
        "notes": { "deep": [1, 2, { "x": "y" }] },
        "createdAt": created,
        "count32": 5_i32,
    };
    let mut original = doc! { "_id": "r", "title": "t", "count": 0_i64 };
    original.extend(extra.clone());
    insert_raw(&raw, original).await;
    let keeps_extra = |document: &distlock_mongodb::mongodb::bson::Document| {
        for (name, value) in &extra {
            assert_eq!(document.get(name), Some(value), "{name} in {document}");
        }
    };
    let locks = handle(&reports, short_lease(Duration::from_secs(2)));

    let mut guard = locks.lock("r", Duration::from_secs(5)).await.unwrap();
    keeps_extra(&stored(&raw, "r").await);
    guard.extend().await.unwrap();
    // And the background extensions of a few cadences.
    tokio::time::sleep(Duration::from_secs(2)).await;
    keeps_extra(&stored(&raw, "r").await);
    guard.value_mut().title = "changed".into();
    guard.commit().await.unwrap();
    let after = stored(&raw, "r").await;
    keeps_extra(&after);
    assert_eq!(after.get_str("title").unwrap(), "changed");

    let guard = locks.lock("r", Duration::from_secs(5)).await.unwrap();
    assert!(guard.release_unchanged().await.unwrap());
    keeps_extra(&stored(&raw, "r").await);
    drop(locks.lock("r", Duration::from_secs(5)).await.unwrap());
    // The dropped guard unlocks in the background.
    let again = locks.lock("r", Duration::from_secs(30)).await.unwrap();
    again.release_unchanged().await.unwrap();
    let last = stored(&raw, "r").await;
    keeps_extra(&last);
    assert_eq!(last.get_str("title").unwrap(), "changed");
}

#[tokio::test]
async fn the_lock_fields_can_be_renamed() {
    let (reports, raw) = collections::<Report>("entity-renamed").await;
    insert_raw(
        &raw,
        doc! { "_id": "r", "title": "t", "count": 0_i64, "lockId": "theirs" },
    )
    .await;
    let locks = EntityLocks::builder(reports)
        .options(options())
        .lock_id_field("_lock")
        .lock_expires_at_field("_lockUntil")
        .lock_token_field("_lockToken")
        .version_field("_rev")
        .build()
        .unwrap();
    let guard = locks.lock("r", Duration::from_secs(5)).await.unwrap();
    let locked = stored(&raw, "r").await;
    assert_eq!(locked.get_str("_lock").unwrap().len(), 32, "{locked}");
    assert!(locked.get_datetime("_lockUntil").is_ok(), "{locked}");
    assert_eq!(
        locked.get_i64("_lockToken").unwrap(),
        guard.fencing_token() as i64
    );
    assert_eq!(
        locked.get_str("lockId").unwrap(),
        "theirs",
        "an ordinary field now"
    );
    guard.release(Report::new("t", 1)).await.unwrap();
    let released = stored(&raw, "r").await;
    assert!(released.get("_lock").is_none(), "{released}");
    assert_eq!(released.get_i64("_rev").unwrap(), 1);
    assert_eq!(released.get_str("lockId").unwrap(), "theirs");

    let refused = EntityLocks::<Report>::builder(raw.clone_with_type())
        .lock_id_field("a.b")
        .build();
    assert!(
        matches!(refused, Err(Error::InvalidConfig { ref field, .. }) if field == "lock_id_field"),
        "{refused:?}"
    );
}

/// A value whose strings look like expressions and field paths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Tricky {
    title: String,
    nested: Nested,
    list: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Nested {
    a: String,
    b: Option<String>,
}

#[tokio::test]
async fn values_are_stored_as_written() {
    let (tricky, raw) = collections::<Tricky>("entity-literal").await;
    let locks = handle(&tricky, options());
    let default = Tricky {
        title: "$$NOW".into(),
        nested: Nested {
            a: "$$ROOT".into(),
            b: Some("$lockId".into()),
        },
        list: vec!["$x".into(), "$$REMOVE".into()],
    };
    let guard = locks
        .lock_or_insert("t", &default, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(guard.inserted());
    assert_eq!(guard.value(), &default);
    let inserted = stored(&raw, "t").await;
    assert_eq!(inserted.get_str("title").unwrap(), "$$NOW");
    assert_eq!(
        inserted.get_document("nested").unwrap(),
        &doc! { "a": "$$ROOT", "b": "$lockId" }
    );
    let changed = Tricky {
        title: "$count".into(),
        nested: Nested {
            a: "{ \"$gt\": 1 }".into(),
            b: None,
        },
        list: vec!["$$NOW".into()],
    };
    guard.release(changed.clone()).await.unwrap();
    let written = stored(&raw, "t").await;
    assert_eq!(written.get_str("title").unwrap(), "$count");
    assert_eq!(
        written.get_document("nested").unwrap().get("b"),
        Some(&Bson::Null)
    );
    assert_eq!(locks.read("t").await.unwrap().value, changed);
}

#[tokio::test]
async fn a_value_that_is_not_a_document_is_refused_and_unlocks() {
    let (maps, raw) = collections::<std::collections::BTreeMap<String, Bson>>("entity-shape").await;
    insert_raw(&raw, doc! { "_id": "m", "a": 1_i64 }).await;
    let locks = handle(&maps, options());
    let guard = locks.lock("m", Duration::from_secs(5)).await.unwrap();
    let dotted = [("x.y".to_owned(), Bson::Int64(2))].into_iter().collect();
    match guard.release(dotted).await {
        Err(Error::InvalidData { field, .. }) => assert_eq!(field, "x.y"),
        other => panic!("expected InvalidData, got {other:?}"),
    }
    let after = stored(&raw, "m").await;
    assert!(after.get("lockId").is_none(), "unlocked: {after}");
    assert!(
        after.get("x.y").is_none() && after.get("x").is_none(),
        "{after}"
    );
}

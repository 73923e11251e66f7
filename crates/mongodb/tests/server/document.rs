//! The collection's index and the documents' shape.

use std::time::Duration;

use distlock_core::{Holder, LockName, LockOptions};
use distlock_mongodb::mongodb::bson::{Bson, doc};

use crate::common::*;

#[tokio::test]
async fn the_ttl_index_exists_with_expiry_zero() {
    let url = shared_url();
    let collection = unique("ttl");
    let _backend = backend_at(&url, &collection).await;
    // A second backend on the same collection must not fail on the index.
    let _again = backend_at(&url, &collection).await;
    let inspector = inspector(&url).await;
    let (options, _) = ttl_index(&raw_collection(&inspector, &collection)).await;
    assert_eq!(options.expire_after, Some(Duration::ZERO), "{options:?}");
    assert_eq!(
        options.partial_filter_expression,
        Some(doc! { "queue": null }),
        "documents with a fair line are outside the index: {options:?}"
    );
}

#[tokio::test]
async fn a_grant_and_a_release_leave_the_documented_shape() {
    let url = shared_url();
    let collection = unique("shape");
    let backend = backend_at(&url, &collection).await;
    let options = LockOptions::builder().label("shape test").build().unwrap();
    let lease = options.lease();
    let client = client(backend, options);
    let name = lock_name("shape");
    let guard = client
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();

    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let held = raw
        .find_one(doc! { "_id": name.as_str() })
        .await
        .unwrap()
        .expect("the lock document");
    let lock_id = held.get_str("lockId").expect("lockId is a string");
    assert_eq!(lock_id.len(), 32, "{held:?}");
    assert!(
        lock_id
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "{held:?}"
    );
    assert_eq!(
        held.get("fencingToken"),
        Some(&Bson::Int64(guard.fencing_token() as i64)),
        "{held:?}"
    );
    let acquired_at = held
        .get_datetime("acquiredAt")
        .expect("acquiredAt is a date");
    let expires_at = held.get_datetime("expiresAt").expect("expiresAt is a date");
    assert_eq!(
        expires_at.timestamp_millis() - acquired_at.timestamp_millis(),
        lease.as_millis() as i64,
        "{held:?}"
    );
    let holder = held.get_document("holder").expect("holder is a document");
    let me = Holder::this_process(Some("shape test"));
    assert_eq!(holder.get_str("host").unwrap(), me.host);
    assert_eq!(holder.get("pid"), Some(&Bson::Int64(i64::from(me.pid))));
    assert_eq!(holder.get_str("label").unwrap(), "shape test");

    let token = guard.fencing_token();
    assert!(guard.release().await.unwrap());
    let released = raw
        .find_one(doc! { "_id": name.as_str() })
        .await
        .unwrap()
        .expect("a released lock keeps its document");
    assert!(released.get("lockId").is_none(), "{released:?}");
    assert_eq!(
        released.get("fencingToken"),
        Some(&Bson::Int64(token as i64))
    );
    // The grant ended at the server's now: the document is not held.
    let still_held = raw
        .count_documents(doc! {
            "_id": name.as_str(),
            "$expr": { "$gt": ["$expiresAt", "$$NOW"] },
        })
        .await
        .unwrap();
    assert_eq!(still_held, 0, "{released:?}");
}

#[tokio::test]
async fn odd_names_are_stored_verbatim() {
    let url = shared_url();
    let collection = unique("names");
    let backend = backend_at(&url, &collection).await;
    let client = client(backend, LockOptions::default());
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let long = "é".repeat(512);
    let odd = [
        "$$NOW",
        "$x",
        "a.b",
        "nul\0byte",
        "\r\n",
        "🦀 lock",
        long.as_str(),
    ];
    let mut guards = Vec::new();
    for text in odd {
        let name = LockName::new(text).unwrap();
        let guard = client
            .acquire_with(&name, Duration::from_secs(5))
            .await
            .unwrap();
        let stored = raw
            .find_one(doc! { "_id": text })
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no document with _id {text:?}"));
        assert_eq!(stored.get_str("_id").unwrap(), text);
        guards.push(guard);
    }
    assert_eq!(
        raw.count_documents(doc! {}).await.unwrap(),
        odd.len() as u64
    );
    let listed: Vec<String> = client
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|info| info.name.as_str().to_owned())
        .collect();
    let mut expected: Vec<String> = odd.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    assert_eq!(listed, expected);
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
    assert!(client.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn list_shows_holder_token_and_time_left() {
    let url = shared_url();
    let backend = backend_at(&url, &unique("list")).await;
    let options = LockOptions::builder().label("lister").build().unwrap();
    let lease = options.lease();
    let client = client(backend, options);
    let name = lock_name("list");
    let guard = client
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    let listed = client.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    let info = &listed[0];
    assert_eq!(info.name, name);
    assert_eq!(info.fencing_token, Some(guard.fencing_token()));
    assert_eq!(info.holder, Some(Holder::this_process(Some("lister"))));
    let left = info.expires_in.expect("a lease has time left");
    assert!(left > Duration::ZERO && left <= lease, "{left:?}");
    assert!(guard.release().await.unwrap());
}

//! The lock token and the version stored as doubles, as mongosh and
//! JavaScript drivers write numbers.

use std::time::Duration;

use distlock_core::Error;
use distlock_mongodb::mongodb::bson::{Bson, DateTime, doc};

use super::*;

/// A `lockToken` stored as a whole double is the integer it holds: the next
/// lock is above it, and writes it back as an int64. Ahead of the clock,
/// `$add` on the double itself would have kept a double.
#[tokio::test]
async fn a_token_stored_as_a_double_is_counted_on_and_written_back_as_int64() {
    let (reports, raw) = collections::<Report>("entity-double").await;
    let locks = handle(&reports, options());
    let ahead = (DateTime::now().timestamp_millis() + 3_600_000) as f64;
    for (id, stored_token) in [("by-hand", 5.0), ("ahead", ahead)] {
        insert_raw(
            &raw,
            doc! { "_id": id, "title": "t", "count": 0_i64, "lockToken": stored_token },
        )
        .await;
        let guard = locks.lock(id, Duration::from_secs(5)).await.unwrap();
        assert!(
            guard.fencing_token() as f64 > stored_token,
            "{} after {stored_token}",
            guard.fencing_token()
        );
        let locked = stored(&raw, id).await;
        assert_eq!(
            locked.get("lockToken"),
            Some(&Bson::Int64(i64::try_from(guard.fencing_token()).unwrap())),
            "{locked}"
        );
        guard.release_unchanged().await.unwrap();
    }
}

/// A token no lock can follow is an error naming the field and the entity,
/// at once rather than at the deadline, and nothing is written.
#[tokio::test]
async fn a_token_no_lock_can_follow_is_an_error_and_is_left_alone() {
    let (reports, raw) = collections::<Report>("entity-bad-token").await;
    let locks = handle(&reports, options());
    for (id, token) in [
        ("fraction", Bson::Double(2.5)),
        ("negative", Bson::Int32(-1)),
    ] {
        let original = doc! { "_id": id, "title": "t", "count": 0_i64, "lockToken": token };
        insert_raw(&raw, original.clone()).await;
        match locks.lock(id, Duration::from_secs(30)).await {
            Err(Error::InvalidData { what, field, .. }) => {
                assert_eq!(field, "lockToken");
                assert!(what.contains(id), "{what}");
            }
            other => panic!("{id}: {other:?}"),
        }
        assert_eq!(stored(&raw, id).await, original, "nothing was written");
    }
}

/// A version stored as a whole double is the version it holds, for reads
/// and for the update that checks it.
#[tokio::test]
async fn a_version_stored_as_a_double_is_read_and_checked() {
    let (reports, raw) = collections::<Report>("entity-double-version").await;
    insert_raw(
        &raw,
        doc! { "_id": "r", "title": "t", "count": 0_i64, "version": 4.0 },
    )
    .await;
    let locks = handle(&reports, options());
    let read = locks.read("r").await.unwrap();
    assert_eq!(read.version, 4);
    assert!(
        locks
            .update_if_unchanged("r", 4, &Report::new("t", 1))
            .await
            .unwrap()
    );
    assert_eq!(locks.read("r").await.unwrap().version, 5);

    raw.update_one(doc! { "_id": "r" }, doc! { "$set": { "version": 5.5 } })
        .await
        .unwrap();
    match locks.read("r").await {
        Err(Error::InvalidData { field, .. }) => assert_eq!(field, "version"),
        other => panic!("{other:?}"),
    }
}

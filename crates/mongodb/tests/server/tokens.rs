//! Fencing tokens strictly increase per name.

use std::time::Duration;

use distlock_core::{AcquireOptions, Claim, Error, LockName, LockOptions, TryOptions};
use distlock_mongodb::mongodb::Collection;
use distlock_mongodb::mongodb::bson::{Bson, DateTime, Document, doc};

use crate::common::*;

#[tokio::test]
async fn tokens_increase_across_releases_and_deletions() {
    let url = shared_url();
    let collection = unique("tokens");
    let client = client(backend_at(&url, &collection).await, LockOptions::default());
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let name = lock_name("tokens");
    let mut last = 0;
    for round in 0..6 {
        let guard = client
            .acquire_with(&name, Duration::from_secs(5))
            .await
            .unwrap();
        let token = guard.fencing_token();
        assert!(token > last, "round {round}: {token} after {last}");
        last = token;
        assert!(guard.release().await.unwrap());
        if round % 2 == 1 {
            // What the TTL monitor does to an idle document.
            let deleted = raw.delete_one(doc! { "_id": name.as_str() }).await.unwrap();
            assert_eq!(deleted.deleted_count, 1);
            // The token floor is the server's time in milliseconds.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Tokens granted faster than once a millisecond run ahead of the clock.
/// The TTL index must then not delete the released document before the
/// clock catches up, or the next grant would start below the last token.
#[tokio::test]
async fn a_released_document_outlives_a_token_ahead_of_the_clock() {
    let url = shared_url();
    let collection = unique("tokens-ahead");
    let client = client(backend_at(&url, &collection).await, LockOptions::default());
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let name = lock_name("ahead");

    let guard = client
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    // An hour ahead, as a long run of quick grants would leave it.
    let ahead = DateTime::now().timestamp_millis() + 3_600_000;
    raw.update_one(
        doc! { "_id": name.as_str() },
        doc! { "$set": { "fencingToken": ahead } },
    )
    .await
    .unwrap();
    assert!(guard.release().await.unwrap());

    let released = raw
        .find_one(doc! { "_id": name.as_str() })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        released
            .get_datetime("expiresAt")
            .unwrap()
            .timestamp_millis(),
        ahead,
        "the TTL index keeps the document until the clock passes its token: {released}"
    );
    // Released all the same: free at once, and the next token is above.
    let next = client.try_acquire(&name).await.unwrap().expect("free");
    assert!(next.fencing_token() > u64::try_from(ahead).unwrap());
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn tokens_increase_across_a_server_restart() {
    let mut server = OwnServer::start();
    let url = server.url();
    let collection = unique("tokens");
    let name = lock_name("restart");
    let before = {
        let client = client(backend_at(&url, &collection).await, LockOptions::default());
        let guard = client
            .acquire_with(&name, Duration::from_secs(5))
            .await
            .unwrap();
        let token = guard.fencing_token();
        assert!(guard.release().await.unwrap());
        token
    };
    server.stop();
    server.start_again();
    let client = client(backend_at(&url, &collection).await, LockOptions::default());
    let guard = client
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        guard.fencing_token() > before,
        "{} after {before}",
        guard.fencing_token()
    );
    assert!(guard.release().await.unwrap());
}

/// The stored token of `name`, which must be an int64.
async fn stored_token(raw: &Collection<Document>, name: &LockName) -> i64 {
    let stored = raw
        .find_one(doc! { "_id": name.as_str() })
        .await
        .unwrap()
        .expect("the lock document");
    match stored.get("fencingToken") {
        Some(Bson::Int64(token)) => *token,
        other => panic!("the token must be written back as an int64, not {other:?}"),
    }
}

/// What mongosh writes for `{$set: {fencingToken: <n>}}`: a double.
async fn set_token_by_hand(raw: &Collection<Document>, name: &LockName, token: impl Into<Bson>) {
    raw.update_one(
        doc! { "_id": name.as_str() },
        doc! { "$set": { "fencingToken": token.into() } },
    )
    .upsert(true)
    .await
    .unwrap();
}

/// A token stored as a whole double is the integer it holds: the next
/// grant of any kind is above it, and is written back as an int64. Ahead of
/// the clock, `$add` on the double itself would have kept a double.
#[tokio::test]
async fn a_token_stored_as_a_double_is_counted_on_and_written_back_as_int64() {
    let url = shared_url();
    let collection = unique("tokens-double");
    let client = client(backend_at(&url, &collection).await, LockOptions::default());
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    // An hour ahead of the clock, so that `previous + 1` decides.
    let ahead = (DateTime::now().timestamp_millis() + 3_600_000) as f64;
    let claims = [
        Claim::Exclusive,
        Claim::Shared,
        Claim::Permit { limit: 2 },
        Claim::Exclusive,
    ];
    for (round, claim) in claims.into_iter().enumerate() {
        let name = lock_name("double");
        // Round 0 starts from a document someone created by hand.
        let stored = if round == 0 { 5.0 } else { ahead };
        set_token_by_hand(&raw, &name, stored).await;
        let guard = client
            .try_acquire_with(&name, claim)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{claim} on a free name"));
        assert!(
            guard.fencing_token() as f64 > stored,
            "{claim}: {} after {stored}",
            guard.fencing_token()
        );
        assert_eq!(
            stored_token(&raw, &name).await,
            i64::try_from(guard.fencing_token()).unwrap()
        );
        // Listed with the token it holds, even once it is a double again.
        set_token_by_hand(&raw, &name, guard.fencing_token() as f64).await;
        let listed = client.list().await.unwrap();
        let row = listed.iter().find(|lock| lock.name == name).unwrap();
        assert!(row.fencing_token.is_some(), "{row:?}");
        assert!(guard.release().await.unwrap());
    }
}

/// A hand-over builds on a double too.
#[tokio::test]
async fn a_hand_over_counts_on_a_token_stored_as_a_double() {
    let url = shared_url();
    let collection = unique("tokens-double-hand-over");
    let client = client(backend_at(&url, &collection).await, LockOptions::default());
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let name = lock_name("hand-over");
    let first = client
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    let ahead = (DateTime::now().timestamp_millis() + 3_600_000) as f64;
    set_token_by_hand(&raw, &name, ahead).await;
    let waiter = {
        let (client, name) = (client.clone(), name.clone());
        tokio::spawn(async move { client.acquire_with(&name, Duration::from_secs(30)).await })
    };
    // The waiter queues in the client; the release hands the lock over.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(first.release().await.unwrap());
    let second = waiter.await.unwrap().unwrap();
    assert!(second.fencing_token() as f64 > ahead);
    assert_eq!(
        stored_token(&raw, &name).await,
        i64::try_from(second.fencing_token()).unwrap()
    );
    assert!(second.release().await.unwrap());
}

/// A token no grant can follow (a fraction, a negative number, a value
/// beyond int64, text) is an error naming the field and the document, at
/// once rather than at the deadline, and nothing is written; once fixed,
/// the name is granted above the fixed value.
#[tokio::test]
async fn a_token_no_grant_can_follow_is_an_error_and_is_left_alone() {
    let url = shared_url();
    let collection = unique("tokens-bad");
    let client = client(backend_at(&url, &collection).await, LockOptions::default());
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let bad = [
        Bson::Double(5.5),
        Bson::Int64(-3),
        Bson::Double(1e30),
        Bson::String("7".into()),
    ];
    for (value, claim) in bad.into_iter().zip([
        Claim::Exclusive,
        Claim::Shared,
        Claim::Permit { limit: 2 },
        Claim::Exclusive,
    ]) {
        let name = lock_name("bad");
        set_token_by_hand(&raw, &name, value.clone()).await;
        match client
            .acquire_with(
                &name,
                AcquireOptions::new()
                    .claim(claim)
                    .timeout(Duration::from_secs(30)),
            )
            .await
        {
            Err(Error::InvalidData {
                what,
                field,
                reason,
            }) => {
                assert_eq!(field, "fencingToken");
                assert!(
                    what.contains(name.as_str()) && what.contains(&collection),
                    "{what}"
                );
                assert!(reason.contains("NumberLong"), "{reason}");
            }
            other => panic!("{claim} over {value}: {other:?}"),
        }
        let stored = raw
            .find_one(doc! { "_id": name.as_str() })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            stored,
            doc! { "_id": name.as_str(), "fencingToken": value },
            "nothing was written"
        );
        set_token_by_hand(&raw, &name, 8_i64).await;
        let guard = client
            .try_acquire_with(&name, claim)
            .await
            .unwrap()
            .unwrap();
        assert!(guard.fencing_token() > 8);
        assert!(guard.release().await.unwrap());
    }
}

/// A semaphore's limit stored as a whole double is the same limit.
#[tokio::test]
async fn a_limit_stored_as_a_double_is_the_same_limit() {
    let url = shared_url();
    let collection = unique("limit-double");
    let client = client(backend_at(&url, &collection).await, LockOptions::default());
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let name = lock_name("limit");
    let first = client
        .try_acquire_with(&name, TryOptions::new().permit(3))
        .await
        .unwrap()
        .unwrap();
    raw.update_one(
        doc! { "_id": name.as_str() },
        doc! { "$set": { "limit": 3.0 } },
    )
    .await
    .unwrap();
    match client
        .try_acquire_with(&name, TryOptions::new().permit(2))
        .await
    {
        Err(Error::KindConflict { held, .. }) => {
            assert_eq!(held, Claim::Permit { limit: 3 });
        }
        other => panic!("expected a conflict naming the limit 3, got {other:?}"),
    }
    let listed = client.list().await.unwrap();
    let row = listed.iter().find(|lock| lock.name == name).unwrap();
    assert_eq!(row.permits.map(|permits| permits.limit), Some(3));
    let second = client
        .try_acquire_with(&name, TryOptions::new().permit(3))
        .await
        .unwrap();
    assert!(second.is_some(), "a permit of the same limit is granted");
    assert!(second.unwrap().release().await.unwrap());
    assert!(first.release().await.unwrap());
}

//! Fencing tokens strictly increase per name.

use std::time::Duration;

use distlock_core::LockOptions;
use distlock_mongodb::mongodb::bson::{DateTime, doc};

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
        let guard = client.acquire(&name, Duration::from_secs(5)).await.unwrap();
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

    let guard = client.acquire(&name, Duration::from_secs(5)).await.unwrap();
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
        let guard = client.acquire(&name, Duration::from_secs(5)).await.unwrap();
        let token = guard.fencing_token();
        assert!(guard.release().await.unwrap());
        token
    };
    server.stop();
    server.start_again();
    let client = client(backend_at(&url, &collection).await, LockOptions::default());
    let guard = client.acquire(&name, Duration::from_secs(5)).await.unwrap();
    assert!(
        guard.fencing_token() > before,
        "{} after {before}",
        guard.fencing_token()
    );
    assert!(guard.release().await.unwrap());
}

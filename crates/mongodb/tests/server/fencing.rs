//! `fencing::Fence` on a collection of the test's own, with tokens from
//! real grants: a holder whose lock was taken away and granted again
//! cannot write once the new holder has, and the new holder can.

use std::time::Duration;

use distlock_core::backend::Backend as _;
use distlock_core::{LockClient, LockOptions};
use distlock_mongodb::fencing::Fence;
use distlock_mongodb::mongodb::bson::{Document, doc};

use crate::common::{backend_at, inspector, lock_name, shared_url, unique};

/// The time an administrative call made on the backend directly is
/// given, as a client gives its operation timeout.
const ADMIN_LIMIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holders_write_is_refused_and_the_new_holders_applied() {
    let url = shared_url();
    let accounts = inspector(&url)
        .await
        .database("distlock_test")
        .collection::<Document>(&unique("fenced"));
    accounts
        .insert_one(doc! { "_id": 42, "balance": 100 })
        .await
        .unwrap();
    let fence = Fence::new("meta.fencingToken").unwrap();
    let write = |token: u64| {
        let (accounts, fence) = (&accounts, &fence);
        async move {
            let (filter, update) = fence
                .guard(
                    doc! { "_id": 42 },
                    doc! { "$inc": { "balance": -10 } },
                    token,
                )
                .unwrap();
            accounts
                .update_one(filter, update)
                .await
                .unwrap()
                .modified_count
        }
    };

    let locks = unique("fencing-locks");
    let backend = backend_at(&url, &locks).await;
    let (first, second) = (
        LockClient::new(backend.clone(), LockOptions::default()),
        LockClient::new(backend_at(&url, &locks).await, LockOptions::default()),
    );
    let name = lock_name("fenced");
    let stale = first
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(write(stale.fencing_token()).await, 1, "the holder writes");
    // The holder pauses; its lock is taken away and granted again.
    assert!(backend.force_release(&name, ADMIN_LIMIT).await.unwrap());
    let fresh = second
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert_eq!(
        write(fresh.fencing_token()).await,
        1,
        "the new holder writes"
    );
    assert_eq!(
        write(fresh.fencing_token()).await,
        1,
        "and again, with its token"
    );
    assert_eq!(
        write(stale.fencing_token()).await,
        0,
        "the stale holder is turned away"
    );
    let account = accounts
        .find_one(doc! { "_id": 42 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(account.get_i32("balance").unwrap(), 70);
    let _ = stale.release().await;
    fresh.release().await.unwrap();
    accounts.drop().await.unwrap();
}

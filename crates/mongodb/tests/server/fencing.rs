//! `fencing::Fence` on a collection of the test's own, with tokens from
//! real grants: a holder whose lock was taken away and granted again
//! cannot write once the new holder has, and the new holder can.

use distlock_core::testing::assert_fenced_writes;
use distlock_core::{LockClient, LockOptions};
use distlock_mongodb::fencing::Fence;
use distlock_mongodb::mongodb::bson::{Document, doc};

use crate::common::{backend_at, inspector, lock_name, shared_url, unique};

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
    let (stale, fresh) = assert_fenced_writes([&first, &second], &*backend, &name, write).await;
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

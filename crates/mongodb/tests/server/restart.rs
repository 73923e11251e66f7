//! A lock held while its server restarts.

use std::time::{Duration, SystemTime};

use distlock_core::LossReason;
use distlock_mongodb::mongodb::bson::doc;

use crate::common::*;

#[tokio::test]
async fn the_holder_keeps_a_lock_when_extensions_resume_within_the_lease() {
    let mut server = OwnServer::start();
    let url = server.url();
    let collection = unique("restart");
    let client = client(
        backend_at(&url, &collection).await,
        short_lease(Duration::from_secs(15)),
    );
    let name = lock_name("kept");
    let guard = client
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    server.stop();
    server.start_again();
    // Extend by hand until the server answers again; the lease must still
    // be ours then.
    loop {
        match guard.extend().await {
            Ok(()) => break,
            Err(distlock_core::Error::Lost { .. }) => panic!("the lease was lost across a restart"),
            Err(_) => {
                assert!(
                    !guard.is_lost(),
                    "the lease ran out before the server came back"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert!(!guard.is_lost());
    let rival = crate::common::client(
        backend_at(&url, &collection).await,
        short_lease(Duration::from_secs(15)),
    );
    assert!(rival.try_acquire(&name).await.unwrap().is_none());
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn the_holder_reports_loss_before_anyone_else_can_hold_the_lock() {
    let mut server = OwnServer::start();
    let url = server.url();
    let collection = unique("restart");
    let client = client(
        backend_at(&url, &collection).await,
        short_lease(Duration::from_secs(2)),
    );
    let name = lock_name("lost");
    let guard = client
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    let token = guard.fencing_token();
    server.stop();
    let reason = tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("the holder notices the loss");
    let lost_at = SystemTime::now();
    assert_eq!(reason, LossReason::Expired);
    server.start_again();

    // The server and this test share the machine's clock: the loss was
    // reported while the server still counted the lease as running.
    let inspector = inspector(&url).await;
    let stored = raw_collection(&inspector, &collection)
        .find_one(doc! { "_id": name.as_str() })
        .await
        .unwrap()
        .expect("the lock document survives the restart");
    let expires_at = stored.get_datetime("expiresAt").unwrap().to_system_time();
    assert!(
        lost_at < expires_at,
        "lost at {lost_at:?}, but the lease ran until {expires_at:?}"
    );
    drop(guard);

    let rival = crate::common::client(
        backend_at(&url, &collection).await,
        short_lease(Duration::from_secs(2)),
    );
    let taken = rival
        .acquire_with(&name, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(taken.fencing_token() > token);
    assert!(taken.release().await.unwrap());
}

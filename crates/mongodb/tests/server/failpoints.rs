//! Faults injected with the server's `failCommand` fail point. Each test
//! runs its own server, since the fail point is global to a server.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::Backend;
use distlock_core::testing::{Answer, Hook};
use distlock_core::{LockClient, LockName, LossReason, Result};
use distlock_mongodb::MongoBackend;
use distlock_mongodb::mongodb::Client;
use distlock_mongodb::mongodb::bson::doc;

use crate::common::*;

/// Counts extension and hand-over outcomes, to see that a fault really
/// happened.
#[derive(Debug, Default)]
struct Counting {
    failed: AtomicUsize,
    succeeded_after_failure: AtomicUsize,
    hand_overs: AtomicUsize,
    hand_overs_failed: AtomicUsize,
}

impl Counting {
    /// `inner`, counted by a new `Counting`.
    fn around(inner: Arc<MongoBackend>) -> (Arc<dyn Backend>, Arc<Self>) {
        let counting = Arc::new(Self::default());
        let backend = TestBackend::wrapping(inner).with_hook(counting.clone());
        (backend.shared(), counting)
    }

    fn count(&self, outcome: &Result<bool>) {
        match outcome {
            Err(_) => {
                self.failed.fetch_add(1, Ordering::SeqCst);
            }
            Ok(true) if self.failed.load(Ordering::SeqCst) > 0 => {
                self.succeeded_after_failure.fetch_add(1, Ordering::SeqCst);
            }
            Ok(_) => {}
        }
    }
}

#[async_trait]
impl Hook for Counting {
    async fn after(&self, answer: Answer<'_>) {
        match answer {
            Answer::Extend { outcomes, .. } => outcomes.iter().for_each(|o| self.count(o)),
            Answer::HandOver { outcome, .. } => {
                self.hand_overs.fetch_add(1, Ordering::SeqCst);
                if outcome.is_err() {
                    self.hand_overs_failed.fetch_add(1, Ordering::SeqCst);
                }
            }
            _ => {}
        }
    }
}

/// Counts live grants of `name`, by the server's clock.
async fn live_grants(url: &str, collection: &str, name: &LockName) -> u64 {
    let inspector = inspector(url).await;
    raw_collection(&inspector, collection)
        .count_documents(doc! {
            "_id": name.as_str(),
            "lockId": { "$exists": true },
            "$expr": { "$gt": ["$expiresAt", "$$NOW"] },
        })
        .await
        .unwrap()
}

/// Closes the connection of the next `times` `findAndModify` commands that
/// the client named `app` sends.
async fn close_find_and_modify(admin: &Client, times: i32, app: &str) {
    fail_point(
        admin,
        doc! { "times": times },
        doc! {
            "failCommands": ["findAndModify"],
            "closeConnection": true,
            "appName": app,
        },
    )
    .await;
}

#[tokio::test]
async fn a_connection_closed_on_find_and_modify_never_double_grants_or_leaks() {
    let server = OwnServer::start();
    let url = server.url();
    let admin = inspector(&url).await;
    let collection = unique("closed");
    let victim_url = with_app_name(&url, "closed-victim");
    let victim = client(
        backend_at(&victim_url, &collection).await,
        short_lease(Duration::from_secs(30)),
    );
    let rival = client(
        backend_at(&url, &collection).await,
        short_lease(Duration::from_secs(30)),
    );
    // Once: the driver retries the write and may win; twice: the retry
    // fails too and the attempt is an error.
    for times in [1, 2, 1, 2] {
        let name = lock_name("closed");
        close_find_and_modify(&admin, times, "closed-victim").await;
        let attempt = victim.try_acquire(&name).await;
        fail_point_off(&admin).await;
        match attempt {
            Ok(Some(guard)) => {
                assert_eq!(live_grants(&url, &collection, &name).await, 1);
                assert!(rival.try_acquire(&name).await.unwrap().is_none());
                assert!(guard.release().await.unwrap());
            }
            Ok(None) => panic!("nobody else held {name}"),
            Err(error) => {
                // A closed connection is never a grant: the name is free.
                assert!(error.is_transient(), "{error}");
                let taken = rival
                    .acquire_with(&name, Duration::from_secs(10))
                    .await
                    .unwrap();
                assert_eq!(live_grants(&url, &collection, &name).await, 1);
                assert!(taken.release().await.unwrap());
            }
        }
        assert_eq!(live_grants(&url, &collection, &name).await, 0);
    }
}

/// A hand-over whose `findAndModify` loses its connection: once (the
/// driver's retry hands over) or twice (the hand-over fails, and both
/// identities are released). Either way the waiting task ends up with the
/// lock, exactly one grant is live, and nothing is left behind.
#[tokio::test]
async fn a_connection_closed_during_a_hand_over_never_double_grants_or_leaks() {
    let server = OwnServer::start();
    let url = server.url();
    let admin = inspector(&url).await;
    let collection = unique("hand-over");
    let victim_url = with_app_name(&url, "hand-over-victim");
    let (backend, counting) = Counting::around(backend_at(&victim_url, &collection).await);
    let victim = LockClient::new(backend, short_lease(Duration::from_secs(30)));
    let rival = client(
        backend_at(&url, &collection).await,
        short_lease(Duration::from_secs(30)),
    );
    for times in [1, 2] {
        let name = lock_name("hand-over");
        let first = victim.acquire_with(&name, Duration::ZERO).await.unwrap();
        let first_token = first.fencing_token();
        let waiter = {
            let (victim, name) = (victim.clone(), name.clone());
            tokio::spawn(async move { victim.acquire_with(&name, Duration::from_secs(10)).await })
        };
        // The waiter queues in the client; it sends nothing until the lock
        // is passed on.
        tokio::time::sleep(Duration::from_millis(100)).await;
        close_find_and_modify(&admin, times, "hand-over-victim").await;
        let (tried, failed) = (
            counting.hand_overs.load(Ordering::SeqCst),
            counting.hand_overs_failed.load(Ordering::SeqCst),
        );
        let released = first.release().await;
        fail_point_off(&admin).await;
        assert!(released.unwrap(), "the first grant was ours until it ended");
        assert_eq!(counting.hand_overs.load(Ordering::SeqCst), tried + 1);
        // Once, the driver's retry hands over; twice, the hand-over fails.
        let failures = counting.hand_overs_failed.load(Ordering::SeqCst) - failed;
        assert_eq!(
            failures,
            usize::from(times == 2),
            "with the fault {times} times"
        );
        let second = waiter.await.unwrap().expect("the waiter gets the lock");
        assert!(second.fencing_token() > first_token);
        assert_eq!(live_grants(&url, &collection, &name).await, 1);
        assert!(rival.try_acquire(&name).await.unwrap().is_none());
        assert!(second.release().await.unwrap());
        assert_eq!(live_grants(&url, &collection, &name).await, 0);
    }
}

#[tokio::test]
async fn one_failed_extension_then_a_retry_within_the_lease_is_not_a_loss() {
    let server = OwnServer::start();
    let url = server.url();
    let admin = inspector(&url).await;
    let collection = unique("retry");
    let (backend, counting) =
        Counting::around(backend_at(&with_app_name(&url, "retry-victim"), &collection).await);
    let victim = LockClient::new(backend, short_lease(Duration::from_secs(3)));
    let name = lock_name("retry");
    let guard = victim
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    fail_point(
        &admin,
        doc! { "times": 1 },
        doc! {
            "failCommands": ["update"],
            "errorCode": 8,
            "appName": "retry-victim",
        },
    )
    .await;
    tokio::time::timeout(Duration::from_secs(30), async {
        while counting.succeeded_after_failure.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("an extension fails, then one succeeds");
    assert_eq!(counting.failed.load(Ordering::SeqCst), 1);
    assert!(!guard.is_lost());
    assert!(guard.release().await.unwrap());
}

/// Extensions fail for a whole lease, with `data`; the holder must report
/// the loss while the server still counts the lease as running.
async fn extensions_fail_for_the_whole_lease(
    app_name: &str,
    data: distlock_mongodb::mongodb::bson::Document,
) {
    let server = OwnServer::start();
    let url = server.url();
    let admin = inspector(&url).await;
    let collection = unique("failing");
    let victim = client(
        backend_at(&with_app_name(&url, app_name), &collection).await,
        short_lease(Duration::from_secs(2)),
    );
    let rival = client(
        backend_at(&url, &collection).await,
        short_lease(Duration::from_secs(2)),
    );
    let name = lock_name("failing");
    let guard = victim
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    fail_point(&admin, "alwaysOn", data).await;
    let reason = tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("the holder notices");
    assert_eq!(reason, LossReason::Expired);
    // Nobody else could hold the lock yet when the loss was reported.
    assert_eq!(live_grants(&url, &collection, &name).await, 1);
    assert!(rival.try_acquire(&name).await.unwrap().is_none());
    fail_point_off(&admin).await;
    let taken = rival
        .acquire_with(&name, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(taken.fencing_token() > guard.fencing_token());
    drop(guard);
    assert!(taken.release().await.unwrap());
}

#[tokio::test]
async fn extensions_failing_for_the_whole_lease_are_reported_lost_in_time() {
    extensions_fail_for_the_whole_lease(
        "failing-victim",
        doc! {
            "failCommands": ["update"],
            "errorCode": 8,
            "appName": "failing-victim",
        },
    )
    .await;
}

#[tokio::test]
async fn a_hung_server_makes_the_holder_report_loss_in_time() {
    extensions_fail_for_the_whole_lease(
        "hung-victim",
        doc! {
            "failCommands": ["update"],
            "blockConnection": true,
            "blockTimeMS": 10_000,
            "appName": "hung-victim",
        },
    )
    .await;
}

/// The release stream's `getMore` fails with ChangeStreamFatalError (280),
/// as when the server refuses to go on from a resume token, three times in
/// a row, so that streams reopened after the first failure fail too. The
/// watcher opens a fresh stream, and a release still wakes the waiter,
/// whose own polls (every 100 s, or at the end of a 120 s lease) come after
/// its patience ends.
#[tokio::test]
async fn a_release_stream_the_server_cannot_resume_is_replaced_and_still_wakes() {
    let server = OwnServer::start();
    let url = server.url();
    let admin = inspector(&url).await;
    let collection = unique("fatal-stream");
    let slow = distlock_core::LockOptions::builder()
        .lease(Duration::from_secs(120))
        .backoff(Duration::from_secs(100), Duration::from_secs(100))
        .build()
        .unwrap();
    let holder = client(backend_at(&url, &collection).await, slow.clone());
    let attempts =
        TestBackend::wrapping(backend_at(&with_app_name(&url, "fatal-stream"), &collection).await);
    let waiter = LockClient::new(attempts.shared(), slow);
    let name = lock_name("fatal");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    let first_token = guard.fencing_token();
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move { waiter.acquire_with(&name, Duration::from_secs(60)).await })
    };
    // The second attempt comes when the stream first covers the name.
    until(|| attempts.calls_of(Operation::Acquire) >= 2).await;
    let before = attempts.calls_of(Operation::Acquire);
    fail_point(
        &admin,
        doc! { "times": 3 },
        doc! { "failCommands": ["getMore"], "errorCode": 280, "appName": "fatal-stream" },
    )
    .await;
    // A failed stream wakes every waiter to try once more.
    until(|| attempts.calls_of(Operation::Acquire) > before).await;
    assert!(guard.release().await.unwrap());
    let taken = waiting
        .await
        .unwrap()
        .expect("the release wakes the waiter through a fresh stream");
    assert!(taken.fencing_token() > first_token);
    assert!(taken.release().await.unwrap());
}

/// Waits until `done`, however long that takes.
async fn until(done: impl Fn() -> bool) {
    while !done() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server that refuses us (error 13, Unauthorized) ends a wait at once
/// with `Error::Denied`, which retrying would not fix; a server that
/// failed transiently is waited out.
#[tokio::test]
async fn a_refusal_ends_a_wait_at_once_and_a_passing_fault_is_waited_out() {
    let server = OwnServer::start();
    let url = server.url();
    let admin = inspector(&url).await;
    let collection = unique("refused");
    let refused_url = with_app_name(&url, "refused-victim");
    let victim = client(
        backend_at(&refused_url, &collection).await,
        short_lease(Duration::from_secs(30)),
    );

    fail_point(
        &admin,
        doc! { "times": 1 },
        doc! {
            "failCommands": ["findAndModify"],
            "errorCode": 13,
            "appName": "refused-victim",
        },
    )
    .await;
    let outcome = victim
        .acquire_with(&lock_name("refused"), Duration::from_secs(60))
        .await;
    fail_point_off(&admin).await;
    match outcome {
        Err(error @ distlock_core::Error::Denied { .. }) => assert!(!error.is_transient()),
        other => panic!("expected Denied at once, got {other:?}"),
    }

    // A fault that passes (here, three failed commands with a transient
    // code) is retried until the lock is granted.
    fail_point(
        &admin,
        doc! { "times": 3 },
        doc! {
            "failCommands": ["findAndModify"],
            "errorCode": 91,
            "appName": "refused-victim",
        },
    )
    .await;
    let guard = victim
        .acquire_with(&lock_name("passing"), Duration::from_secs(60))
        .await;
    fail_point_off(&admin).await;
    assert!(guard.expect("waited out").release().await.unwrap());
}

//! Property 1: at most one live guard per exclusive grant.
//!
//! Three tasks of one client wait for the same name and end their hold in
//! each of the ways a guard can end (a release, which hands the lock to the
//! next waiter where it can, and a drop, which releases in the
//! background), while a fourth tries once. Whoever holds a guard checks
//! that no other task does, and that the backend lists exactly its grant.

use std::sync::Arc;

use distlock_core::{LockClient, LockGuard, MemoryBackend};
use shuttle::future;
use shuttle::sync::atomic::{AtomicUsize, Ordering};

use crate::harness;

/// Each schedule has a backend of its own, so one name serves.
const NAME: &str = "model/exclusive";

/// How a task ends its hold.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Release,
    Drop,
}

#[test]
fn at_most_one_live_guard_per_exclusive_grant() {
    harness::check(|| async {
        let client = LockClient::builder()
            .build(MemoryBackend::new())
            .expect("default options");
        let holding = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = [Ending::Release, Ending::Drop, Ending::Release]
            .into_iter()
            .map(|ending| {
                let (client, holding) = (client.clone(), holding.clone());
                future::spawn(async move {
                    let guard = client.acquire(NAME).await.expect("a wait without deadline");
                    hold(&client, &guard, &holding).await;
                    end(guard, ending).await;
                })
            })
            .collect();
        let trier = {
            let (client, holding) = (client.clone(), holding.clone());
            future::spawn(async move {
                if let Some(guard) = client.try_acquire(NAME).await.expect("a try") {
                    hold(&client, &guard, &holding).await;
                    end(guard, Ending::Release).await;
                }
            })
        };
        for task in waiters.into_iter().chain([trier]) {
            task.await.expect("the task finished");
        }
    });
}

/// Holds `guard` across a switch to other tasks, checking on the way in
/// that it is the only live guard and the backend's only grant.
async fn hold(client: &LockClient, guard: &LockGuard, holding: &AtomicUsize) {
    assert_eq!(
        holding.fetch_add(1, Ordering::SeqCst),
        0,
        "another task holds a live guard of the same exclusive lock"
    );
    let granted: Vec<_> = client
        .list()
        .await
        .expect("the memory backend lists")
        .into_iter()
        .map(|lock| lock.fencing_token)
        .collect();
    assert_eq!(
        granted,
        [Some(guard.fencing_token())],
        "the backend's grants are not exactly this guard's"
    );
    future::yield_now().await;
    holding.fetch_sub(1, Ordering::SeqCst);
}

async fn end(guard: LockGuard, ending: Ending) {
    match ending {
        Ending::Release => {
            assert!(
                guard.release().await.expect("the memory backend releases"),
                "the lock was still ours"
            );
        }
        Ending::Drop => drop(guard),
    }
}

//! Property 2: no grant leaked on cancel.
//!
//! While a guard is held, one task waits with `cancel_on` and another waits
//! in a future that is dropped; both give up at any point, the holder
//! releases at any point (handing over where it can), and once everything
//! is done the name must come free both in this client (its local slot)
//! and on the backend, as a later `try_acquire` from this client and from
//! another shows.

use std::sync::Arc;

use distlock_core::backend::Backend;
use distlock_core::{AcquireOptions, Error, LockClient, LockGuard, MemoryBackend};
use futures::future::{Either, select};
use shuttle::future;
use tokio::sync::oneshot;

use crate::harness;

/// Each schedule has a backend of its own, so one name serves.
const NAME: &str = "model/cancel";

#[test]
fn a_cancelled_wait_leaves_the_name_and_the_slot_free() {
    harness::check(|| async {
        let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        let client = client_of(&backend);
        let held = client.acquire(NAME).await.expect("a free name");
        let (cancel, cancelled) = oneshot::channel::<()>();
        let (stop, stopped) = oneshot::channel::<()>();

        let by_signal = {
            let client = client.clone();
            future::spawn(async move {
                let signal = async move {
                    let _ = cancelled.await;
                };
                let options = AcquireOptions::new().cancel_on(signal);
                match client.acquire_with(NAME, options).await {
                    Ok(guard) => release(guard).await,
                    Err(Error::Cancelled { .. }) => {}
                    Err(error) => panic!("a cancelled wait ended with {error}"),
                }
            })
        };
        let by_drop = {
            let client = client.clone();
            future::spawn(async move {
                let wait = Box::pin(client.acquire(NAME));
                // The wait is dropped where it stands if the stop comes
                // first; the stop is polled first, so that a wait whose
                // lock arrived but was not yet taken is dropped too.
                if let Either::Right((granted, _)) = select(stopped, wait).await {
                    release(granted.expect("a wait without deadline")).await;
                }
            })
        };
        let canceller = future::spawn(async move {
            let _ = cancel.send(());
        });
        let stopper = future::spawn(async move {
            let _ = stop.send(());
        });
        let holder = future::spawn(release(held));
        for task in [by_signal, by_drop, canceller, stopper, holder] {
            task.await.expect("the task finished");
        }

        // Background releases may still be under way: wait for them. A leak
        // keeps this loop going until the step bound fails the schedule.
        let again = eventually_granted(&client).await;
        assert!(
            client_of(&backend)
                .try_acquire(NAME)
                .await
                .expect("a try")
                .is_none(),
            "another client was granted the name while this one held it"
        );
        release(again).await;
        let elsewhere = eventually_granted(&client_of(&backend)).await;
        release(elsewhere).await;
    });
}

fn client_of(backend: &Arc<dyn Backend>) -> LockClient {
    LockClient::builder()
        .build_shared(backend.clone())
        .expect("default options")
}

/// Tries `client` until it is granted the name, letting other tasks run in
/// between.
async fn eventually_granted(client: &LockClient) -> LockGuard {
    loop {
        if let Some(guard) = client.try_acquire(NAME).await.expect("a try") {
            return guard;
        }
        future::yield_now().await;
    }
}

async fn release(guard: LockGuard) {
    assert!(
        guard.release().await.expect("the memory backend releases"),
        "the lock was still ours"
    );
}

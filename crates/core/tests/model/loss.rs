//! Property 3: `lost()` before a re-grant by the same client.
//!
//! A guard is held; the test backend ends its grant (its loss is
//! reported, then the name is released on the backend) at any point;
//! another task of the client waits for the name, and a third tries once.
//! Whichever of them is next given a guard for the name, by a hand-over or
//! a grant of its own, checks that the old guard's loss signal has already
//! resolved.

use distlock_core::testing::TestBackend;
use distlock_core::{LockClient, LockGuard, LostSignal};
use shuttle::future;

use crate::harness;

/// Each schedule has a backend of its own, so one name serves.
const NAME: &str = "model/loss";

/// How the holder of the lost lock lets go of its guard.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// At once, lost or not.
    Release,
    /// By dropping it, at once.
    Drop,
    /// After its `lost()` resolves, as code that watches it would.
    ReleaseOnLoss,
}

#[test]
fn lost_resolves_before_a_release_regrants() {
    check(Ending::Release);
}

#[test]
fn lost_resolves_before_a_drop_regrants() {
    check(Ending::Drop);
}

#[test]
fn lost_resolves_before_a_release_on_loss_regrants() {
    check(Ending::ReleaseOnLoss);
}

fn check(ending: Ending) {
    harness::check(move || async move {
        let backend = TestBackend::new();
        let client = LockClient::builder()
            .build_shared(backend.shared())
            .expect("default options");
        let first = client.acquire(NAME).await.expect("a free name");
        let first_lost = first.lost_signal();

        let waiter = {
            let (client, first_lost) = (client.clone(), first_lost.clone());
            future::spawn(async move {
                let next = client.acquire(NAME).await.expect("a wait without deadline");
                regranted(next, &first_lost).await;
            })
        };
        let trier = {
            let client = client.clone();
            future::spawn(async move {
                if let Some(next) = client.try_acquire(NAME).await.expect("a try") {
                    regranted(next, &first_lost).await;
                }
            })
        };
        let loser = future::spawn(async move {
            assert!(
                backend.lose(NAME) <= 1,
                "two live grants of one exclusive lock"
            );
        });
        let holder = future::spawn(async move {
            match ending {
                Ending::Release => drop(first.release().await),
                Ending::Drop => drop(first),
                Ending::ReleaseOnLoss => {
                    first.lost().await;
                    drop(first.release().await);
                }
            }
        });
        for task in [waiter, trier, loser, holder] {
            task.await.expect("the task finished");
        }
    });
}

/// A new guard of the name, handed to a task of the same client: the old
/// guard's loss must be known by now.
async fn regranted(next: LockGuard, first_lost: &LostSignal) {
    assert!(
        first_lost.is_lost(),
        "a guard was handed out while the one before it had not heard of its loss"
    );
    // The new grant may be the one the loss ends on the backend too; its
    // release only says whether it still was ours.
    drop(next.release().await);
}

//! Who waits for a lock, in the listing: a store that keeps its waiters
//! shows them in the order they will be served, with who they are; one
//! that does not says it cannot tell, never that nobody waits.

use std::time::Duration;

use distlock_core::testing::{eventually, quick_options};
use distlock_core::{AcquireOptions, LockClient, LockInfo, LockName, Waiters};

use crate::fixture::Fixture;
use crate::support::{bounded, unique_name};

const PATIENCE: Duration = Duration::from_secs(60);

/// A client of `fixture` whose holders carry `label`.
async fn labelled(fixture: &dyn Fixture, label: &str) -> LockClient {
    let options = quick_options(fixture.lease())
        .label(label)
        .build()
        .expect("valid options");
    LockClient::new(fixture.backend().await, options)
}

/// The waiters the listing shows for `name`, or `None` when it says it
/// cannot tell. Every holder's entry carries the same list.
async fn waiters_of(client: &LockClient, name: &LockName) -> Option<Vec<Option<String>>> {
    let listed = client.list().await.expect("list");
    let entries: Vec<&LockInfo> = listed.iter().filter(|info| &info.name == name).collect();
    let first = entries
        .first()
        .unwrap_or_else(|| panic!("{name} is held but not listed"));
    assert!(
        entries.iter().all(|info| info.waiters == first.waiters),
        "every holder of one name lists the same waiters: {entries:?}"
    );
    let every_wait = holder_sees_every_wait(client);
    match (&first.waiters, every_wait) {
        (Waiters::Unknown, None)
        | (Waiters::Known(_), Some(true))
        | (Waiters::WholeLock(_), Some(false)) => {}
        (waiters, _) => {
            panic!("{waiters:?} from a backend whose list sees every wait: {every_wait:?}")
        }
    }
    first.waiters.listed().map(|waiters| {
        waiters
            .iter()
            .map(|waiter| {
                if let Some(holder) = &waiter.holder {
                    assert_eq!(holder.pid, std::process::id(), "{waiter:?}");
                }
                waiter
                    .holder
                    .as_ref()
                    .and_then(|holder| holder.label.clone())
            })
            .collect()
    })
}

/// Whether `client`'s backend lists every wait (`None`: it lists none).
fn holder_sees_every_wait(client: &LockClient) -> Option<bool> {
    client
        .backend()
        .abilities()
        .waiters
        .map(|waiters| waiters.sees_every_wait())
}

/// Whether `client`'s backend serves the waits it lists in that order
/// (`false` also where it lists none).
fn serves_in_order(client: &LockClient) -> bool {
    client
        .backend()
        .abilities()
        .waiters
        .is_some_and(|waiters| waiters.serves_in_order())
}

/// Two clients wait, one after the other, for a held lock: a store that
/// keeps its waiters lists them in that order, with their labels, and
/// each no longer once it is served, while the other still shows; one
/// that keeps a line serves the first first. One that does not keep its
/// waiters says it cannot tell.
pub async fn list_shows_waiters_in_order_or_says_it_cannot(fixture: &dyn Fixture) {
    let name = unique_name("waiters");
    let holder = labelled(fixture, "holder").await;
    let keeps_waiters = holder.backend().abilities().waiters.is_some();
    let guard = holder.acquire_with(&name, PATIENCE).await.expect("acquire");
    if !keeps_waiters {
        assert_eq!(
            waiters_of(&holder, &name).await,
            None,
            "a store that keeps no waiters says it cannot tell"
        );
        guard.release().await.expect("release");
        return;
    }
    assert_eq!(
        waiters_of(&holder, &name).await,
        Some(vec![]),
        "nobody waits yet"
    );
    let first = labelled(fixture, "first-waiter").await;
    let mut first_wait = {
        let name = name.clone();
        tokio::spawn(async move { first.acquire_with(&name, PATIENCE).await })
    };
    eventually("the first waiter is listed", || async {
        waiters_of(&holder, &name)
            .await
            .is_some_and(|waiters| waiters.len() == 1)
    })
    .await;
    let second = labelled(fixture, "second-waiter").await;
    let mut second_wait = {
        let name = name.clone();
        tokio::spawn(async move { second.acquire_with(&name, PATIENCE).await })
    };
    eventually("the second waiter is listed", || async {
        waiters_of(&holder, &name)
            .await
            .is_some_and(|waiters| waiters.len() == 2)
    })
    .await;
    let waiters = waiters_of(&holder, &name).await.expect("known");
    assert!(
        waiters.iter().all(Option::is_some) || waiters.iter().all(Option::is_none),
        "{waiters:?}"
    );
    if waiters[0].is_some() {
        assert_eq!(
            waiters,
            vec![
                Some("first-waiter".to_owned()),
                Some("second-waiter".to_owned())
            ],
            "in the order they came"
        );
    }
    guard.release().await.expect("release");
    // A store that keeps a line serves its first waiter; one that keeps
    // who waits but no line (Redis's marks) serves whichever asks first.
    let (served, first_served) = bounded("a waiter's grant", async {
        tokio::select! {
            granted = &mut first_wait => (granted, true),
            granted = &mut second_wait => (granted, false),
        }
    })
    .await;
    let served = served.expect("join").expect("granted");
    if serves_in_order(&holder) {
        assert!(
            first_served,
            "a store that keeps a line serves its first waiter first"
        );
    }
    let (left, other_wait) = if first_served {
        ("second-waiter", second_wait)
    } else {
        ("first-waiter", first_wait)
    };
    let waiters = waiters_of(&holder, &name).await.expect("known");
    assert_eq!(
        waiters.len(),
        1,
        "the one served no longer waits: {waiters:?}"
    );
    if waiters[0].is_some() {
        assert_eq!(
            waiters,
            vec![Some(left.to_owned())],
            "the other still waits"
        );
    }
    served.release().await.expect("release");
    let last = bounded("the other waiter's grant", other_wait)
        .await
        .expect("join")
        .expect("granted");
    if holder_sees_every_wait(&holder) == Some(true) && holder.backend().capabilities().shared {
        // A store that says it sees every wait lists a reader's too,
        // which keeps no place in a fair line.
        let reader = labelled(fixture, "reader").await;
        let reader_wait = {
            let name = name.clone();
            tokio::spawn(async move {
                let options = AcquireOptions::new().shared().timeout(PATIENCE);
                reader.acquire_with(&name, options).await
            })
        };
        eventually("the waiting reader is listed", || async {
            waiters_of(&holder, &name)
                .await
                .is_some_and(|waiters| waiters.len() == 1)
        })
        .await;
        let waiters = waiters_of(&holder, &name).await.expect("known");
        if waiters[0].is_some() {
            assert_eq!(waiters, vec![Some("reader".to_owned())]);
        }
        last.release().await.expect("release");
        let read = bounded("the reader's grant", reader_wait)
            .await
            .expect("join")
            .expect("granted");
        read.release().await.expect("release");
        return;
    }
    last.release().await.expect("release");
}

//! Fair mode against a real etcd member: waiters served in the order they
//! asked, across clients and within one; a try that never jumps the line;
//! a release that grants the next place in its own write; a cancelled
//! waiter that leaves at once; a dead waiter that holds the line up only
//! as long as its session; fair campaigns that queue and record each term.
//! Each client is a backend of its own, as a process of its own would be.
//! `scripts/test` starts etcd and sets `DISTLOCK_TEST_ETCD_URL`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{Attempt, Backend, WaitState};
use distlock_core::testing::ADMIN_LIMIT;
use distlock_core::testing::waiting_request;
use distlock_core::{AcquireOptions, LockClient, LockName};
use distlock_etcd::{EtcdBackend, EtcdConfig, session_ttl};

#[path = "support/member.rs"]
mod member;

use member::{PATIENCE, client_of, etcd, range_of, unique, url};

const LEASE: Duration = Duration::from_secs(10);
/// A backend in fair mode, opened as the builder would: from a parsed
/// URL with fair mode switched on.
async fn backend() -> Arc<EtcdBackend> {
    let config = EtcdConfig::parse(&url()).expect("a valid URL").fair(true);
    let backend = EtcdBackend::connect(config).await.expect("open etcd");
    assert!(backend.capabilities().fair, "fair mode is on");
    Arc::new(backend)
}

async fn client() -> (LockClient, Arc<EtcdBackend>) {
    let backend = backend().await;
    (client_of(&backend, LEASE), backend)
}

/// `name`'s keys, oldest first, each with its create revision and lease.
async fn keys_of(backend: &EtcdBackend, name: &LockName) -> Vec<(i64, i64)> {
    let mut kvs = range_of(backend, name).await;
    kvs.sort_by_key(|kv| kv.create_revision);
    kvs.iter()
        .map(|kv| (kv.create_revision, kv.lease))
        .collect()
}

/// Waits until `name` has `count` keys: a holder's and each waiter's.
async fn until_keys(backend: &EtcdBackend, name: &LockName, count: usize) {
    while keys_of(backend, name).await.len() != count {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_are_served_in_the_order_they_asked_across_and_within_clients() {
    const WAITERS: usize = 6;
    let name = unique("fair-fifo");
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client().await);
    }
    let probe = clients[0].1.clone();
    let held = clients[0]
        .0
        .acquire_with(&name, PATIENCE)
        .await
        .expect("the first holder");
    let first_token = held.fencing_token();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for index in 0..WAITERS {
        // Two tasks of each client, interleaved: the holder's client too.
        let client = clients[index % 3].0.clone();
        let (wanted, served) = (name.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client
                .acquire_with(&wanted, PATIENCE)
                .await
                .expect("a waiter");
            served.lock().unwrap().push((index, guard.fencing_token()));
            assert!(guard.release().await.expect("release"));
        }));
        // It asked once its key is there.
        until_keys(&probe, &name, index + 2).await;
    }
    assert!(held.release().await.expect("release"));
    for task in tasks {
        task.await.expect("a waiter's task");
    }
    let served = served.lock().unwrap().clone();
    let order: Vec<usize> = served.iter().map(|(index, _)| *index).collect();
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "served in order");
    let mut tokens = vec![first_token];
    tokens.extend(served.iter().map(|(_, token)| *token));
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "fencing tokens grow: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_try_never_jumps_the_line() {
    let name = unique("fair-try");
    let (holder, probe) = client().await;
    let (waiter, _) = client().await;
    let held = holder.acquire_with(&name, PATIENCE).await.expect("hold");
    let waiting = tokio::spawn({
        let name = name.clone();
        async move { waiter.acquire_with(&name, PATIENCE).await.expect("wait") }
    });
    until_keys(&probe, &name, 2).await;
    // A try while the lock is held and waited for, and right after the
    // release, which granted it to the waiter's place.
    assert!(holder.try_acquire(&name).await.expect("try").is_none());
    assert!(held.release().await.expect("release"));
    assert!(holder.try_acquire(&name).await.expect("try").is_none());
    let guard = waiting.await.expect("the waiter's task");
    assert!(guard.release().await.expect("release"));
    let tried = holder.try_acquire(&name).await.expect("try");
    assert!(tried.is_some(), "a try wins once nobody holds or waits");
    assert!(tried.unwrap().release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_grants_the_first_place_in_its_own_write() {
    let name = unique("fair-pass");
    let (holder, probe) = client().await;
    let (waiter, _) = client().await;
    let (looker, _) = client().await;
    let held = holder.acquire_with(&name, PATIENCE).await.expect("hold");
    let waiting = tokio::spawn({
        let name = name.clone();
        async move {
            waiter
                .acquire_with(&name, AcquireOptions::new().timeout(PATIENCE).label("next"))
                .await
                .expect("wait")
        }
    });
    until_keys(&probe, &name, 2).await;
    let place = keys_of(&probe, &name).await[1].0;
    assert!(held.release().await.expect("release"));
    // Read right after the release, before the waiter may have asked again:
    // the lock is the waiter's already.
    let listed: Vec<_> = looker
        .list()
        .await
        .expect("list")
        .into_iter()
        .filter(|info| info.name == name)
        .collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let holder_now = listed[0].holder.as_ref().expect("a holder");
    assert_eq!(holder_now.label.as_deref(), Some("next"));
    assert_eq!(listed[0].fencing_token, u64::try_from(place).ok());
    let guard = waiting.await.expect("the waiter's task");
    assert_eq!(guard.fencing_token(), u64::try_from(place).unwrap());
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_waiter_leaves_the_line_at_once() {
    let name = unique("fair-cancel");
    let (holder, probe) = client().await;
    let (quitter, _) = client().await;
    let (stayer, _) = client().await;
    let held = holder.acquire_with(&name, PATIENCE).await.expect("hold");
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let gives_up = tokio::spawn({
        let name = name.clone();
        async move {
            quitter
                .acquire_with(
                    &name,
                    AcquireOptions::new()
                        .timeout(PATIENCE)
                        .cancel_on(async move {
                            let _ = cancelled.await;
                        }),
                )
                .await
        }
    });
    until_keys(&probe, &name, 2).await;
    let stays = tokio::spawn({
        let name = name.clone();
        async move { stayer.acquire_with(&name, PATIENCE).await.expect("wait") }
    });
    until_keys(&probe, &name, 3).await;
    let before = keys_of(&probe, &name).await;
    cancel.send(()).expect("cancel");
    assert!(
        gives_up.await.expect("task").is_err(),
        "the cancelled wait ends"
    );
    let after = keys_of(&probe, &name).await;
    assert_eq!(after, [before[0], before[2]], "its place is gone, at once");
    assert!(held.release().await.expect("release"));
    let guard = stays.await.expect("the waiter's task");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_waiter_holds_the_line_up_only_as_long_as_its_session() {
    let name = unique("fair-dead");
    let (holder, probe) = client().await;
    let (live, _) = client().await;
    let held = holder.acquire_with(&name, PATIENCE).await.expect("hold");
    // A waiter that takes its place and dies: its backend has no client,
    // so nothing renews its session, and it never ends its wait.
    let lease = Duration::from_secs(2);
    {
        let dead = backend().await;
        let request = waiting_request(&name, lease, "dead");
        let attempt = dead
            .try_acquire(&request, &mut WaitState::new())
            .await
            .expect("take a place");
        assert!(matches!(attempt, Attempt::Held { .. }), "{attempt:?}");
    }
    let living = tokio::spawn({
        let name = name.clone();
        async move { live.acquire_with(&name, PATIENCE).await.expect("wait") }
    });
    until_keys(&probe, &name, 3).await;
    // The dead place lives on its own session, which etcd ends by its
    // clock a session's TTL after its last renewal.
    let dead_session = keys_of(&probe, &name).await[1].1;
    let ttl = etcd()
        .await
        .lease_time_to_live(dead_session)
        .await
        .expect("read the dead session")
        .granted_ttl;
    assert_eq!(
        Duration::from_secs(u64::try_from(ttl).unwrap()),
        session_ttl(lease)
    );
    assert!(held.release().await.expect("release"));
    let guard = living.await.expect("the live waiter is served");
    assert_eq!(keys_of(&probe, &name).await.len(), 1, "the dead place went");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fair_campaigns_queue_and_record_each_term_once_in_order() {
    const CANDIDATES: usize = 3;
    let name = unique("fair-election");
    let (first, probe) = client().await;
    let leading = first
        .election(&name)
        .expect("a valid name")
        .campaign("first", PATIENCE)
        .await
        .expect("the first campaign wins");
    let mut terms = vec![leading.term()];
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for index in 0..CANDIDATES {
        let (candidate, _) = client().await;
        let (wanted, order) = (name.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let leading = candidate
                .election(&wanted)
                .expect("a valid name")
                .campaign(format!("c{index}"), PATIENCE)
                .await
                .expect("a campaign in line wins");
            order.lock().unwrap().push((index, leading.term()));
            assert!(leading.resign().await.expect("resign"));
        }));
        until_keys(&probe, &name, index + 2).await;
    }
    assert!(leading.resign().await.expect("resign"));
    for task in tasks {
        task.await.expect("a candidate's task");
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order.iter().map(|(index, _)| *index).collect::<Vec<_>>(),
        (0..CANDIDATES).collect::<Vec<_>>(),
        "leaders in the order they campaigned"
    );
    terms.extend(order.iter().map(|(_, term)| *term));
    let recorded = probe
        .term_log()
        .expect("etcd keeps a record of terms")
        .terms_after(&name, 0, ADMIN_LIMIT)
        .await
        .expect("read the terms");
    let values: Vec<(u64, Option<String>)> = recorded
        .iter()
        .map(|term| (term.term, term.holder.label.clone()))
        .collect();
    let expected: Vec<(u64, Option<String>)> = terms
        .iter()
        .zip(["first", "c0", "c1", "c2"])
        .map(|(term, value)| (*term, Some(value.to_owned())))
        .collect();
    assert_eq!(values, expected, "each term recorded once, in order");
    assert!(
        recorded
            .windows(2)
            .all(|pair| pair[1].previous == Some(pair[0].term)),
        "each term names the one before"
    );
}

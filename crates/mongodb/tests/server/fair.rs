//! Fair mode against the server: waiters are served in the order they
//! asked, across backends (separate connections, as separate processes
//! would have) and within one; a release passes the lock to the first
//! place in the same update; a try never jumps the line; a waiter that
//! gives up or dies leaves the line.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend, ReleaseWatch, WaitState};
use distlock_core::testing::{acquire_until_cancelled, waiting_request};
use distlock_core::{AcquireOptions, Claim, Holder, LockClient, LockName, LockOptions, TryOptions};
use distlock_mongodb::mongodb::bson::{Document, doc};
use distlock_mongodb::mongodb::options::IndexOptions;
use distlock_mongodb::mongodb::{Collection, IndexModel};
use distlock_mongodb::{MongoBackend, MongoConfig};

use crate::common::*;

/// How long the waiters of these tests are willing to wait: far longer
/// than any lease here, so that only a broken line makes them time out.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// A backend in fair mode on the shared server, in `collection`.
pub(crate) async fn fair_backend(collection: &str) -> Arc<MongoBackend> {
    fair_backend_at(&shared_url(), collection).await
}

/// A backend in fair mode on the server at `url`, in `collection`.
pub(crate) async fn fair_backend_at(url: &str, collection: &str) -> Arc<MongoBackend> {
    Arc::new(
        MongoBackend::connect(
            MongoConfig::new(url)
                .database("distlock_test")
                .collection(collection)
                .fair(true),
        )
        .await
        .expect("the test server answers"),
    )
}

/// A client with a lease long enough that no test here waits it out by
/// accident.
pub(crate) fn fair_client(backend: Arc<MongoBackend>) -> LockClient {
    let options = LockOptions::builder()
        .lease(Duration::from_secs(20))
        .build()
        .unwrap();
    client(backend, options)
}

/// The lock document of `name`.
pub(crate) async fn stored(raw: &Collection<Document>, name: &LockName) -> Document {
    raw.find_one(doc! { "_id": name.as_str() })
        .await
        .unwrap()
        .expect("the lock document")
}

/// The identities of the places in `name`'s line, first first.
pub(crate) async fn line(raw: &Collection<Document>, name: &LockName) -> Vec<String> {
    let found = stored(raw, name).await;
    found.get_array("queue").map_or_else(
        |_| Vec::new(),
        |places| {
            places
                .iter()
                .map(|place| {
                    place
                        .as_document()
                        .unwrap()
                        .get_str("id")
                        .unwrap()
                        .to_owned()
                })
                .collect()
        },
    )
}

/// Waits until `name`'s line holds `n` places.
pub(crate) async fn until_in_line(raw: &Collection<Document>, name: &LockName, n: usize) {
    while line(raw, name).await.len() != n {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A watch of `name`'s wake-ups on `backend`, as a waiting lock client
/// keeps one: a waiter asks again when it fires. It is returned once the
/// backend's change stream covers the name (the stream wakes the name's
/// waiters once as it starts to), so that every later write on the name
/// reaches it; the name must be new to the backend's stream.
pub(crate) async fn release_watch(backend: &MongoBackend, name: &LockName) -> ReleaseWatch {
    let mut watch = backend
        .wakeups()
        .expect("the test server has change streams")
        .watch(name)
        .expect("wake-ups are on");
    tokio::time::timeout(WAIT, watch.released())
        .await
        .expect("the change stream covers the name");
    watch
}

#[tokio::test]
async fn waiters_are_served_in_the_order_they_asked_across_and_within_backends() {
    let collection = unique("fair-order");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let mut clients = Vec::new();
    for _ in 0..3 {
        let backend = fair_backend(&collection).await;
        assert!(backend.capabilities().fair);
        clients.push(fair_client(backend));
    }
    let name = lock_name("fair-order");
    let held = clients[0].acquire_with(&name, WAIT).await.unwrap();
    let mut tokens = vec![held.fencing_token()];
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    const WAITERS: usize = 6;
    for index in 0..WAITERS {
        // Two tasks of each backend, interleaved: the holder's too.
        let client = clients[index % 3].clone();
        let (task_name, served) = (name.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client.acquire_with(&task_name, WAIT).await.unwrap();
            served.lock().unwrap().push((index, guard.fencing_token()));
            assert!(guard.release().await.unwrap());
        }));
        until_in_line(&raw, &name, index + 1).await;
    }
    assert!(held.release().await.unwrap());
    for task in tasks {
        task.await.unwrap();
    }
    let served = served.lock().unwrap().clone();
    let order: Vec<usize> = served.iter().map(|&(index, _)| index).collect();
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "served as they asked"
    );
    tokens.extend(served.iter().map(|&(_, token)| token));
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "fencing tokens increase: {tokens:?}"
    );
    assert!(line(&raw, &name).await.is_empty(), "nobody is left in line");
}

#[tokio::test]
async fn a_release_passes_the_lock_to_the_first_place_in_the_same_update() {
    let collection = unique("fair-pass");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let backend = fair_backend(&collection).await;
    let holder = fair_client(fair_backend(&collection).await);
    let name = lock_name("fair-pass");
    let held = holder.acquire_with(&name, WAIT).await.unwrap();
    let old_token = held.fencing_token();
    let first = waiting_request(&name, Duration::from_secs(20), "first");
    let mut first_wait = WaitState::new();
    let attempt = backend.try_acquire(&first, &mut first_wait).await.unwrap();
    assert!(matches!(attempt, Attempt::Held { .. }), "{attempt:?}");
    let second = waiting_request(&name, Duration::from_secs(20), "second");
    let mut second_wait = WaitState::new();
    backend
        .try_acquire(&second, &mut second_wait)
        .await
        .unwrap();
    let places = line(&raw, &name).await;
    assert_eq!(places.len(), 2);

    let mut woken = release_watch(&backend, &name).await;
    assert!(held.release().await.unwrap());
    // Nobody asked since the release: the release itself granted it.
    let after = stored(&raw, &name).await;
    assert_eq!(
        after.get_str("lockId").unwrap(),
        places[0],
        "granted to the first place"
    );
    assert_eq!(
        after
            .get_document("holder")
            .unwrap()
            .get_str("label")
            .unwrap(),
        "first"
    );
    let passed_token = after.get_i64("fencingToken").unwrap() as u64;
    assert!(passed_token > old_token);
    assert_eq!(
        line(&raw, &name).await,
        places[1..].to_vec(),
        "the rest wait on"
    );

    // The first waiter's backend is woken by the pass-on, and its next
    // attempt holds the grant as it was passed: without a command, so the
    // document stays as the release left it.
    tokio::time::timeout(WAIT, woken.released()).await.unwrap();
    let next = AcquireRequest {
        lease_id: distlock_core::backend::LeaseId::random(),
        ..first.clone()
    };
    let state = match backend.try_acquire(&next, &mut first_wait).await.unwrap() {
        Attempt::Acquired {
            fencing_token,
            state,
        } => {
            assert_eq!(fencing_token, passed_token);
            state
        }
        other => panic!("the first place holds the grant passed on: {other:?}"),
    };
    assert_eq!(stored(&raw, &name).await, after, "no command wrote");
    backend.end_wait(&first, first_wait).await.unwrap();
    assert_eq!(
        stored(&raw, &name).await,
        after,
        "a wait that was granted has nothing to end"
    );
    // The grant is released under the place's identity, and passed on.
    let held = next.granted(passed_token, state);
    assert!(backend.release(&held).await.unwrap());
    let again = stored(&raw, &name).await;
    assert_eq!(again.get_str("lockId").unwrap(), places[1]);
    assert!(again.get_i64("fencingToken").unwrap() as u64 > passed_token);
    backend.end_wait(&second, second_wait).await.unwrap();
    assert!(
        line(&raw, &name).await.is_empty(),
        "the second gave its place up"
    );
    assert!(
        stored(&raw, &name).await.get("lockId").is_none(),
        "and the grant passed on to it"
    );
}

#[tokio::test]
async fn a_try_never_jumps_the_line() {
    let collection = unique("fair-try");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let a = fair_client(fair_backend(&collection).await);
    let b = fair_client(fair_backend(&collection).await);
    let name = lock_name("fair-try");
    let held = a.acquire_with(&name, WAIT).await.unwrap();
    let waiting = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.acquire_with(&name, WAIT).await.unwrap() }
    });
    until_in_line(&raw, &name, 1).await;
    assert!(a.try_acquire(&name).await.unwrap().is_none(), "held");
    assert!(held.release().await.unwrap());
    assert!(
        a.try_acquire(&name).await.unwrap().is_none(),
        "released, and passed on to the waiter in line"
    );
    let guard = waiting.await.unwrap();
    assert!(guard.release().await.unwrap());
    let tried = a.try_acquire(&name).await.unwrap();
    assert!(tried.is_some(), "free with nobody in line");
    assert!(tried.unwrap().release().await.unwrap());
}

#[tokio::test]
async fn a_cancelled_waiter_leaves_the_line_at_once() {
    let collection = unique("fair-cancel");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let clients: Vec<LockClient> = {
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(fair_client(fair_backend(&collection).await));
        }
        clients
    };
    let name = lock_name("fair-cancel");
    let held = clients[0].acquire_with(&name, WAIT).await.unwrap();
    let (cancel, gives_up) =
        acquire_until_cancelled(&clients[1], &name, AcquireOptions::new().timeout(WAIT));
    until_in_line(&raw, &name, 1).await;
    let gone = line(&raw, &name).await;
    let stays = tokio::spawn({
        let (client, name) = (clients[2].clone(), name.clone());
        async move { client.acquire_with(&name, WAIT).await.unwrap() }
    });
    until_in_line(&raw, &name, 2).await;
    cancel.send(()).unwrap();
    assert!(gives_up.await.unwrap().is_err(), "the cancelled wait ends");
    let left = line(&raw, &name).await;
    assert_eq!(left.len(), 1, "its place is gone: {left:?}");
    assert_ne!(left[0], gone[0]);
    assert!(held.release().await.unwrap());
    let guard = stays.await.unwrap();
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn a_dead_waiter_holds_the_line_up_no_longer_than_its_lease_and_grace() {
    let collection = unique("fair-dead");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let dead_backend = fair_backend(&collection).await;
    // Every waiter with the same lease: a live waiter renews its place
    // within half of it, and then learns when the dead place's grant ends.
    let lease = Duration::from_secs(3);
    let a = client(fair_backend(&collection).await, short_lease(lease));
    let b = client(fair_backend(&collection).await, short_lease(lease));
    let name = lock_name("fair-dead");
    let held = a.acquire_with(&name, WAIT).await.unwrap();
    // A waiter that takes its place and dies: it never asks again, and
    // never ends its wait.
    let dead = waiting_request(&name, lease, "dead");
    let attempt = dead_backend
        .try_acquire(&dead, &mut WaitState::new())
        .await
        .unwrap();
    assert!(matches!(attempt, Attempt::Held { .. }));
    drop(dead_backend);
    let live = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.acquire_with(&name, WAIT).await.unwrap() }
    });
    until_in_line(&raw, &name, 2).await;
    assert!(held.release().await.unwrap());
    let passed = stored(&raw, &name).await;
    assert_eq!(
        passed
            .get_document("holder")
            .unwrap()
            .get_str("label")
            .unwrap(),
        "dead",
        "the release passed the lock to the first place, the dead one"
    );
    let passed_until = *passed.get_datetime("expiresAt").unwrap();
    let guard = live.await.unwrap();
    // The dead place's grant ran out, by the server's clock, before the
    // live waiter was served, and no later than its lease and grace (a
    // quarter lease) after the release: the live waiter's wait never
    // reached its own deadline.
    let served = stored(&raw, &name).await;
    assert!(*served.get_datetime("acquiredAt").unwrap() >= passed_until);
    assert!(guard.fencing_token() > passed.get_i64("fencingToken").unwrap() as u64);
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn a_campaign_granted_through_the_line_records_its_term() {
    let collection = unique("fair-term");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let backend = fair_backend(&collection).await;
    let holder = fair_client(fair_backend(&collection).await);
    let name = lock_name("fair-term");
    let held = holder.acquire_with(&name, WAIT).await.unwrap();
    let campaign = AcquireRequest {
        records_term: true,
        ..waiting_request(&name, Duration::from_secs(20), "candidate")
    };
    let mut wait = WaitState::new();
    backend.try_acquire(&campaign, &mut wait).await.unwrap();
    let mut woken = release_watch(&backend, &name).await;
    assert!(held.release().await.unwrap());
    let passed = stored(&raw, &name).await;
    let terms = passed
        .get_array("terms")
        .expect("the pass-on recorded a term");
    let last = terms.last().unwrap().as_document().unwrap();
    assert_eq!(
        last.get_i64("term").unwrap(),
        passed.get_i64("fencingToken").unwrap()
    );
    assert_eq!(
        last.get_document("holder")
            .unwrap()
            .get_str("label")
            .unwrap(),
        "candidate"
    );
    tokio::time::timeout(WAIT, woken.released()).await.unwrap();
    let taken = backend.try_acquire(&campaign, &mut wait).await.unwrap();
    assert!(matches!(taken, Attempt::Acquired { .. }), "{taken:?}");
    assert_eq!(
        stored(&raw, &name).await.get_array("terms").unwrap().len(),
        terms.len(),
        "holding the grant as passed records no second term"
    );
}

#[tokio::test]
async fn readers_wait_while_a_writer_is_in_line() {
    let collection = unique("fair-readers");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let backend = fair_backend(&collection).await;
    let a = fair_client(fair_backend(&collection).await);
    let name = lock_name("fair-readers");
    let reader = a
        .acquire_with(&name, AcquireOptions::new().shared().timeout(WAIT))
        .await
        .unwrap();
    let writer = waiting_request(&name, Duration::from_secs(20), "writer");
    let mut wait = WaitState::new();
    backend.try_acquire(&writer, &mut wait).await.unwrap();
    until_in_line(&raw, &name, 1).await;
    let late = a
        .try_acquire_with(&name, TryOptions::new().shared())
        .await
        .unwrap();
    assert!(
        late.is_none(),
        "a later reader waits behind the writer in line"
    );
    backend.end_wait(&writer, wait).await.unwrap();
    let late = a
        .try_acquire_with(&name, TryOptions::new().shared())
        .await
        .unwrap();
    assert!(late.is_some(), "once the writer left, readers go in");
    assert!(late.unwrap().release().await.unwrap());
    assert!(reader.release().await.unwrap());
}

#[tokio::test]
async fn fair_mode_is_a_url_option() {
    let url = shared_url();
    let separator = if url.contains('?') { '&' } else { '?' };
    let fair = MongoConfig::parse(&format!("{url}{separator}fair=true")).unwrap();
    let fair = MongoBackend::connect(fair.database("distlock_test"))
        .await
        .unwrap();
    assert!(fair.capabilities().fair);
    let plain = MongoConfig::parse(&format!("{url}{separator}fair=false")).unwrap();
    let plain = MongoBackend::connect(plain.database("distlock_test"))
        .await
        .unwrap();
    assert!(!plain.capabilities().fair);
    let error = MongoConfig::parse(&format!("{url}{separator}fair=yes")).unwrap_err();
    assert!(error.to_string().contains("fair=true"), "{error}");
}

/// The TTL monitor never deletes a document whose line lives, not even
/// once the grant in it has expired (its holder died) and before any
/// waiter has asked again: the line, the fencing token and the record of
/// terms would go with it, and the next waiter to ask, or any try, would
/// get the lock out of turn. The server is the test's own, with its TTL
/// monitor waking every second (60 s by default; `ttlMonitorSleepSecs` is
/// mongod's parameter too), and the collection starts with the TTL index
/// that earlier versions of the backend created, which a fair backend
/// replaces.
#[tokio::test]
async fn the_ttl_monitor_keeps_a_document_whose_line_lives_past_its_grant() {
    let server = OwnServer::start();
    let url = server.url();
    let admin = inspector(&url).await;
    admin
        .database("admin")
        .run_command(doc! { "setParameter": 1, "ttlMonitorSleepSecs": 1 })
        .await
        .expect("the TTL monitor's period can be set");
    let collection = unique("fair-ttl");
    let raw = raw_collection(&admin, &collection);
    let earlier = IndexOptions::builder().expire_after(Duration::ZERO).build();
    raw.create_index(
        IndexModel::builder()
            .keys(doc! { "expiresAt": 1 })
            .options(earlier)
            .build(),
    )
    .await
    .unwrap();
    let backend = fair_backend_at(&url, &collection).await;
    let (ttl, indexes) = ttl_index(&raw).await;
    assert_eq!(
        ttl.partial_filter_expression,
        Some(doc! { "queue": null }),
        "the earlier index was replaced: {indexes:?}"
    );

    // A name with nobody in line, released: the monitor deletes it, which
    // shows that it runs.
    let idle = lock_name("fair-ttl-idle");
    let idle_guard = fair_client(backend.clone())
        .acquire_with(&idle, WAIT)
        .await
        .unwrap();
    assert!(idle_guard.release().await.unwrap());

    // A holder that dies: granted for a short lease, never extended nor
    // released. A waiter takes a place for far longer, and (driven by hand)
    // does not ask again until the test says so.
    let name = lock_name("fair-ttl");
    let holder = AcquireRequest::new(
        name.clone(),
        Claim::Exclusive,
        Duration::from_secs(1),
        Arc::new(Holder::this_process(Some("dies"))),
    );
    let dead_token = match backend
        .try_acquire(&holder, &mut WaitState::new())
        .await
        .unwrap()
    {
        Attempt::Acquired { fencing_token, .. } => fencing_token,
        other => panic!("the name was free: {other:?}"),
    };
    let waiter = waiting_request(&name, Duration::from_secs(120), "waits");
    let mut wait = WaitState::new();
    let attempt = backend.try_acquire(&waiter, &mut wait).await.unwrap();
    assert!(matches!(attempt, Attempt::Held { .. }), "{attempt:?}");
    let place = line(&raw, &name).await;
    assert_eq!(place.len(), 1);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while raw
        .find_one(doc! { "_id": idle.as_str() })
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TTL monitor never deleted the released document"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Two more of the monitor's passes, each after the grant expired.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kept = raw
        .find_one(doc! { "_id": name.as_str() })
        .await
        .unwrap()
        .expect("the document with a live line outlives its expired grant");
    assert!(
        *kept.get_datetime("expiresAt").unwrap() < server_now(&raw).await,
        "the grant has expired: {kept:?}"
    );
    assert_eq!(line(&raw, &name).await, place, "the line is whole");

    // The waiter's next attempt is served from the line, above the dead
    // holder's token.
    let next = AcquireRequest {
        lease_id: distlock_core::backend::LeaseId::random(),
        ..waiter.clone()
    };
    match backend.try_acquire(&next, &mut wait).await.unwrap() {
        Attempt::Acquired { fencing_token, .. } => assert!(fencing_token > dead_token),
        other => panic!("the first place is served: {other:?}"),
    }
    backend.end_wait(&next, wait).await.unwrap();
}

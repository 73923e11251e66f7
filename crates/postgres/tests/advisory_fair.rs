//! Advisory mode's fair mode against a real server: waiters wait in the
//! server's own queue, so they are served in the order they asked, across
//! backends (as separate processes) and within one; a release hands the
//! lock to the first in line by itself; a try never jumps the line; a
//! cancelled waiter, or one whose wait was dropped, leaves the line at
//! once; a waiter that never takes its grant holds the line up for a
//! lease; campaigns served through the line record their terms; the
//! listing shows the writers in line, in order, with their holders.
//! `scripts/test` starts the server and sets `DISTLOCK_TEST_POSTGRES_URL`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{Attempt, Backend, WaitState};
use distlock_core::testing::{acquire_until_cancelled, waiting_request};
use distlock_core::{
    AcquireOptions, Holder, LockClient, LockGuard, LockKind, LockOptions, Waiters,
};
use distlock_postgres::PostgresBackend;
use distlock_postgres::tokio_postgres;
use distlock_postgres::xact::XactLocks;
use tokio::task::JoinHandle;

use distlock_core::testing::ADMIN_LIMIT;
use support::{
    REPEATABLE_READ, admin, assert_sessions_repeatable_read, first_column, name, on_keys,
    race_campaigns, terms_and_values, unique, url, with_options,
};

/// Long enough for any step of a test; a lease this long never runs out
/// within one.
const PATIENCE: Duration = Duration::from_secs(30);

/// Fair advisory mode on a fresh table, in a class of its own, so that
/// `pg_locks` shows only this test's locks there.
fn fair_url(table: &str, class: i32) -> String {
    let base = url();
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}mode=advisory&fair=true&table={table}&advisory_class={class}")
}

fn fresh_class() -> i32 {
    rand::random::<i32>() & 0x7fff_ffff
}

async fn open(url: &str) -> Arc<PostgresBackend> {
    let backend = PostgresBackend::open(url).await.expect("open");
    assert!(backend.capabilities().fair, "fair=true asks for fair mode");
    Arc::new(backend)
}

fn client(backend: Arc<PostgresBackend>) -> LockClient {
    let options = LockOptions::builder()
        .lease(PATIENCE)
        .backoff(Duration::from_millis(5), Duration::from_millis(100))
        .label("fair-tests")
        .build()
        .expect("valid options");
    LockClient::new(backend, options)
}

/// `n` clients, each on a backend of its own, as separate processes are.
async fn clients(url: &str, n: usize) -> Vec<LockClient> {
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(client(open(url).await));
    }
    clients
}

/// A name on a fresh table and class of fair advisory mode, with two
/// clients, a backend of its own for waits driven attempt by attempt,
/// and an administrator's connection.
struct Scene {
    class: i32,
    clients: Vec<LockClient>,
    backend: Arc<PostgresBackend>,
    admin: tokio_postgres::Client,
    lock: distlock_core::LockName,
}

impl Scene {
    /// The scene, with the name held by the first client.
    async fn held(prefix: &str) -> (Self, LockGuard) {
        let class = fresh_class();
        let url = fair_url(&unique(prefix), class);
        let clients = clients(&url, 2).await;
        let backend = open(&url).await;
        let admin = admin().await;
        let lock = name(&unique(prefix));
        let held = clients[0].acquire(&lock).await.expect("acquire");
        let scene = Self {
            class,
            clients,
            backend,
            admin,
            lock,
        };
        (scene, held)
    }

    /// With `first` the one server process in line: the second client
    /// waits behind it, `held` is released, and the server grants `first`
    /// by itself. Answers the released token and the second waiter.
    async fn release_to(&self, held: LockGuard, first: &[i32]) -> (u64, JoinHandle<LockGuard>) {
        let second = tokio::spawn({
            let (client, lock) = (self.clients[1].clone(), self.lock.clone());
            async move { client.acquire(&lock).await.expect("acquire") }
        });
        until_in_line(&self.admin, self.class, 2).await;
        let released = held.fencing_token();
        assert!(held.release().await.expect("release"));
        assert_eq!(
            on_keys(&self.admin, self.class, true).await,
            first,
            "granted in turn"
        );
        (released, second)
    }
}

/// Waits until `n` sessions wait in the server's queue of `class`.
async fn until_in_line(admin: &tokio_postgres::Client, class: i32, n: usize) {
    while on_keys(admin, class, false).await.len() != n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_are_served_in_the_order_they_asked_across_backends_and_within_one() {
    let class = fresh_class();
    served_in_order(&fair_url(&unique("fifo"), class), class).await;
}

/// Sessions whose default isolation level is repeatable read (set here
/// through the URL's startup `options`, as a role's or a database's default
/// would, without changing the role other tests use) still serve every
/// waiter in order: the grant's update must read the row its predecessor
/// committed, not the snapshot taken when its wait began.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_are_served_in_order_when_sessions_default_to_repeatable_read() {
    let class = fresh_class();
    let url = with_options(&fair_url(&unique("fifo_rr"), class), REPEATABLE_READ);
    assert_sessions_repeatable_read(&with_options(&self::url(), REPEATABLE_READ)).await;
    served_in_order(&url, class).await;
}

/// Six waiters, two on each of three backends of fair advisory mode at
/// `url` (in `class`), are each granted in the order they asked, with
/// increasing tokens.
async fn served_in_order(url: &str, class: i32) {
    const WAITERS: usize = 6;
    let clients = clients(url, 3).await;
    let admin = admin().await;
    let lock = name(&unique("fifo"));
    let held = clients[0].acquire(&lock).await.expect("acquire");
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for index in 0..WAITERS {
        // Two tasks of each client, interleaved: the holder's client too.
        let client = clients[index % 3].clone();
        let (lock, served) = (lock.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client.acquire(&lock).await.expect("acquire");
            served.lock().unwrap().push((index, guard.fencing_token()));
            assert!(guard.release().await.expect("release"));
        }));
        until_in_line(&admin, class, index + 1).await;
    }
    let first = held.fencing_token();
    assert!(held.release().await.expect("release"));
    for task in tasks {
        task.await.expect("a waiter");
    }
    let served = served.lock().unwrap().clone();
    let order: Vec<usize> = served.iter().map(|(index, _)| *index).collect();
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "the order of asking"
    );
    let tokens: Vec<u64> = std::iter::once(first)
        .chain(served.iter().map(|(_, token)| *token))
        .collect();
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens increase: {tokens:?}"
    );
}

/// A waiter's first attempt answers "wait" only once its place is in the
/// server's queue, however late the task that takes it runs: a waiter
/// that asks after that answer is served after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_is_in_line_when_its_first_attempt_answers() {
    let (scene, held) = Scene::held("answered").await;
    let request = waiting_request(&scene.lock, PATIENCE, "first");
    let mut first = WaitState::new();
    let attempt = scene
        .backend
        .try_acquire(&request, &mut first)
        .await
        .expect("an attempt");
    assert!(matches!(attempt, Attempt::Held { .. }));
    // Looked at once, nothing awaited in between.
    let in_line = on_keys(&scene.admin, scene.class, false).await;
    assert_eq!(in_line.len(), 1, "its place is taken: {in_line:?}");
    let (before, second) = scene.release_to(held, &in_line).await;
    let token = loop {
        match scene.backend.try_acquire(&request, &mut first).await {
            Ok(Attempt::Acquired { fencing_token, .. }) => break fencing_token,
            Ok(Attempt::Held { .. }) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(error) => panic!("taking the grant over: {error}"),
        }
    };
    assert!(token > before);
    // Its grant dropped, its session closes, and the line moves on.
    let guard = second.await.expect("the second waiter");
    assert!(guard.fencing_token() > token);
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_hands_the_lock_to_the_first_in_line_and_a_try_never_jumps_it() {
    let class = fresh_class();
    let url = fair_url(&unique("handoff"), class);
    let clients = clients(&url, 3).await;
    let admin = admin().await;
    let lock = name(&unique("handoff"));
    let held = clients[0].acquire(&lock).await.expect("acquire");
    let holder = on_keys(&admin, class, true).await;
    assert_eq!(holder.len(), 1);
    let waiting = tokio::spawn({
        let (client, lock) = (clients[1].clone(), lock.clone());
        async move { client.acquire(&lock).await.expect("acquire") }
    });
    until_in_line(&admin, class, 1).await;
    let in_line = on_keys(&admin, class, false).await;
    // A try while someone waits fails, from any backend.
    assert!(clients[2].try_acquire(&lock).await.expect("try").is_none());
    assert!(held.release().await.expect("release"));
    // The release itself granted the waiter's session: nobody else asked.
    assert_eq!(on_keys(&admin, class, true).await, in_line);
    assert!(on_keys(&admin, class, false).await.is_empty());
    assert!(clients[2].try_acquire(&lock).await.expect("try").is_none());
    assert!(clients[0].try_acquire(&lock).await.expect("try").is_none());
    let guard = waiting.await.expect("the waiter");
    let handed = guard.fencing_token();
    assert!(guard.release().await.expect("release"));
    let again = clients[2]
        .try_acquire(&lock)
        .await
        .expect("try")
        .expect("free once the line is empty");
    assert!(again.fencing_token() > handed);
    assert!(again.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_waiter_leaves_the_line_at_once() {
    let class = fresh_class();
    let url = fair_url(&unique("cancel"), class);
    let clients = clients(&url, 3).await;
    let admin = admin().await;
    let lock = name(&unique("cancel"));
    let held = clients[0].acquire(&lock).await.expect("acquire");
    let (cancel, gives_up) = acquire_until_cancelled(&clients[1], &lock, AcquireOptions::new());
    until_in_line(&admin, class, 1).await;
    let leaving = on_keys(&admin, class, false).await;
    let stays = tokio::spawn({
        let (client, lock) = (clients[2].clone(), lock.clone());
        async move { client.acquire(&lock).await.expect("acquire") }
    });
    until_in_line(&admin, class, 2).await;
    cancel.send(()).expect("the waiter listens");
    assert!(gives_up.await.expect("the waiter").is_err(), "cancelled");
    let left = on_keys(&admin, class, false).await;
    assert_eq!(left.len(), 1, "its place is gone: {left:?}");
    assert!(!left.contains(&leaving[0]), "the one that stayed waits");
    assert!(held.release().await.expect("release"));
    let guard = stays.await.expect("the waiter that stayed");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_wait_leaves_the_line() {
    let (scene, held) = Scene::held("dropped").await;
    let mut wait = WaitState::new();
    let attempt = scene
        .backend
        .try_acquire(
            &waiting_request(&scene.lock, PATIENCE, "abandoned"),
            &mut wait,
        )
        .await
        .expect("an attempt");
    assert!(matches!(attempt, Attempt::Held { .. }));
    until_in_line(&scene.admin, scene.class, 1).await;
    // Its state dropped without ending the wait, as when its process goes:
    // the session closes, and the server drops the place.
    drop(wait);
    until_in_line(&scene.admin, scene.class, 0).await;
    assert!(held.release().await.expect("release"));
    scene.clients[1]
        .try_acquire(&scene.lock)
        .await
        .expect("try")
        .expect("nobody waits")
        .release()
        .await
        .expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_that_never_takes_its_grant_holds_the_line_up_for_its_lease() {
    let (scene, held) = Scene::held("unclaimed").await;
    // First in line, and never asks again nor ends its wait, as a process
    // that stopped: its grant lasts one lease of its session's silence.
    let mut stopped = WaitState::new();
    let lease = Duration::from_secs(2);
    scene
        .backend
        .try_acquire(
            &waiting_request(&scene.lock, lease, "abandoned"),
            &mut stopped,
        )
        .await
        .expect("an attempt");
    until_in_line(&scene.admin, scene.class, 1).await;
    let first = on_keys(&scene.admin, scene.class, false).await;
    let (before, live) = scene.release_to(held, &first).await;
    // The server ends the silent session after its lease, and the next in
    // line is granted, past the unclaimed grant's token.
    let guard = live.await.expect("the live waiter");
    assert!(guard.fencing_token() > before + 1);
    assert!(guard.release().await.expect("release"));
    drop(stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn campaigns_served_in_line_record_one_chain_of_terms() {
    const CAMPAIGNERS: usize = 4;
    const ROUNDS: usize = 3;
    let url = fair_url(&unique("terms"), fresh_class());
    let lock = name(&unique("election"));
    let mut campaigners = Vec::new();
    for _ in 0..CAMPAIGNERS {
        campaigners.push(client(open(&url).await));
    }
    let (won, clients) = race_campaigns(campaigners, &lock, ROUNDS, PATIENCE).await;
    let kept = clients[0]
        .backend()
        .term_log()
        .expect("a record of terms")
        .terms_after(&lock, 0, ADMIN_LIMIT)
        .await
        .expect("read the terms");
    assert_eq!(
        terms_and_values(&kept),
        won,
        "every term won, in order, once"
    );
    for pair in kept.windows(2) {
        assert_eq!(pair[1].previous, Some(pair[0].term), "chained");
    }
}

/// A client on `backend` whose holders carry `label`.
fn labelled(backend: Arc<PostgresBackend>, label: &str) -> LockClient {
    let options = LockOptions::builder()
        .lease(PATIENCE)
        .backoff(Duration::from_millis(5), Duration::from_millis(100))
        .label(label)
        .build()
        .expect("valid options");
    LockClient::new(backend, options)
}

/// The waiters `client`'s listing shows for `lock`, once the server has
/// recorded when each began to wait (a moment after it joined the queue).
async fn listed_waiters(client: &LockClient, lock: &distlock_core::LockName) -> Waiters {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let listed = client.list().await.expect("list");
        let info = listed
            .iter()
            .find(|info| &info.name == lock)
            .unwrap_or_else(|| panic!("{lock} is held but not listed: {listed:?}"));
        let timed = info
            .waiters
            .listed()
            .is_some_and(|waiters| waiters.iter().all(|w| w.waiting_for.is_some()));
        if timed || tokio::time::Instant::now() > deadline {
            return info.waiters.clone();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The listing shows who waits in the server's queue of a name's key:
/// the writers in line, in the order the server will grant them, each
/// with its host, pid and label (one beyond printable ASCII, with a
/// space) and how long it has waited by the server's clock, and a
/// transaction lock's writer, whose holder nobody recorded; the waiter of
/// another name only under that name. A reader, which polls, is not
/// there: the list is the waits for the whole lock.
/// A waiter's session has its own application name back once granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_listing_shows_the_writers_in_line_in_order_with_their_holders() {
    let class = fresh_class();
    let table = unique("listed");
    let fair = fair_url(&table, class);
    let admin = admin().await;
    let lock = name(&unique("listed"));
    let holder = client(open(&fair).await);
    let held = holder.acquire(&lock).await.expect("acquire");
    assert_eq!(
        listed_waiters(&holder, &lock).await,
        Waiters::WholeLock(vec![]),
        "nobody waits yet"
    );
    // Another name of the table, with a waiter of its own.
    let other = name(&unique("elsewhere"));
    let other_held = holder.acquire(&other).await.expect("acquire");
    let elsewhere = tokio::spawn({
        let (client, other) = (labelled(open(&fair).await, "elsewhere"), other.clone());
        async move { client.acquire(&other).await.expect("acquire") }
    });
    until_in_line(&admin, class, 1).await;
    let elsewhere_pid = on_keys(&admin, class, false).await;
    let labels = ["first", "zweiter Wärter"];
    let (mut writers, mut in_line) = (Vec::new(), Vec::new());
    for (index, label) in labels.into_iter().enumerate() {
        let client = labelled(open(&fair).await, label);
        let lock = lock.clone();
        writers.push(tokio::spawn(async move {
            client.acquire(&lock).await.expect("acquire")
        }));
        until_in_line(&admin, class, index + 2).await;
        let pids = on_keys(&admin, class, false).await;
        let joined: Vec<i32> = pids
            .into_iter()
            .filter(|pid| !in_line.contains(pid) && !elsewhere_pid.contains(pid))
            .collect();
        in_line.extend(joined);
    }
    let locks = XactLocks::open(&with_options(
        &url(),
        &format!("table={table}&advisory_class={class}"),
    ))
    .await
    .expect("open transaction locks");
    let (commit, committed) = tokio::sync::oneshot::channel::<()>();
    let transaction = tokio::spawn({
        let lock = lock.clone();
        async move {
            let (mut session, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(connection);
            let tx = session.transaction().await.expect("BEGIN");
            let grant = locks
                .lock(&tx, lock.as_str(), PATIENCE)
                .await
                .expect("lock");
            committed.await.expect("told to commit");
            tx.commit().await.expect("COMMIT");
            grant.fencing_token()
        }
    });
    until_in_line(&admin, class, 4).await;
    let reader = tokio::spawn({
        let (client, lock) = (client(open(&fair).await), lock.clone());
        async move {
            client
                .acquire_with(&lock, AcquireOptions::new().shared().timeout(PATIENCE))
                .await
                .expect("a reader's share")
        }
    });
    // The reader polls, kept out by the writers' intent.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!reader.is_finished());

    let Waiters::WholeLock(waiters) = listed_waiters(&holder, &lock).await else {
        panic!("fair advisory mode lists the waits for the whole lock");
    };
    let holders: Vec<Option<Holder>> = waiters.iter().map(|w| w.holder.clone()).collect();
    assert_eq!(
        holders,
        vec![
            Some(Holder::this_process(Some(labels[0]))),
            Some(Holder::this_process(Some(labels[1]))),
            None,
        ],
        "in the server's order, the transaction lock's without a holder"
    );
    assert!(waiters.iter().all(|w| w.kind == LockKind::Exclusive));
    let waited: Vec<Duration> = waiters.iter().filter_map(|w| w.waiting_for).collect();
    assert_eq!(waited.len(), 3, "{waiters:?}");
    assert!(
        waited.windows(2).all(|pair| pair[0] >= pair[1]) && waited[2] >= Duration::from_millis(200),
        "the first waited longest, each at least since the reader came: {waited:?}"
    );
    let Waiters::WholeLock(waiters) = listed_waiters(&holder, &other).await else {
        panic!("fair advisory mode lists the waits for the whole lock");
    };
    let holders: Vec<Option<Holder>> = waiters.iter().map(|w| w.holder.clone()).collect();
    assert_eq!(
        holders,
        vec![Some(Holder::this_process(Some("elsewhere")))],
        "each name lists its own waiters"
    );

    assert!(held.release().await.expect("release"));
    let mut writers = writers.into_iter();
    let first = writers.next().unwrap().await.expect("the first writer");
    assert!(on_keys(&admin, class, true).await.contains(&in_line[0]));
    let names: Vec<String> = first_column(
        &admin,
        "SELECT application_name FROM pg_stat_activity WHERE pid = $1",
        &[(&in_line[0], tokio_postgres::types::Type::INT4)],
        "pg_stat_activity",
    )
    .await;
    assert!(
        names.iter().all(|name| !name.starts_with("distlock ")),
        "granted, the session has its own name back: {names:?}"
    );
    let Waiters::WholeLock(waiters) = listed_waiters(&holder, &lock).await else {
        panic!("fair advisory mode lists the waits for the whole lock");
    };
    assert_eq!(waiters.len(), 2, "the one served no longer waits");
    assert!(first.release().await.expect("release"));
    let second = writers.next().unwrap().await.expect("the second writer");
    assert!(second.release().await.expect("release"));
    commit.send(()).expect("the transaction waits");
    let token = transaction.await.expect("the transaction lock");
    let share = reader.await.expect("the reader");
    assert!(share.fencing_token() > token);
    assert!(share.release().await.expect("release"));
    assert!(other_held.release().await.expect("release"));
    let served = elsewhere.await.expect("the waiter elsewhere");
    assert!(served.release().await.expect("release"));
}

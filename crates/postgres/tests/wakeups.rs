//! Release wake-ups against a real server: a release in one backend
//! instance wakes a waiter in another long before its backoff would have
//! it try again; through PgBouncer in transaction mode the backend says
//! that notifications do not arrive and polls, unless `listen_url` names
//! the server itself; a listening connection that an administrator
//! terminates comes back. `scripts/test` starts the server and PgBouncer
//! and sets `DISTLOCK_TEST_POSTGRES_URL` and
//! `DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL`.

mod support;

use distlock_faultproxy::{Fault, FaultProxy};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::backend::Backend;
use distlock_core::backend::BackendExt;
use distlock_core::testing::assert_a_leaving_permit_holder_wakes_the_waiter;
use distlock_core::{LockClient, LockName, LockOptions};
use distlock_postgres::tokio_postgres::{self, types::Type};
use distlock_postgres::{PostgresBackend, WakeUps};

use distlock_core::testing::ADMIN_LIMIT;
use support::{
    address_of, admin, first_column, name, open, pgbouncer_url, unique, url, with_options,
};

/// How long a woken waiter may take to be granted. A waiter that is not
/// woken tries again only after [`LONG`].
const PATIENCE: Duration = Duration::from_secs(30);

/// The holders' leases and the waiters' longest backoff: far longer than
/// any test waits.
const LONG: Duration = Duration::from_secs(600);

/// `text` with everything but letters and digits %-escaped, as a URL's
/// option value.
fn escaped(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

/// Waits until `backend`'s wake-ups are `state`.
async fn wait_for(backend: &PostgresBackend, state: WakeUps, within: Duration) {
    let started = Instant::now();
    while backend.wake_ups() != state {
        assert!(
            started.elapsed() < within,
            "wake-ups still {:?}, not {state:?}, after {within:?}",
            backend.wake_ups()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A client that holds its locks for [`LONG`] unless it releases them.
fn holder(backend: Arc<PostgresBackend>) -> LockClient {
    let options = LockOptions::builder()
        .lease(LONG)
        .build()
        .expect("valid options");
    LockClient::new(backend, options)
}

/// A client whose waits try again unwoken only after [`LONG`], from the
/// first pause on.
fn patient(backend: Arc<PostgresBackend>) -> LockClient {
    let options = LockOptions::builder()
        .lease(LONG)
        .backoff(LONG, LONG)
        .build()
        .expect("valid options");
    LockClient::new(backend, options)
}

/// Holds `lock` in `holders`, has `waiters` wait for it, frees it with
/// `free`, and checks that the waiter is granted within [`PATIENCE`]: only
/// a wake-up can do that.
async fn waiter_is_woken<F, Fut>(
    holders: &LockClient,
    waiters: LockClient,
    lock: &LockName,
    free: F,
) where
    F: FnOnce(distlock_core::LockGuard) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let held = holders.acquire_with(lock, PATIENCE).await.expect("hold");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { waiters.acquire_with(&lock, LONG).await })
    };
    // The waiter found the lock held, and waits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "the waiter did not wait");
    let token = held.fencing_token();
    let freed = Instant::now();
    free(held).await;
    let granted = tokio::time::timeout(PATIENCE, waiter)
        .await
        .expect("the waiter is woken by the release, long before its backoff ends")
        .expect("task")
        .expect("granted");
    assert!(granted.fencing_token() > token);
    eprintln!("granted {:?} after the release", freed.elapsed());
    assert!(granted.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_is_woken_by_another_instances_release() {
    let server = with_options(&url(), &format!("table={}", unique("woken")));
    let waiting = open(&server).await;
    let holding = open(&server).await;
    wait_for(&waiting, WakeUps::Listening, PATIENCE).await;
    assert!(waiting.wakeups().is_some());
    let (holders, waiters) = (holder(holding.clone()), patient(waiting.clone()));

    let lock = name(&unique("released"));
    waiter_is_woken(&holders, waiters.clone(), &lock, |guard| async move {
        assert!(guard.release().await.expect("release"));
    })
    .await;

    // An administrator's forced release wakes waiters too.
    let lock = name(&unique("forced"));
    let backend = holding.clone();
    waiter_is_woken(&holders, waiters, &lock, |guard| async move {
        let name = guard.name().clone();
        assert!(
            backend
                .force_release(&name, ADMIN_LIMIT)
                .await
                .expect("force")
        );
        // The guard learns of it at its next extension; it need not wait.
        drop(guard);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_permit_waiter_is_woken_when_any_holder_leaves() {
    let server = with_options(&url(), &format!("table={}", unique("permits")));
    let waiting = open(&server).await;
    wait_for(&waiting, WakeUps::Listening, PATIENCE).await;
    let first = holder(open(&server).await);
    let second = holder(open(&server).await);
    let third = patient(waiting);
    let lock = name(&unique("permits"));
    let waiting = tokio::time::sleep(Duration::from_millis(500));
    assert_a_leaving_permit_holder_wakes_the_waiter([&first, &second], third, &lock, LONG, waiting)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_pgbouncer_without_listen_url_waits_poll_and_say_so() {
    let table = format!("table={}", unique("bounced"));
    let backend = open(&with_options(&pgbouncer_url(), &table)).await;
    // Three probes of 2 s each, with pauses between them.
    wait_for(&backend, WakeUps::Unavailable, Duration::from_secs(60)).await;
    assert!(backend.wakeups().is_none());

    // Waits still end: they poll with the client's backoff.
    let options = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .backoff(Duration::from_millis(5), Duration::from_millis(200))
        .build()
        .expect("valid options");
    let polling = LockClient::new(backend.clone(), options);
    let holders = holder(open(&with_options(&url(), &table)).await);
    let lock = name(&unique("polled"));
    let held = holders.acquire_with(&lock, PATIENCE).await.expect("hold");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { polling.acquire_with(&lock, PATIENCE).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(held.release().await.expect("release"));
    let granted = tokio::time::timeout(PATIENCE, waiter)
        .await
        .expect("the polling waiter is granted")
        .expect("task")
        .expect("granted");
    assert!(granted.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_pgbouncer_with_listen_url_at_the_server_wake_ups_work() {
    let table = format!("table={}", unique("bounced"));
    let listening = format!("{table}&listen_url={}", escaped(&url()));
    let waiting = open(&with_options(&pgbouncer_url(), &listening)).await;
    let holding = open(&with_options(&pgbouncer_url(), &table)).await;
    wait_for(&waiting, WakeUps::Listening, PATIENCE).await;
    let lock = name(&unique("bounced"));
    waiter_is_woken(
        &holder(holding),
        patient(waiting),
        &lock,
        |guard| async move {
            assert!(guard.release().await.expect("release"));
        },
    )
    .await;
}

/// The server process ids of the listening connections whose application
/// name is `application`: nothing but `LISTEN` and `UNLISTEN` runs on them.
async fn listeners(admin: &tokio_postgres::Client, application: &str) -> Vec<i32> {
    first_column(
        admin,
        "SELECT pid FROM pg_stat_activity
         WHERE application_name = $1 AND (query LIKE 'LISTEN %' OR query LIKE 'UNLISTEN %')",
        &[(&application, Type::TEXT)],
        "pg_stat_activity",
    )
    .await
}

/// A backend whose connections carry the application name `application`,
/// once it listens, and a client that holds on another backend; both on a
/// fresh table whose name starts with `table`.
async fn listening_beside_holders(
    application: &str,
    table: &str,
) -> (Arc<PostgresBackend>, LockClient) {
    let table = format!("table={}", unique(table));
    let waiting = open(&with_options(
        &url(),
        &format!("{table}&application_name={application}"),
    ))
    .await;
    let holders = holder(open(&with_options(&url(), &table)).await);
    wait_for(&waiting, WakeUps::Listening, PATIENCE).await;
    (waiting, holders)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminated_listening_connection_comes_back_and_wakes_again() {
    let application = unique("distlock_listener");
    let (waiting, holders) = listening_beside_holders(&application, "terminated").await;
    let admin = admin().await;
    let before = listeners(&admin, &application).await;
    assert_eq!(before.len(), 1, "one listening connection per backend");

    let terminated = admin
        .query_typed(
            "SELECT pg_terminate_backend($1)",
            &[(&before[0], Type::INT4)],
        )
        .await
        .expect("terminate");
    assert!(terminated[0].get::<_, bool>(0));

    // Another connection listens, and was shown to deliver.
    let started = Instant::now();
    loop {
        let now = listeners(&admin, &application).await;
        if waiting.wake_ups() == WakeUps::Listening && now.len() == 1 && now != before {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "not back after {PATIENCE:?}: {:?}, listeners {now:?}",
            waiting.wake_ups()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let lock = name(&unique("after"));
    waiter_is_woken(&holders, patient(waiting), &lock, |guard| async move {
        assert!(guard.release().await.expect("release"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_while_the_listener_is_down_delays_a_waiter_but_never_strands_it() {
    let server = url();
    let proxy = FaultProxy::start(address_of(&server)).expect("fault proxy");
    let address = address_of(&server);
    let proxied = server.replacen(
        &format!("{}:{}", address.ip(), address.port()),
        &proxy.addr().to_string(),
        1,
    );
    let table = format!("table={}", unique("down"));
    let listening = format!("{table}&listen_url={}", escaped(&proxied));
    let waiting = open(&with_options(&server, &listening)).await;
    let holders = holder(open(&with_options(&server, &table)).await);
    wait_for(&waiting, WakeUps::Listening, PATIENCE).await;

    let lock = name(&unique("down"));
    let held = holders.acquire_with(&lock, PATIENCE).await.expect("hold");
    let waiter = {
        let waiters = patient(waiting.clone());
        let lock = lock.clone();
        tokio::spawn(async move { waiters.acquire_with(&lock, LONG).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "the waiter did not wait");

    // The listening connection goes, and cannot come back; the release
    // that follows is heard by nobody.
    // Its connections dropped and new ones refused, until restored.
    proxy.set_fault(Fault::Refuse);
    proxy.reset_all();
    wait_for(&waiting, WakeUps::Reconnecting, PATIENCE).await;
    // The waiter tried once more when the connection failed, and found
    // the lock held; now it waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter did not wait");
    assert!(held.release().await.expect("release"));
    let released = Instant::now();
    let granted = tokio::time::timeout(PATIENCE, waiter)
        .await
        .expect("the waiter polls while the listener is down")
        .expect("task")
        .expect("granted");
    eprintln!("granted {:?} after the unheard release", released.elapsed());
    assert_eq!(waiting.wake_ups(), WakeUps::Reconnecting);
    assert!(granted.release().await.expect("release"));

    // Back, it wakes waiters again.
    proxy.clear();
    wait_for(&waiting, WakeUps::Listening, PATIENCE).await;
    let lock = name(&unique("back"));
    waiter_is_woken(&holders, patient(waiting), &lock, |guard| async move {
        assert!(guard.release().await.expect("release"));
    })
    .await;
}

/// A release whose commit the server refuses because its notification
/// queue is full (a listening session somewhere stopped reading it) is sent
/// again without the notification, so the name is still freed. The full
/// queue (8 GB in PostgreSQL 15) is stood in for by a trigger that refuses
/// the first write to the lock's row (its update, or the deletion of a row
/// the release leaves unused) with the same error, SQLSTATE 54000.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_refused_for_a_full_notification_queue_still_frees_the_name() {
    let table = unique("full_queue");
    let backend = open(&with_options(&url(), &format!("table={table}"))).await;
    let holders = holder(backend.clone());
    let lock = name("refused once");
    let held = holders.acquire_with(&lock, PATIENCE).await.expect("hold");

    let admin = admin().await;
    // `table` is lower-case letters, digits and underscores: a plain
    // identifier, named by the test itself.
    admin
        .batch_execute(&format!(
            "CREATE SEQUENCE {table}_writes;
             CREATE FUNCTION {table}_refuse_first() RETURNS trigger LANGUAGE plpgsql AS $body$
             BEGIN
                 IF nextval('{table}_writes') = 1 THEN
                     RAISE EXCEPTION 'too many notifications in the NOTIFY queue'
                         USING ERRCODE = '54000';
                 END IF;
                 RETURN coalesce(NEW, OLD);
             END $body$;
             CREATE TRIGGER refuse_first BEFORE UPDATE OR DELETE ON {table}
                 FOR EACH ROW EXECUTE FUNCTION {table}_refuse_first();"
        ))
        .await
        .expect("the refusing trigger");

    assert!(held.release().await.expect("the release succeeds"));
    let writes: i64 = admin
        .query_one(&format!("SELECT last_value FROM {table}_writes"), &[])
        .await
        .expect("the count of writes")
        .get(0);
    assert_eq!(
        writes, 2,
        "one refused write, then one without the notification"
    );
    let next = holders
        .try_acquire(&lock)
        .await
        .expect("try")
        .expect("the name is free");
    assert!(next.release().await.expect("release"));
}

/// While the server's notification queue is full, releases go without
/// their notifications, so a waiter that trusted its wake-ups would sleep
/// to the holder's lease end. A probe refused for the full queue turns the
/// wake-ups off, and waits poll instead: here a waiter is granted within
/// [`PATIENCE`] although the holder's lease ([`LONG`]) has far to run
/// (review finding 9). The full queue is stood in for, once the listening
/// connections work, by a `pg_notify` of the test's own, ahead of the
/// server's on the backends' search path, that refuses with SQLSTATE 54000.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waits_poll_while_the_notification_queue_is_full() {
    let admin = admin().await;
    // A plain identifier the test names itself.
    let schema = unique("full_queue");
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("the schema");
    let url = with_options(
        &url(),
        &format!("table={schema}_locks&options=-c%20search_path%3D{schema}%2Cpublic%2Cpg_catalog"),
    );
    let (holding, waiting) = (open(&url).await, open(&url).await);
    wait_for(&waiting, WakeUps::Listening, PATIENCE).await;
    let lock = name("queue full");
    let held = holder(holding)
        .acquire_with(&lock, PATIENCE)
        .await
        .expect("hold");
    let waiter = {
        let (waiters, lock) = (holder(waiting.clone()), lock.clone());
        tokio::spawn(async move { waiters.acquire_with(&lock, PATIENCE).await })
    };

    admin
        .batch_execute(&format!(
            "CREATE FUNCTION {schema}.pg_notify(text, text) RETURNS void LANGUAGE plpgsql AS
               $$ BEGIN
                   RAISE EXCEPTION 'too many notifications in the NOTIFY queue'
                       USING ERRCODE = '54000';
               END $$;"
        ))
        .await
        .expect("the full queue");
    wait_for(&waiting, WakeUps::Reconnecting, PATIENCE).await;
    assert!(held.release().await.expect("the release succeeds"));
    let granted = waiter
        .await
        .expect("task")
        .expect("granted by polling, long before the old lease's end");
    assert!(granted.release().await.expect("release"));
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop the schema");
}

/// The channel of the names `application`'s listening connection began
/// to listen to last, as its latest `LISTEN` names it: the probe's channel
/// is another.
async fn bucket_listened(admin: &tokio_postgres::Client, application: &str) -> Option<String> {
    let rows = admin
        .query_typed(
            "SELECT query FROM pg_stat_activity WHERE application_name = $1
               AND query LIKE 'LISTEN %' AND query NOT LIKE '%probe%'",
            &[(&application, Type::TEXT)],
        )
        .await
        .expect("pg_stat_activity");
    let query: String = rows.first()?.get(0);
    let quoted = query.split('"').nth(1)?;
    Some(quoted.to_owned())
}

/// A flood of notifications on a channel a waiter listens to, 200,000
/// distinct releases as far as the listener can tell, is kept within the
/// listener's bound, and the waiter is still woken by the release that
/// follows it (review finding 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_notifications_stays_bounded_and_the_waiter_still_wakes() {
    let application = unique("distlock_flooded");
    let (waiting, holders) = listening_beside_holders(&application, "flood").await;
    let admin = admin().await;

    let lock = name(&unique("flooded"));
    let held = holders.acquire_with(&lock, PATIENCE).await.expect("hold");
    let waiter = {
        let (waiters, lock) = (patient(waiting.clone()), lock.clone());
        tokio::spawn(async move { waiters.acquire_with(&lock, LONG).await })
    };
    let started = Instant::now();
    let channel = loop {
        if let Some(channel) = bucket_listened(&admin, &application).await {
            break channel;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the waiter's channel is not listened to after {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let flood: i64 = admin
        .query_one(
            "SELECT count(pg_notify($1, lpad(to_hex(g), 16, '0')))
             FROM generate_series(1, 200000) AS g",
            &[&channel],
        )
        .await
        .expect("the flood")
        .get(0);
    assert_eq!(flood, 200_000);
    assert!(!waiter.is_finished(), "the lock is still held");

    // The release's notification comes after the whole flood.
    let token = held.fencing_token();
    assert!(held.release().await.expect("release"));
    let granted = tokio::time::timeout(PATIENCE, waiter)
        .await
        .expect("the waiter is woken after the flood, long before its backoff ends")
        .expect("task")
        .expect("granted");
    assert!(granted.fencing_token() > token);
    let queue = waiting.wake_up_queue();
    eprintln!("after the flood: {queue:?}");
    assert!(queue.most_queued <= queue.limit, "{queue:?}");
    assert!(queue.most_queued > 0, "the flood was heard: {queue:?}");
    assert!(granted.release().await.expect("release"));
}

//! The PostgreSQL backend against a real server: names that SQL would
//! mangle, creation races on a fresh schema (tasks and processes),
//! connections terminated under a held lock, URL errors, and credentials
//! that never show. `scripts/test` starts the server and sets
//! `DISTLOCK_TEST_POSTGRES_URL` (and `DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL`).

mod support;

use std::collections::HashSet;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Backend, Lease};
use distlock_core::testing::{quick_options, try_grant};
use distlock_core::{Claim, Error, Holder, LockClient, LockName, LockOptions};
use distlock_postgres::PostgresBackend;
use distlock_postgres::tokio_postgres::{self, NoTls};

use distlock_core::testing::ADMIN_LIMIT;
use support::{
    REPEATABLE_READ, assert_sessions_repeatable_read, name, pgbouncer_url, unique, url,
    with_options,
};

fn holder() -> Arc<Holder> {
    Holder::this_process(Some("postgres-tests")).into()
}

/// One attempt through the backend alone: whether it was granted.
async fn try_once(backend: &dyn Backend, name: &LockName, lease: Duration) -> Result<bool, Error> {
    let request = AcquireRequest::new(name.clone(), Claim::Exclusive, lease, holder());
    Ok(try_grant(backend, &request).await?.is_some())
}

/// One grant of `claim` on `name` through the backend alone, with a
/// 30 s lease that nobody extends; a panic when the name is held.
async fn grant(backend: &dyn Backend, name: LockName, claim: Claim) -> Lease {
    let request = AcquireRequest::new(name, claim, Duration::from_secs(30), holder());
    try_grant(backend, &request)
        .await
        .expect("acquire")
        .unwrap_or_else(|| panic!("{} was held", request.name))
}

fn options(lease: Duration) -> LockOptions {
    quick_options(lease).build().expect("valid options")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn names_sql_would_mangle_round_trip_through_list() {
    for server in [url(), pgbouncer_url()] {
        let backend = PostgresBackend::open(&with_options(
            &server,
            &format!("table={}", unique("names")),
        ))
        .await
        .expect("open");
        let long = format!("long{}", "é".repeat(510));
        let names = [
            "plain",
            "plain\0",
            "nul\0inside",
            "quote'd \"twice\"",
            "$$dollars$$ and $1",
            "back\\slash\\\\",
            "'); DROP TABLE distlock_locks; --",
            &long[..1024],
        ]
        .map(name);
        assert_eq!(names[7].as_str().len(), 1024);
        for lock in &names {
            assert!(
                try_once(&backend, lock, Duration::from_secs(30))
                    .await
                    .expect("acquire"),
                "{lock:?} was not granted"
            );
        }
        let listed = backend.list(ADMIN_LIMIT).await.expect("list");
        let listed: Vec<&LockName> = listed.iter().map(|info| &info.name).collect();
        assert_eq!(listed.len(), names.len(), "{listed:?}");
        for lock in &names {
            assert!(listed.contains(&lock), "{lock:?} missing from {listed:?}");
            // Held, so a second try loses: the names did not collide.
            assert!(
                !try_once(&backend, lock, Duration::from_secs(30))
                    .await
                    .expect("try")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_creators_of_a_new_name_on_a_fresh_schema_make_one_winner() {
    let server = with_options(&url(), &format!("schema={}", unique("race")));
    let lock = name(&unique("raced"));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let server = server.clone();
        let lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            let backend = PostgresBackend::open(&server).await?;
            try_once(&backend, &lock, Duration::from_secs(30)).await
        }));
    }
    let mut winners = 0;
    for task in tasks {
        if task.await.expect("task").expect("no task fails") {
            winners += 1;
        }
    }
    assert_eq!(winners, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_opening_at_once_on_a_fresh_schema_all_succeed() {
    let server = with_options(&url(), &format!("schema={}", unique("procs")));
    // Opens the backend there and takes one lock (tests/helpers/open_child.rs).
    let exe = env!("CARGO_BIN_EXE_distlock-postgres-test-child");
    let mut children = Vec::new();
    for _ in 0..8 {
        children.push(
            tokio::process::Command::new(exe)
                .env("DISTLOCK_POSTGRES_CHILD_URL", &server)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn a child"),
        );
    }
    for child in children {
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("the child finishes")
            .expect("the child's output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("acquired"),
            "a child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A table of the same name that distlock did not make is refused by
/// name, in both modes, and left as it was.
#[tokio::test]
async fn a_table_distlock_did_not_make_is_refused_and_left_alone() {
    let schema = unique("foreign");
    let (admin, connection) = tokio_postgres::connect(&url(), NoTls).await.expect("admin");
    tokio::spawn(connection);
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\";
             CREATE TABLE \"{schema}\".distlock_locks (id integer);
             INSERT INTO \"{schema}\".distlock_locks VALUES (7);"
        ))
        .await
        .expect("make a table of our own");
    for mode in ["lease", "advisory"] {
        let server = with_options(
            &url(),
            &format!("schema={schema}&mode={mode}&table=distlock_locks"),
        );
        match PostgresBackend::open(&server).await {
            Err(Error::InvalidConfig { field, reason }) => {
                assert_eq!(field, "table", "{mode}: {reason}");
                assert!(reason.contains("not made by distlock"), "{mode}: {reason}");
            }
            other => panic!("{mode}: expected a refusal, got {other:?}"),
        }
    }
    let rows = admin
        .query(&format!("SELECT id FROM \"{schema}\".distlock_locks"), &[])
        .await
        .expect("the table is still there");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i32>(0), 7);
}

/// Terminates, as an administrator would, every server connection whose
/// application name is `application`; returns how many.
async fn terminate(admin: &tokio_postgres::Client, application: &str) -> i64 {
    let rows = admin
        .query_typed(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[(&application, tokio_postgres::types::Type::TEXT)],
        )
        .await
        .expect("terminate");
    rows[0].get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_lock_survives_its_connections_being_terminated() {
    let application = unique("distlock_terminated");
    let server = with_options(&url(), &format!("application_name={application}"));
    let backend = Arc::new(PostgresBackend::open(&server).await.expect("open"));
    let lease = Duration::from_secs(2);
    let client = LockClient::new(backend.clone(), options(lease));
    let lock = name(&unique("terminated"));
    let guard = client.acquire_with(&lock, lease).await.expect("acquire");

    let (admin, connection) = tokio_postgres::connect(&url(), NoTls).await.expect("admin");
    tokio::spawn(connection);
    let mut terminated = 0;
    let started = Instant::now();
    // Three leases, a connection killed every second.
    while started.elapsed() < lease * 3 {
        terminated += terminate(&admin, &application).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!guard.is_lost(), "lost after {:?}", started.elapsed());
    }
    assert!(terminated > 0, "no connection was terminated");

    // The extension resumed: a lease later, without it the guard would
    // have given the lock up; the lease is still ours, and running.
    tokio::time::sleep(lease).await;
    assert!(!guard.is_lost(), "lost once the terminations stopped");
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    let ours = listed
        .iter()
        .find(|info| info.name == lock)
        .expect("the lock is listed");
    assert_eq!(ours.fencing_token, Some(guard.fencing_token()));
    assert!(ours.expires_in.expect("an expiry") > lease / 4, "{ours:?}");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test]
async fn bad_url_options_are_clear_errors() {
    let base = url();
    let cases = [
        ("mode=advisory&advisory_class=-3", "advisory_class"),
        ("mode=fastest", "lease and advisory"),
        ("table=", "table"),
        ("schema=", "schema"),
        (&format!("table={}", "x".repeat(64)), "63 bytes"),
        ("no_such_option=1", "no_such_option"),
        ("table=%zz", "escape"),
    ];
    for (option, expected) in cases {
        let error = PostgresBackend::open(&with_options(&base, option))
            .await
            .expect_err(option);
        assert!(
            matches!(error, Error::InvalidConfig { .. }),
            "{option}: {error:?}"
        );
        let text = error.to_string();
        assert!(text.contains(expected), "{option}: {text}");
    }
    let error = PostgresBackend::open("mysql://db/")
        .await
        .expect_err("scheme");
    assert!(error.to_string().contains("postgres://"), "{error}");
}

/// The password of `url`, as written.
fn password_of(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL").1;
    let info = rest.rsplit_once('@').expect("user information").0;
    info.split_once(':').expect("a password").1.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_never_shows() {
    let server = url();
    let password = password_of(&server);
    assert!(
        password.len() >= 8,
        "the test server's password is too short to look for"
    );
    let backend = PostgresBackend::open(&server).await.expect("open");
    let shown = format!("{backend:?} {:?}", backend.config());
    assert!(!shown.contains(&password), "{shown}");

    let wrong_password = format!("{password}x");
    let wrong = server.replacen(&password, &wrong_password, 1);
    let refused = PostgresBackend::open(&wrong)
        .await
        .expect_err("a wrong password");
    assert!(matches!(refused, Error::Denied { .. }), "{refused:?}");

    // Nothing listens on port 1.
    let unreachable =
        format!("postgres://distlock:{password}@127.0.0.1:1/distlock?connect_timeout=2");
    let unreachable = PostgresBackend::open(&unreachable)
        .await
        .expect_err("no server");
    let bad_option = PostgresBackend::open(&with_options(&server, "bogus=1"))
        .await
        .expect_err("an unknown option");
    for error in [refused, unreachable, bad_option] {
        let mut texts = vec![error.to_string(), format!("{error:?}")];
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            texts.push(cause.to_string());
            source = cause.source();
        }
        for text in texts {
            assert!(
                !text.contains(&password) && !text.contains(&wrong_password),
                "{text}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_bulk_extension_reports_each_lease() {
    let backend = PostgresBackend::open(&url()).await.expect("open");
    let mut leases = Vec::new();
    for claim in [Claim::Exclusive, Claim::Shared, Claim::Permit { limit: 2 }] {
        leases.push(grant(&backend, name(&unique("bulk")), claim).await);
    }
    // Two readers of one name, and a lease that is not ours.
    leases.push(grant(&backend, leases[1].name.clone(), Claim::Shared).await);
    let mut stranger = leases[0].clone();
    stranger.id = distlock_core::backend::LeaseId::random();
    leases.push(stranger);

    let outcomes: Vec<bool> = backend
        .extend_many(&leases)
        .await
        .outcomes
        .into_iter()
        .map(|outcome| outcome.expect("extend"))
        .collect();
    assert_eq!(outcomes, [true, true, true, true, false]);
    let tokens: HashSet<u64> = leases[..4]
        .iter()
        .map(|lease| lease.fencing_token)
        .collect();
    assert_eq!(tokens.len(), 4, "every grant has its own token");
    for lease in &leases[..4] {
        assert!(backend.release(lease).await.expect("release"));
        assert!(!backend.release(lease).await.expect("release twice"));
    }
}

/// The server's clock now, in µs since the epoch.
async fn server_clock_us(admin: &tokio_postgres::Client) -> i64 {
    let row = admin
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
            &[],
        )
        .await
        .expect("the server's clock");
    row.get(0)
}

fn micros_since_epoch(time: SystemTime) -> i64 {
    let since = time.duration_since(UNIX_EPOCH).expect("after the epoch");
    i64::try_from(since.as_micros()).expect("in range")
}

/// The keeper watches the server's clock through extensions (to see it
/// step): an extension reports the server's clock as it extended, and
/// one that extended nothing reports none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_extension_reads_the_server_clock() {
    let backend = PostgresBackend::open(&url()).await.expect("open");
    let (admin, connection) = tokio_postgres::connect(&url(), NoTls).await.expect("admin");
    tokio::spawn(connection);
    let lease = grant(&backend, name(&unique("clock")), Claim::Exclusive).await;

    let before = server_clock_us(&admin).await;
    let extended = backend.extend_many(std::slice::from_ref(&lease)).await;
    let after = server_clock_us(&admin).await;
    assert!(*extended.outcomes[0].as_ref().expect("extend"));
    let read = micros_since_epoch(extended.server_time.expect("the server's clock"));
    assert!(
        (before..=after).contains(&read),
        "the clock read {read} µs, outside [{before}, {after}] read around it"
    );

    let mut stranger = lease.clone();
    stranger.id = distlock_core::backend::LeaseId::random();
    let extended = backend.extend_many(&[stranger]).await;
    assert!(!*extended.outcomes[0].as_ref().expect("extend"));
    assert_eq!(extended.server_time, None);
    assert!(backend.release(&lease).await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_statement_stuck_behind_a_row_lock_does_not_hold_up_the_next() {
    let table = unique("stuck");
    let backend = PostgresBackend::open(&with_options(&url(), &format!("table={table}")))
        .await
        .expect("open");
    let stuck = name(&unique("stuck"));
    let mut lease = grant(&backend, stuck.clone(), Claim::Exclusive).await;

    // An administrator's transaction holds the row.
    let (mut admin, connection) = tokio_postgres::connect(&url(), NoTls).await.expect("admin");
    tokio::spawn(connection);
    let transaction = admin.transaction().await.expect("begin");
    transaction
        .query_typed(
            &format!("SELECT 1 FROM \"public\".\"{table}\" WHERE name = $1 FOR UPDATE"),
            &[(
                &stuck.as_str().as_bytes(),
                tokio_postgres::types::Type::BYTEA,
            )],
        )
        .await
        .expect("lock the row");

    lease.operation_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let error = backend.extend(&lease).await.expect_err("the row is locked");
    assert!(error.is_transient(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // The connection that waits is not handed to the next statement.
    let started = Instant::now();
    assert!(
        try_once(&backend, &name(&unique("free")), Duration::from_secs(30))
            .await
            .expect("another name")
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    transaction.rollback().await.expect("rollback");
    lease.operation_timeout = Duration::from_secs(5);
    assert!(backend.extend(&lease).await.expect("extend once free"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contended_lease_mode_works_when_sessions_default_to_repeatable_read() {
    const BACKENDS: usize = 4;
    const ROUNDS: usize = 15;
    assert_sessions_repeatable_read(&with_options(&url(), REPEATABLE_READ)).await;

    let url = with_options(
        &url(),
        &format!("table={}&{REPEATABLE_READ}", unique("repeatable")),
    );
    let lock = name(&unique("contended"));
    let inside = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..BACKENDS {
        let backend = PostgresBackend::open(&url).await.expect("open");
        let client = LockClient::new(Arc::new(backend), options(Duration::from_secs(10)));
        for _ in 0..2 {
            let (client, lock, inside) = (client.clone(), lock.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = client
                        .acquire_with(&lock, Duration::from_secs(30))
                        .await
                        .expect("acquire");
                    assert!(!inside.swap(true, std::sync::atomic::Ordering::SeqCst));
                    tokio::task::yield_now().await;
                    inside.store(false, std::sync::atomic::Ordering::SeqCst);
                    assert!(guard.release().await.expect("release"));
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("a task");
    }
}

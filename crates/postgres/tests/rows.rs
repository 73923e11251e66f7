//! Rows of unused names are deleted, in both modes, against a real
//! server: 100,000 names used once leave only the rows of the names still
//! held; a name's tokens keep increasing across the deletion of its row;
//! a row whose token is ahead of the server's clock is kept, and so is a
//! row whose name an acquire is taking (lease mode's gate); and churn on
//! a few names from many tasks and backends, with sweeps running, never
//! grants a name twice at once nor a token out of order. `scripts/test`
//! starts the server and sets `DISTLOCK_TEST_POSTGRES_URL`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Backend, Lease};
use distlock_core::testing::try_grant;
use distlock_core::{AcquireOptions, Claim, Holder, LockClient, LockName, LockOptions};
use distlock_postgres::PostgresBackend;
use distlock_postgres::tokio_postgres::{self, NoTls, types::Type};
use tokio::task::JoinSet;

use support::{admin, name, open, unique, url};

/// How long any one wait may take; waits end far sooner.
const PATIENCE: Duration = Duration::from_secs(60);

/// The two modes, each on a fresh table (and, in advisory mode, a class
/// of its own), as URLs, with the table's name.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Lease,
    Advisory,
}

impl Mode {
    /// How many tasks take the bulk tests' names at once: as many as the
    /// backend's pool has connections, or, in advisory mode, as it keeps
    /// spare sessions (more would open and close one per grant).
    fn bulk_tasks(self) -> usize {
        match self {
            Self::Lease => 16,
            Self::Advisory => 8,
        }
    }

    fn url(self, table: &str) -> String {
        let options = match self {
            Self::Lease => format!("table={table}"),
            Self::Advisory => format!(
                "mode=advisory&table={table}&advisory_class={}",
                rand::random::<i32>() & 0x7fff_ffff
            ),
        };
        let base = url();
        let separator = if base.contains('?') { '&' } else { '?' };
        format!("{base}{separator}{options}")
    }
}

fn client(backend: Arc<PostgresBackend>) -> LockClient {
    let options = LockOptions::builder()
        .lease(Duration::from_secs(60))
        .backoff(Duration::from_millis(1), Duration::from_millis(20))
        .label("rows-tests")
        .build()
        .expect("valid options");
    LockClient::new(backend, options)
}

/// How many rows `table` has. The table's name is the test's own: lower
/// case letters, digits and underscores.
async fn rows_in(admin: &tokio_postgres::Client, table: &str) -> i64 {
    admin
        .query_one(&format!("SELECT count(*) FROM public.{table}"), &[])
        .await
        .expect("count the rows")
        .get(0)
}

/// Whether `table` has a row for `lock`.
async fn has_row(admin: &tokio_postgres::Client, table: &str, lock: &LockName) -> bool {
    let rows = admin
        .query_typed(
            &format!("SELECT 1 FROM public.{table} WHERE name = $1"),
            &[(&lock.as_str().as_bytes(), Type::BYTEA)],
        )
        .await
        .expect("look for the row");
    !rows.is_empty()
}

/// One attempt at `lock` through `backend` alone, which must be granted.
async fn grant(backend: &dyn Backend, lock: LockName) -> Lease {
    let holder = Holder::this_process(Some("rows-tests")).into();
    let request = AcquireRequest::new(lock, Claim::Exclusive, Duration::from_secs(60), holder);
    try_grant(backend, &request)
        .await
        .expect("try")
        .unwrap_or_else(|| panic!("{} is used once, and free", request.name))
}

/// How many distinct names the bulk tests use once each.
const NAMES: usize = 100_000;

/// How many names stay held through the bulk tests.
const KEPT: usize = 10;

async fn unused_rows_go(mode: Mode) {
    let table = unique("bulk");
    let backend = open(&mode.url(&table)).await;
    let locks = client(backend.clone());
    let admin = admin().await;

    let mut kept = Vec::new();
    for i in 0..KEPT {
        let guard = locks
            .try_acquire(format!("kept-{i}"))
            .await
            .expect("try")
            .expect("free");
        kept.push(guard);
    }

    // Through the backend alone: the client's keeper and guards would
    // only add work here, which is about rows.
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..mode.bulk_tasks() {
        let (backend, next) = (backend.clone(), next.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= NAMES {
                    return;
                }
                let lease = grant(&*backend, name(&format!("once-{i}"))).await;
                assert!(backend.release(&lease).await.expect("release"), "once-{i}");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("task");
    }

    let after_releases = rows_in(&admin, &table).await;
    let swept = backend.remove_idle_rows().await.expect("sweep");
    let after_sweep = rows_in(&admin, &table).await;
    eprintln!(
        "{mode:?}: {after_releases} rows after {NAMES} names were used once; \
         the sweep removed {swept}, leaving {after_sweep}"
    );
    assert_eq!(
        usize::try_from(after_sweep).expect("a count"),
        KEPT,
        "only the names still held keep rows"
    );
    for (i, guard) in kept.iter().enumerate() {
        assert!(has_row(&admin, &table, guard.name()).await, "kept-{i}");
    }
    for guard in kept {
        assert!(guard.release().await.expect("release"));
    }
    backend.remove_idle_rows().await.expect("sweep");
    assert_eq!(rows_in(&admin, &table).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_mode_keeps_rows_only_for_names_in_use() {
    unused_rows_go(Mode::Lease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn advisory_mode_keeps_rows_only_for_names_in_use() {
    unused_rows_go(Mode::Advisory).await;
}

async fn tokens_survive_the_row(mode: Mode) {
    let table = unique("floor");
    let locks = client(open(&mode.url(&table)).await);
    let admin = admin().await;
    let lock = name(&unique("reused"));

    let mut last = 0;
    for round in 0..5 {
        let guard = locks.acquire_with(&lock, PATIENCE).await.expect("acquire");
        assert!(guard.fencing_token() > last, "round {round}");
        last = guard.fencing_token();
        assert!(has_row(&admin, &table, &lock).await);
        assert!(guard.release().await.expect("release"));
        assert!(
            !has_row(&admin, &table, &lock).await,
            "round {round}: the release deletes the unused row"
        );
    }

    // A token ahead of the server's clock, as a name granted more than a
    // million times a second would have: the row must outlive its use
    // until the clock passes it, or the next row's clock token would be
    // lower.
    let guard = locks.acquire_with(&lock, PATIENCE).await.expect("acquire");
    let ahead: i64 = admin
        .query_one(
            &format!(
                "UPDATE public.{table} SET fencing_token = fencing_token + 3600000000
                 WHERE name = $1 RETURNING fencing_token"
            ),
            &[&lock.as_str().as_bytes()],
        )
        .await
        .expect("move the token ahead")
        .get(0);
    assert!(guard.release().await.expect("release"));
    assert!(has_row(&admin, &table, &lock).await, "kept by the release");
    assert_eq!(
        open(&mode.url(&table))
            .await
            .remove_idle_rows()
            .await
            .expect("sweep"),
        0
    );
    assert!(has_row(&admin, &table, &lock).await, "kept by the sweep");
    let next = locks.acquire_with(&lock, PATIENCE).await.expect("acquire");
    assert!(
        next.fencing_token() > u64::try_from(ahead).expect("a token"),
        "{} after {ahead}",
        next.fencing_token()
    );
    assert!(next.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_mode_tokens_increase_across_deleted_rows() {
    tokens_survive_the_row(Mode::Lease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn advisory_mode_tokens_increase_across_deleted_rows() {
    tokens_survive_the_row(Mode::Advisory).await;
}

async fn a_row_stays_while_any_reader_holds(mode: Mode) {
    let table = unique("readers");
    let url = mode.url(&table);
    let (first, second) = (client(open(&url).await), client(open(&url).await));
    let admin = admin().await;
    let lock = name(&unique("shared"));
    let shared = || AcquireOptions::new().shared().timeout(PATIENCE);

    let one = first.acquire_with(&lock, shared()).await.expect("first");
    let two = second.acquire_with(&lock, shared()).await.expect("second");
    assert!(one.release().await.expect("release"));
    assert!(
        has_row(&admin, &table, &lock).await,
        "the other reader still holds it"
    );
    assert!(two.release().await.expect("release"));
    assert!(
        !has_row(&admin, &table, &lock).await,
        "the last reader's release deletes it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_mode_keeps_a_row_while_any_reader_holds() {
    a_row_stays_while_any_reader_holds(Mode::Lease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn advisory_mode_keeps_a_row_while_any_reader_holds() {
    a_row_stays_while_any_reader_holds(Mode::Advisory).await;
}

/// A deletion never waits for, nor overtakes, an acquire of the name in
/// flight: while the name's gate is held shared (as each acquire holds it
/// from before it reads the clock to its commit), neither the release nor
/// a sweep deletes the row; once it is free, a sweep does. The gate's key
/// is the one the crate documents, spelled out here.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_mode_keeps_a_row_while_an_acquire_holds_its_gate() {
    let table = unique("gate");
    let backend = open(&Mode::Lease.url(&table)).await;
    let locks = client(backend.clone());
    let admin = admin().await;
    let (acquiring, connection) = tokio_postgres::connect(&url(), NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let lock = name(&unique("gated"));

    let guard = locks.acquire_with(&lock, PATIENCE).await.expect("acquire");
    acquiring.batch_execute("BEGIN").await.expect("begin");
    acquiring
        .query_typed(
            "SELECT pg_advisory_xact_lock_shared(
                 hashtextextended('distlock gate ' || encode($1, 'hex'), 0))",
            &[(&lock.as_str().as_bytes(), Type::BYTEA)],
        )
        .await
        .expect("take the gate");
    assert!(guard.release().await.expect("release"));
    assert!(has_row(&admin, &table, &lock).await, "kept by the release");
    assert_eq!(backend.remove_idle_rows().await.expect("sweep"), 0);
    assert!(has_row(&admin, &table, &lock).await, "kept by the sweep");

    acquiring.batch_execute("COMMIT").await.expect("commit");
    assert_eq!(backend.remove_idle_rows().await.expect("sweep"), 1);
    assert!(!has_row(&admin, &table, &lock).await);
}

/// One name's holders, as the churn tests see them.
#[derive(Default)]
struct Tally {
    /// How many hold the name now: never more than one.
    holding: AtomicU32,
    /// The latest token granted, set by the holder.
    last_token: std::sync::Mutex<u64>,
}

/// Backends, tasks per backend, names, and rounds per task of the churn
/// tests.
const BACKENDS: usize = 3;
const TASKS_PER_BACKEND: usize = 3;
const CHURNED: usize = 3;
const ROUNDS: usize = 150;

async fn churn_never_overlaps(mode: Mode) {
    let url = mode.url(&unique("churn"));
    let names: Arc<Vec<LockName>> =
        Arc::new((0..CHURNED).map(|_| name(&unique("churned"))).collect());
    let tallies: Arc<Vec<Tally>> = Arc::new((0..CHURNED).map(|_| Tally::default()).collect());
    let mut backends = Vec::new();
    for _ in 0..BACKENDS {
        backends.push(open(&url).await);
    }

    // Sweeps run throughout, on every backend.
    let stop = Arc::new(AtomicBool::new(false));
    let mut sweepers = JoinSet::new();
    for backend in &backends {
        let (backend, stop) = (backend.clone(), stop.clone());
        sweepers.spawn(async move {
            let mut removed = 0;
            while !stop.load(Ordering::Relaxed) {
                removed += backend.remove_idle_rows().await.expect("sweep");
                tokio::task::yield_now().await;
            }
            removed
        });
    }

    let mut tasks = JoinSet::new();
    for (b, backend) in backends.iter().enumerate() {
        let locks = client(backend.clone());
        for t in 0..TASKS_PER_BACKEND {
            let (locks, names, tallies) = (locks.clone(), names.clone(), tallies.clone());
            tasks.spawn(async move {
                for round in 0..ROUNDS {
                    let which = (b + t + round) % CHURNED;
                    let guard = locks
                        .acquire_with(&names[which], PATIENCE)
                        .await
                        .expect("acquire");
                    let tally = &tallies[which];
                    assert_eq!(
                        tally.holding.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders of one name"
                    );
                    {
                        let mut last = tally.last_token.lock().expect("not poisoned");
                        assert!(
                            guard.fencing_token() > *last,
                            "token {} after {}",
                            guard.fencing_token(),
                            *last
                        );
                        *last = guard.fencing_token();
                    }
                    tokio::task::yield_now().await;
                    tally.holding.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await.expect("release"));
                }
            });
        }
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a churning task");
    }
    stop.store(true, Ordering::Relaxed);
    let mut removed = 0;
    while let Some(done) = sweepers.join_next().await {
        removed += done.expect("a sweeper");
    }
    eprintln!("{mode:?}: the sweeps removed {removed} rows during the churn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_mode_churn_with_deletions_never_overlaps() {
    churn_never_overlaps(Mode::Lease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn advisory_mode_churn_with_deletions_never_overlaps() {
    churn_never_overlaps(Mode::Advisory).await;
}

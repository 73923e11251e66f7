//! Transaction locks against a real server, and through PgBouncer in
//! transaction mode: a commit and a rollback end them, a second
//! transaction waits in order, a wait that runs out leaves the transaction
//! usable, readers share, advisory mode's grants of the same name exclude
//! them both ways, tokens rise above every earlier grant in either mode,
//! and a dropped wait leaves nothing held. On tokio-postgres, and on sqlx
//! (the crate's `sqlx` feature, which the tests always build).
//! `scripts/test` starts the servers and sets `DISTLOCK_TEST_POSTGRES_URL`
//! and `DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::testing::ADMIN_LIMIT;
use distlock_core::{AcquireOptions, Error, LockClient, LockKind, LockOptions, TryOptions};
use distlock_postgres::tokio_postgres::{self, NoTls};
use distlock_postgres::xact::{XactGrant, XactKind, XactLocks, XactOptions};
use distlock_postgres::{PostgresBackend, sqlx};

use distlock_core::backend::Backend;
use support::{on_keys, open, pgbouncer_url, unique, url, with_options};

/// Long enough for any step of a test.
const PATIENCE: Duration = Duration::from_secs(30);

/// A wait that runs out while the lock is held: no test waits for it to
/// pass before acting, so its length decides nothing but the test's time.
const SHORT: Duration = Duration::from_millis(50);

/// A class of its own for one test, so that `pg_locks` shows only its
/// locks there.
fn fresh_class() -> i32 {
    rand::random::<i32>() & 0x7fff_ffff
}

/// Transaction locks and advisory mode of one test: the same table and
/// class, so that they share names' keys and tokens.
struct Setup {
    table: String,
    class: i32,
}

impl Setup {
    fn new() -> Self {
        Self {
            table: unique("xact"),
            class: fresh_class(),
        }
    }

    /// The options every URL of this setup carries.
    fn options(&self) -> String {
        format!("table={}&advisory_class={}", self.table, self.class)
    }

    /// Transaction locks through `base` (the server, or PgBouncer).
    async fn locks(&self, base: &str) -> XactLocks {
        XactLocks::open(&with_options(base, &self.options()))
            .await
            .expect("open transaction locks")
    }

    /// An advisory-mode client of the same table and class, on the server
    /// itself (advisory mode refuses PgBouncer in transaction mode).
    async fn advisory(&self) -> (LockClient, Arc<PostgresBackend>) {
        let url = with_options(&url(), &format!("mode=advisory&{}", self.options()));
        let backend = open(&url).await;
        let options = LockOptions::builder()
            .lease(PATIENCE)
            .extend_every(PATIENCE / 4)
            .safety_margin(PATIENCE / 10)
            .operation_timeout(PATIENCE / 3)
            .backoff(Duration::from_millis(5), Duration::from_millis(50))
            .label("xact-tests")
            .build()
            .expect("valid options");
        (LockClient::new(backend.clone(), options), backend)
    }
}

/// A plain tokio-postgres connection to `url`, as an application has.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// The server process that runs `client`'s statements (through PgBouncer,
/// within one transaction only).
async fn pid_of(client: &tokio_postgres::Transaction<'_>) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0)
}

/// Waits until the server shows process `pid` waiting for a key of
/// `class`, or panics after [`PATIENCE`].
async fn until_waiting(admin: &tokio_postgres::Client, class: i32, pid: i32) {
    until(admin, class, pid, true).await;
}

/// Waits until the server shows process `pid` waiting (`true`) or not
/// waiting (`false`) for a key of `class`, or panics after [`PATIENCE`].
async fn until(admin: &tokio_postgres::Client, class: i32, pid: i32, waiting: bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while on_keys(admin, class, false).await.contains(&pid) != waiting {
        assert!(
            tokio::time::Instant::now() < deadline,
            "process {pid} did not {} waiting within {PATIENCE:?}",
            if waiting { "start" } else { "stop" }
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The server processes holding names' keys of `class`: [`on_keys`]
/// without the negative keys, one of which the pool's check for a
/// transaction pooler may leave held on a PgBouncer server connection.
async fn holding_names(admin: &tokio_postgres::Client, class: i32) -> Vec<i32> {
    support::first_column(
        admin,
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
           AND classid = $1::oid AND granted AND objid::bigint % 2 = 0
           AND objid::bigint <= 2147483647",
        &[(&class, tokio_postgres::types::Type::INT4)],
        "read pg_locks",
    )
    .await
}

/// Whether another transaction can take `lock` as `kind` now, through
/// `locks` on `client`: it tries once, and rolls back.
async fn free_for(
    locks: &XactLocks,
    client: &mut tokio_postgres::Client,
    lock: &str,
    kind: XactKind,
) -> bool {
    let tx = client.transaction().await.expect("BEGIN");
    let got = locks.try_lock(&tx, lock, kind).await.expect("try");
    tx.rollback().await.expect("ROLLBACK");
    got.is_some()
}

fn is_timeout(error: &Error, lock: &str, waited: Duration) -> bool {
    matches!(error, Error::Timeout { name, waited: w, .. } if name == lock && *w == waited)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_and_a_rollback_each_end_the_lock() {
    let setup = Setup::new();
    let locks = setup.locks(&url()).await;
    let mut holder = connect(&url()).await;
    let mut other = connect(&url()).await;
    let lock = unique("ends");

    for commit in [true, false] {
        let tx = holder.transaction().await.expect("BEGIN");
        let grant = locks
            .lock(&tx, lock.as_str(), XactOptions::new())
            .await
            .expect("lock");
        assert_eq!(grant.name().as_str(), lock);
        assert_eq!(grant.kind(), XactKind::Exclusive);
        assert!(!free_for(&locks, &mut other, &lock, XactKind::Exclusive).await);
        assert!(!free_for(&locks, &mut other, &lock, XactKind::Shared).await);
        // Re-entrant within its transaction, as PostgreSQL's locks are.
        locks
            .try_lock(&tx, lock.as_str(), XactKind::Exclusive)
            .await
            .expect("try")
            .expect("its own transaction takes it again");
        if commit {
            tx.commit().await.expect("COMMIT");
        } else {
            tx.rollback().await.expect("ROLLBACK");
        }
        assert!(
            free_for(&locks, &mut other, &lock, XactKind::Exclusive).await,
            "free after the {}",
            if commit { "commit" } else { "rollback" }
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_transaction_waits_until_the_first_commits() {
    let setup = Setup::new();
    let locks = Arc::new(setup.locks(&url()).await);
    let admin = connect(&url()).await;
    let mut first = connect(&url()).await;
    let lock = unique("waits");

    let tx = first.transaction().await.expect("BEGIN");
    let held = locks
        .lock(&tx, lock.as_str(), XactOptions::new())
        .await
        .expect("lock");
    let (pid_sender, pid) = tokio::sync::oneshot::channel();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        let lock = lock.clone();
        async move {
            let mut second = connect(&url()).await;
            let tx = second.transaction().await.expect("BEGIN");
            // Held: a bounded wait runs out first, and the transaction goes on.
            let error = locks
                .lock(&tx, lock.as_str(), SHORT)
                .await
                .expect_err("held by the first transaction");
            assert!(is_timeout(&error, &lock, SHORT), "{error}");
            // Only now: the wait the test sees next is the one below.
            pid_sender
                .send(pid_of(&tx).await)
                .expect("the test listens");
            let grant = locks
                .lock(&tx, lock.as_str(), PATIENCE)
                .await
                .expect("granted once the first commits");
            tx.commit().await.expect("COMMIT");
            grant
        }
    });
    // The second waits in the server's queue, and goes on waiting while
    // the first holds.
    until_waiting(&admin, setup.class, pid.await.expect("the waiter's pid")).await;
    assert!(!waiter.is_finished());
    tx.commit().await.expect("COMMIT");
    let second: XactGrant = waiter.await.expect("the waiter");
    assert!(second.fencing_token() > held.fencing_token());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_leaves_the_transaction_usable_and_its_lock_timeout_alone() {
    let setup = Setup::new();
    let locks = setup.locks(&url()).await;
    let mut holder = connect(&url()).await;
    let mut waiter = connect(&url()).await;
    let lock = unique("timeout");
    let admin = connect(&url()).await;

    let held = holder.transaction().await.expect("BEGIN");
    locks
        .lock(&held, lock.as_str(), XactOptions::new())
        .await
        .expect("lock");

    let tx = waiter.transaction().await.expect("BEGIN");
    tx.batch_execute("SET LOCAL lock_timeout = '3s'; CREATE TEMP TABLE work (n int) ON COMMIT DROP; INSERT INTO work VALUES (1)")
        .await
        .expect("the caller's own work");
    let pid = pid_of(&tx).await;
    for wait in [SHORT, Duration::ZERO] {
        let error = locks
            .lock(&tx, lock.as_str(), wait)
            .await
            .expect_err("held");
        assert!(is_timeout(&error, &lock, wait), "{error}");
    }
    assert!(
        locks
            .try_lock(&tx, lock.as_str(), XactKind::Shared)
            .await
            .expect("try")
            .is_none()
    );
    // Usable: the caller's work is there, and its setting as it set it.
    let work: i64 = tx
        .query_one("SELECT count(*) FROM work", &[])
        .await
        .expect("the transaction is usable")
        .get(0);
    assert_eq!(work, 1);
    let setting: String = tx
        .query_one("SHOW lock_timeout", &[])
        .await
        .expect("show")
        .get(0);
    assert_eq!(setting, "3s");
    assert!(!on_keys(&admin, setup.class, true).await.contains(&pid));
    assert!(!on_keys(&admin, setup.class, false).await.contains(&pid));

    held.commit().await.expect("COMMIT");
    locks
        .lock(&tx, lock.as_str(), SHORT)
        .await
        .expect("free now");
    let setting: String = tx
        .query_one("SHOW lock_timeout", &[])
        .await
        .expect("show")
        .get(0);
    assert_eq!(setting, "3s", "a granted wait puts the caller's value back");
    tx.execute("INSERT INTO work VALUES (2)", &[])
        .await
        .expect("still usable");
    tx.commit().await.expect("COMMIT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes_them() {
    let setup = Setup::new();
    let locks = setup.locks(&url()).await;
    let mut a = connect(&url()).await;
    let mut b = connect(&url()).await;
    let mut c = connect(&url()).await;
    let lock = unique("readers");

    let first = a.transaction().await.expect("BEGIN");
    let second = b.transaction().await.expect("BEGIN");
    let one = locks
        .lock(
            &first,
            lock.as_str(),
            XactOptions::new().shared().wait(SHORT),
        )
        .await
        .expect("a reader");
    // Both readers at once, each with a token of its own, while the first
    // transaction is open: the raise holds no row of the name.
    let two = locks
        .lock(
            &second,
            lock.as_str(),
            XactOptions::new().shared().wait(SHORT),
        )
        .await
        .expect("readers share");
    assert_eq!(two.kind(), XactKind::Shared);
    assert!(two.fencing_token() > one.fencing_token());
    assert!(!free_for(&locks, &mut c, &lock, XactKind::Exclusive).await);
    first.commit().await.expect("COMMIT");
    assert!(!free_for(&locks, &mut c, &lock, XactKind::Exclusive).await);
    second.commit().await.expect("COMMIT");

    let writer = a.transaction().await.expect("BEGIN");
    locks
        .lock(&writer, lock.as_str(), XactOptions::new())
        .await
        .expect("a writer");
    assert!(!free_for(&locks, &mut c, &lock, XactKind::Shared).await);
    writer.rollback().await.expect("ROLLBACK");
    assert!(free_for(&locks, &mut c, &lock, XactKind::Shared).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_locks_and_advisory_mode_exclude_each_other_both_ways() {
    let setup = Setup::new();
    let locks = setup.locks(&url()).await;
    let (advisory, _backend) = setup.advisory().await;
    let mut client = connect(&url()).await;
    let lock = unique("both");

    // A transaction's writer keeps advisory mode's writers and readers out.
    let tx = client.transaction().await.expect("BEGIN");
    locks
        .lock(&tx, lock.as_str(), XactOptions::new())
        .await
        .expect("lock");
    assert!(advisory.try_acquire(&lock).await.expect("try").is_none());
    assert!(
        advisory
            .try_acquire_with(&lock, TryOptions::new().shared())
            .await
            .expect("try")
            .is_none()
    );
    tx.commit().await.expect("COMMIT");
    let guard = advisory
        .try_acquire(&lock)
        .await
        .expect("try")
        .expect("free once committed");

    // Advisory mode's writer keeps a transaction's writer and reader out.
    assert!(!free_for(&locks, &mut client, &lock, XactKind::Exclusive).await);
    assert!(!free_for(&locks, &mut client, &lock, XactKind::Shared).await);
    assert!(guard.release().await.expect("release"));
    assert!(free_for(&locks, &mut client, &lock, XactKind::Exclusive).await);

    // Readers of both share; a writer of either is kept out.
    let reader = advisory
        .acquire_with(&lock, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .expect("advisory reader");
    let tx = client.transaction().await.expect("BEGIN");
    locks
        .lock(&tx, lock.as_str(), XactOptions::new().shared().wait(SHORT))
        .await
        .expect("a transaction's reader beside advisory mode's");
    assert!(advisory.try_acquire(&lock).await.expect("try").is_none());
    assert!(reader.release().await.expect("release"));
    assert!(advisory.try_acquire(&lock).await.expect("try").is_none());
    tx.commit().await.expect("COMMIT");
    let mut other = connect(&url()).await;
    let reader = advisory
        .acquire_with(&lock, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .expect("advisory reader");
    assert!(!free_for(&locks, &mut other, &lock, XactKind::Exclusive).await);
    assert!(reader.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactions_waiting_writer_keeps_new_advisory_readers_out() {
    let setup = Setup::new();
    let locks = Arc::new(setup.locks(&url()).await);
    let (advisory, _backend) = setup.advisory().await;
    let admin = connect(&url()).await;
    let lock = unique("queue");

    let reader = advisory
        .acquire_with(&lock, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .expect("advisory reader");
    let (pid_sender, pid) = tokio::sync::oneshot::channel();
    let writer = tokio::spawn({
        let locks = locks.clone();
        let lock = lock.clone();
        async move {
            let mut client = connect(&url()).await;
            let tx = client.transaction().await.expect("BEGIN");
            pid_sender
                .send(pid_of(&tx).await)
                .expect("the test listens");
            let grant = locks.lock(&tx, lock.as_str(), PATIENCE).await;
            tx.commit().await.expect("COMMIT");
            grant
        }
    });
    until_waiting(&admin, setup.class, pid.await.expect("pid")).await;
    // In the server's queue, the writer comes before any new reader.
    assert!(
        advisory
            .try_acquire_with(&lock, TryOptions::new().shared())
            .await
            .expect("try")
            .is_none()
    );
    assert!(reader.release().await.expect("release"));
    let grant = writer.await.expect("the writer").expect("granted");
    assert!(grant.fencing_token() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_above_every_earlier_grant_in_either_mode_and_never_repeat() {
    let setup = Setup::new();
    let locks = setup.locks(&url()).await;
    let (advisory, _backend) = setup.advisory().await;
    let mut client = connect(&url()).await;
    let lock = unique("tokens");

    let mut last = 0;
    for shared in [false, true] {
        let options = if shared {
            AcquireOptions::new().shared().timeout(PATIENCE)
        } else {
            AcquireOptions::new().timeout(PATIENCE)
        };
        let guard = advisory.acquire_with(&lock, options).await.expect("grant");
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        assert!(guard.release().await.expect("release"));
    }
    for (round, commit) in [true, false, false, true, false].into_iter().enumerate() {
        let tx = client.transaction().await.expect("BEGIN");
        let options = if round % 2 == 0 {
            XactOptions::new()
        } else {
            XactOptions::new().shared()
        };
        let grant = locks.lock(&tx, lock.as_str(), options).await.expect("lock");
        // Above every earlier grant, the rolled-back ones' included: a
        // rollback never hands a token out again.
        assert!(grant.fencing_token() > last, "round {round}");
        last = grant.fencing_token();
        if commit {
            tx.commit().await.expect("COMMIT");
        } else {
            tx.rollback().await.expect("ROLLBACK");
        }
    }
    let guard = advisory
        .acquire_with(&lock, PATIENCE)
        .await
        .expect("advisory grant");
    assert!(guard.fencing_token() > last);
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_grants_token_is_never_given_again_even_ahead_of_the_clock() {
    let setup = Setup::new();
    let locks = setup.locks(&url()).await;
    let admin = connect(&url()).await;
    let mut client = connect(&url()).await;
    let lock = unique("ahead");

    let tx = client.transaction().await.expect("BEGIN");
    locks
        .lock(&tx, lock.as_str(), XactOptions::new())
        .await
        .expect("lock");
    tx.commit().await.expect("COMMIT");
    // The name's counter some 11 days ahead of the server's clock, as
    // after the clock was set back: the next tokens are previous + 1,
    // which the clock no longer lifts.
    let ahead: i64 = admin
        .query_one(
            &format!(
                "UPDATE public.\"{}\" SET fencing_token = fencing_token + 1000000000000
                 WHERE name = $1 RETURNING fencing_token",
                setup.table
            ),
            &[&lock.as_bytes()],
        )
        .await
        .expect("the name's row")
        .get(0);
    let mut last = u64::try_from(ahead).expect("a token");
    for commit in [false, false, true] {
        let tx = client.transaction().await.expect("BEGIN");
        let grant = locks
            .lock(&tx, lock.as_str(), XactOptions::new())
            .await
            .expect("lock");
        // A rolled-back transaction's token stays given: the next grant's
        // is above it, so no stale holder shares a token with a new one.
        assert!(
            grant.fencing_token() > last,
            "{} after {last}",
            grant.fencing_token()
        );
        last = grant.fencing_token();
        if commit {
            tx.commit().await.expect("COMMIT");
        } else {
            tx.rollback().await.expect("ROLLBACK");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_modes_list_shows_a_transactions_lock_with_its_token() {
    let setup = Setup::new();
    let locks = setup.locks(&url()).await;
    let (_advisory, backend) = setup.advisory().await;
    let mut client = connect(&url()).await;
    let lock = unique("listed");

    let tx = client.transaction().await.expect("BEGIN");
    let grant = locks
        .lock(&tx, lock.as_str(), XactOptions::new())
        .await
        .expect("lock");
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    let info = listed
        .iter()
        .find(|info| info.name.as_str() == lock)
        .unwrap_or_else(|| panic!("{lock} missing from {listed:?}"));
    assert_eq!(info.kind, LockKind::Exclusive);
    assert_eq!(info.fencing_token, Some(grant.fencing_token()));
    assert_eq!(
        info.holder.as_ref().map(|holder| holder.pid),
        Some(std::process::id())
    );
    tx.commit().await.expect("COMMIT");
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    assert!(listed.iter().all(|info| info.name.as_str() != lock));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_in_transaction_mode_nothing_outlives_the_transaction() {
    let setup = Setup::new();
    let locks = setup.locks(&pgbouncer_url()).await;
    let (advisory, _backend) = setup.advisory().await;
    let admin = connect(&url()).await;
    let mut a = connect(&pgbouncer_url()).await;
    let mut b = connect(&pgbouncer_url()).await;
    let lock = unique("bouncer");

    let mut last = 0;
    for round in 0..3 {
        let tx = a.transaction().await.expect("BEGIN");
        let grant = locks
            .lock(&tx, lock.as_str(), XactOptions::new().wait(PATIENCE))
            .await
            .expect("lock");
        assert!(grant.fencing_token() > last, "round {round}");
        last = grant.fencing_token();
        assert!(advisory.try_acquire(&lock).await.expect("try").is_none());
        let other = b.transaction().await.expect("BEGIN");
        let error = locks
            .lock(&other, lock.as_str(), SHORT)
            .await
            .expect_err("held");
        assert!(is_timeout(&error, &lock, SHORT), "{error}");
        let one: i32 = other
            .query_one("SELECT 1", &[])
            .await
            .expect("usable after the timeout")
            .get(0);
        assert_eq!(one, 1);
        other.commit().await.expect("COMMIT");
        if round % 2 == 0 {
            tx.commit().await.expect("COMMIT");
        } else {
            tx.rollback().await.expect("ROLLBACK");
        }
        // Nothing held on any of PgBouncer's server connections.
        assert_eq!(holding_names(&admin, setup.class).await, Vec::<i32>::new());
        assert!(free_for(&locks, &mut b, &lock, XactKind::Exclusive).await);
    }
    let guard = advisory
        .acquire_with(&lock, PATIENCE)
        .await
        .expect("advisory grant");
    assert!(guard.fencing_token() > last);
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_is_cancelled_and_its_rollback_leaves_nothing_held() {
    let setup = Setup::new();
    let locks = setup.locks(&url()).await;
    let admin = connect(&url()).await;
    let mut holder = connect(&url()).await;
    let mut waiter = connect(&url()).await;
    let mut other = connect(&url()).await;
    let lock = unique("dropped");

    let held = holder.transaction().await.expect("BEGIN");
    locks
        .lock(&held, lock.as_str(), XactOptions::new())
        .await
        .expect("lock");

    let tx = waiter.transaction().await.expect("BEGIN");
    let pid = pid_of(&tx).await;
    {
        // No bound: only the cancellation ends this wait before the holder
        // commits.
        let wait = locks.lock(&tx, lock.as_str(), XactOptions::new());
        tokio::pin!(wait);
        tokio::select! {
            granted = &mut wait => panic!("granted while held: {granted:?}"),
            () = until_waiting(&admin, setup.class, pid) => {}
        }
    }
    drop(tx);
    // The wait is cancelled while the holder still holds.
    until(&admin, setup.class, pid, false).await;
    // The connection stays usable, out of the rolled-back transaction,
    // holding nothing.
    let held_there: i64 = waiter
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'",
            &[],
        )
        .await
        .expect("the connection is usable")
        .get(0);
    assert_eq!(held_there, 0);
    assert!(!free_for(&locks, &mut other, &lock, XactKind::Exclusive).await);
    held.commit().await.expect("COMMIT");
    assert!(free_for(&locks, &mut other, &lock, XactKind::Exclusive).await);
    assert!(free_for(&locks, &mut waiter, &lock, XactKind::Exclusive).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_transaction_and_a_lease_mode_url_are_refused_by_name() {
    let setup = Setup::new();
    let locks = setup.locks(&url()).await;
    let mut client = connect(&url()).await;
    let tx = client.transaction().await.expect("BEGIN");
    tx.batch_execute("SELECT 1 / 0").await.expect_err("fails");
    let error = locks
        .lock(&tx, unique("aborted").as_str(), SHORT)
        .await
        .expect_err("an aborted transaction");
    assert!(
        matches!(&error, Error::InvalidConfig { field, reason }
            if field == "transaction" && reason.contains("aborted")),
        "{error}"
    );
    tx.rollback().await.expect("ROLLBACK");

    let error = XactLocks::open(&with_options(&url(), "mode=lease"))
        .await
        .expect_err("lease mode");
    assert!(
        matches!(&error, Error::InvalidConfig { field, .. } if field == "mode"),
        "{error}"
    );
    let error = locks
        .lock(
            &client.transaction().await.expect("BEGIN"),
            unique("long").as_str(),
            Duration::from_secs(30 * 86_400),
        )
        .await
        .expect_err("too long a wait");
    assert!(
        matches!(&error, Error::InvalidConfig { field, .. } if field == "wait"),
        "{error}"
    );
}

/// The same, on sqlx's connections and transactions.
mod on_sqlx {
    use sqlx::{Connection, PgConnection};

    use super::*;

    async fn connect(url: &str) -> PgConnection {
        PgConnection::connect(url).await.expect("connect")
    }

    async fn pid_of(connection: &mut PgConnection) -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(connection)
            .await
            .expect("pid")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_and_a_rollback_end_the_lock_and_tokio_postgres_sees_it() {
        let setup = Setup::new();
        let locks = setup.locks(&url()).await;
        let mut connection = connect(&url()).await;
        let mut other = super::connect(&url()).await;
        let lock = unique("sqlx");

        let mut last = 0;
        for commit in [true, false] {
            let mut tx = connection.begin().await.expect("BEGIN");
            let grant = locks
                .lock(&mut tx, lock.as_str(), XactOptions::new())
                .await
                .expect("lock");
            assert!(grant.fencing_token() > last);
            last = grant.fencing_token();
            assert!(!free_for(&locks, &mut other, &lock, XactKind::Shared).await);
            if commit {
                tx.commit().await.expect("COMMIT");
            } else {
                tx.rollback().await.expect("ROLLBACK");
            }
            assert!(free_for(&locks, &mut other, &lock, XactKind::Exclusive).await);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_that_runs_out_leaves_the_transaction_usable() {
        let setup = Setup::new();
        let locks = setup.locks(&url()).await;
        let mut holder = super::connect(&url()).await;
        let mut connection = connect(&url()).await;
        let lock = unique("sqlx-timeout");

        let held = holder.transaction().await.expect("BEGIN");
        locks
            .lock(&held, lock.as_str(), XactOptions::new())
            .await
            .expect("lock");
        let mut tx = connection.begin().await.expect("BEGIN");
        sqlx::query("SET LOCAL lock_timeout = '4s'")
            .execute(&mut *tx)
            .await
            .expect("set");
        let error = locks
            .lock(
                &mut *tx,
                lock.as_str(),
                XactOptions::new().shared().wait(SHORT),
            )
            .await
            .expect_err("held");
        assert!(is_timeout(&error, &lock, SHORT), "{error}");
        let setting: String = sqlx::query_scalar("SHOW lock_timeout")
            .fetch_one(&mut *tx)
            .await
            .expect("usable");
        assert_eq!(setting, "4s");
        held.commit().await.expect("COMMIT");
        locks
            .lock(&mut tx, lock.as_str(), SHORT)
            .await
            .expect("free now");
        let setting: String = sqlx::query_scalar("SHOW lock_timeout")
            .fetch_one(&mut *tx)
            .await
            .expect("usable");
        assert_eq!(setting, "4s", "a granted wait puts the caller's value back");
        tx.commit().await.expect("COMMIT");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_outside_a_transaction_is_refused_by_name() {
        let setup = Setup::new();
        let locks = setup.locks(&url()).await;
        let mut connection = connect(&url()).await;
        let error = locks
            .lock(&mut connection, unique("outside").as_str(), SHORT)
            .await
            .expect_err("no transaction");
        assert!(
            matches!(&error, Error::InvalidConfig { field, reason }
                if field == "transaction" && reason.contains("not in a transaction")),
            "{error}"
        );
        // And the connection is fine.
        assert!(pid_of(&mut connection).await > 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_wait_is_cancelled_and_its_rollback_leaves_nothing_held() {
        let setup = Setup::new();
        let locks = setup.locks(&url()).await;
        let admin = super::connect(&url()).await;
        let mut holder = super::connect(&url()).await;
        let mut other = super::connect(&url()).await;
        let mut connection = connect(&url()).await;
        let lock = unique("sqlx-dropped");

        let held = holder.transaction().await.expect("BEGIN");
        locks
            .lock(&held, lock.as_str(), XactOptions::new())
            .await
            .expect("lock");
        let pid = pid_of(&mut connection).await;
        let mut tx = connection.begin().await.expect("BEGIN");
        {
            let wait = locks.lock(&mut tx, lock.as_str(), XactOptions::new());
            tokio::pin!(wait);
            tokio::select! {
                granted = &mut wait => panic!("granted while held: {granted:?}"),
                () = until_waiting(&admin, setup.class, pid) => {}
            }
        }
        drop(tx);
        until(&admin, setup.class, pid, false).await;
        // sqlx reads the dropped statement's answer and the rollback's
        // before the next statement's, which the cancellation lets through
        // at once; the first statement after may fail with the cancelled
        // statement's error (57014), as sqlx reports it.
        let count =
            "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'";
        let first: Result<i64, sqlx::Error> =
            sqlx::query_scalar(count).fetch_one(&mut connection).await;
        if let Err(error) = &first {
            let code = error.as_database_error().and_then(|db| db.code());
            assert_eq!(code.as_deref(), Some("57014"), "{error}");
        }
        let held_there: i64 = sqlx::query_scalar(count)
            .fetch_one(&mut connection)
            .await
            .expect("the connection is usable");
        assert_eq!(held_there, 0);
        assert!(!free_for(&locks, &mut other, &lock, XactKind::Exclusive).await);
        held.commit().await.expect("COMMIT");
        assert!(free_for(&locks, &mut other, &lock, XactKind::Exclusive).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn through_pgbouncer_in_transaction_mode() {
        let setup = Setup::new();
        let locks = setup.locks(&pgbouncer_url()).await;
        let admin = super::connect(&url()).await;
        let mut a = connect(&pgbouncer_url()).await;
        let mut b = connect(&pgbouncer_url()).await;
        let lock = unique("sqlx-bouncer");

        for round in 0..3 {
            let mut tx = a.begin().await.expect("BEGIN");
            locks
                .lock(&mut tx, lock.as_str(), PATIENCE)
                .await
                .expect("lock");
            let mut other = b.begin().await.expect("BEGIN");
            assert!(
                locks
                    .try_lock(&mut other, lock.as_str(), XactKind::Shared)
                    .await
                    .expect("try")
                    .is_none(),
                "round {round}"
            );
            other.commit().await.expect("COMMIT");
            tx.commit().await.expect("COMMIT");
            assert_eq!(holding_names(&admin, setup.class).await, Vec::<i32>::new());
        }
    }
}

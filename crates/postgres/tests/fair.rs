//! Lease mode's fair mode against a real server: waiters of several
//! backends (each its own connections, as separate processes have) are
//! served in the order they asked, within a client too; a try never jumps
//! the line; a release grants the first place in its own statement, with
//! a greater token; a cancelled waiter leaves at once; a waiter that died
//! holds the line up only until its place or its grant runs out.
//! `scripts/test` starts the server and sets `DISTLOCK_TEST_POSTGRES_URL`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend, Lease, WaitState};
use distlock_core::testing::{acquire_until_cancelled, waiting_request};
use distlock_core::{AcquireOptions, Claim, Error, Holder, LockClient, LockName, LockOptions};
use distlock_postgres::PostgresBackend;
use distlock_postgres::tokio_postgres::{self, types::Type};

use support::{admin, name, url};

/// How long any one wait may take; waits end far sooner.
const PATIENCE: Duration = Duration::from_secs(60);

/// A fresh table of the test's own: lower case letters, digits and `_`.
fn unique_table() -> String {
    format!("fair_{:016x}", rand::random::<u64>())
}

fn fair_url(table: &str) -> String {
    let server = url();
    let separator = if server.contains('?') { '&' } else { '?' };
    format!("{server}{separator}table={table}&fair=true")
}

async fn open(table: &str) -> Arc<PostgresBackend> {
    Arc::new(
        PostgresBackend::open(&fair_url(table))
            .await
            .expect("open the fair backend"),
    )
}

fn client(backend: &Arc<PostgresBackend>, label: &str) -> LockClient {
    let lease = Duration::from_secs(10);
    let options = LockOptions::builder()
        .lease(lease)
        .extend_every(lease / 4)
        .safety_margin(lease / 10)
        .operation_timeout(Duration::from_secs(3))
        .label(label)
        .build()
        .expect("valid options");
    let shared: Arc<dyn Backend> = backend.clone();
    LockClient::new(shared, options)
}

/// The live places in `name`'s line, by the server's clock.
async fn queued(admin: &tokio_postgres::Client, table: &str, name: &LockName) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM {table} AS t, jsonb_array_elements(t.waiting) AS e
         WHERE t.name = $1 AND e ? 'lease'
           AND (e ->> 'exp')::bigint > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
    );
    let bytes = name.as_str().as_bytes();
    admin
        .query_typed(&sql, &[(&bytes, Type::BYTEA)])
        .await
        .expect("count the places")
        .first()
        .map_or(0, |row| row.get(0))
}

/// Waits until `name` has `n` live places in line.
async fn until_queued(admin: &tokio_postgres::Client, table: &str, name: &LockName, n: i64) {
    tokio::time::timeout(PATIENCE, async {
        while queued(admin, table, name).await != n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{name} never had {n} places in line"));
}

/// The live holders of `name`: each one's token and label.
async fn holders(
    admin: &tokio_postgres::Client,
    table: &str,
    name: &LockName,
) -> Vec<(i64, Option<String>)> {
    let sql = format!(
        "SELECT (h ->> 'token')::bigint, h -> 'holder' ->> 'label'
         FROM {table} AS t, jsonb_array_elements(t.holders) AS h
         WHERE t.name = $1
           AND (h ->> 'exp')::bigint > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
    );
    let bytes = name.as_str().as_bytes();
    admin
        .query_typed(&sql, &[(&bytes, Type::BYTEA)])
        .await
        .expect("read the holders")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// A grant of `lock`, which nobody holds or waits for, to a holder
/// labelled "holder", as the lease it holds.
async fn granted(backend: &PostgresBackend, lock: &LockName, lease: Duration) -> Lease {
    let holder = AcquireRequest::new(
        lock.clone(),
        Claim::Exclusive,
        lease,
        Arc::new(Holder::this_process(Some("holder"))),
    );
    let Attempt::Acquired {
        fencing_token,
        state,
    } = backend
        .try_acquire(&holder, &mut WaitState::new())
        .await
        .unwrap()
    else {
        panic!("the name was free");
    };
    holder.granted(fencing_token, state)
}

/// The next attempt of the wait `request` was the last of.
fn next_attempt(request: &AcquireRequest) -> AcquireRequest {
    AcquireRequest {
        lease_id: distlock_core::backend::LeaseId::random(),
        ..request.clone()
    }
}

/// A watch on `name`'s releases, as core holds one while a task waits:
/// the backend's listening connection then listens for them.
async fn watching(
    backend: &PostgresBackend,
    name: &LockName,
) -> distlock_core::backend::ReleaseWatch {
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(watch) = backend.wakeups().and_then(|wakeups| wakeups.watch(name)) {
                return watch;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("release wake-ups never came on")
}

/// The attempts of the wait `request` was the last of, as core makes them
/// once the release's notification reaches it (a waiter not called by it
/// answers without the store until its place is due), until one is
/// granted: its token.
async fn taken_over(
    backend: &PostgresBackend,
    request: &AcquireRequest,
    wait: &mut WaitState,
) -> (AcquireRequest, u64) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let attempt = next_attempt(request);
            match backend.try_acquire(&attempt, wait).await.unwrap() {
                Attempt::Acquired { fencing_token, .. } => return (attempt, fencing_token),
                Attempt::Held { .. } => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    })
    .await
    .expect("the grant made to the place was never taken over")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_of_several_backends_are_served_in_the_order_they_asked() {
    const WAITERS: usize = 6;
    let table = unique_table();
    let admin = admin().await;
    let lock = name("fifo");
    let mut clients = Vec::new();
    for index in 0..3 {
        clients.push(client(&open(&table).await, &format!("client-{index}")));
    }
    let held = clients[0].acquire(&lock).await.expect("the first grant");
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for index in 0..WAITERS {
        // Two tasks of each backend, interleaved: the holder's too.
        let client = clients[index % 3].clone();
        let (task_lock, served) = (lock.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client
                .acquire_with(&task_lock, PATIENCE)
                .await
                .expect("served");
            served.lock().unwrap().push((index, guard.fencing_token()));
            guard.release().await.expect("release");
        }));
        until_queued(&admin, &table, &lock, i64::try_from(index).unwrap() + 1).await;
    }
    let first_token = held.fencing_token();
    assert!(held.release().await.expect("release"));
    for task in tasks {
        task.await.expect("the waiter's task");
    }
    let served = served.lock().unwrap().clone();
    let order: Vec<usize> = served.iter().map(|(index, _)| *index).collect();
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "{served:?}");
    let tokens: Vec<u64> = std::iter::once(first_token)
        .chain(served.iter().map(|(_, token)| *token))
        .collect();
    assert!(tokens.is_sorted_by(|a, b| a < b), "{tokens:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_grants_the_first_place_in_its_own_statement() {
    let table = unique_table();
    let admin = admin().await;
    let backend = open(&table).await;
    let lock = name("passed");
    let _watch = watching(&backend, &lock).await;
    let lease = Duration::from_secs(30);
    let held = granted(&backend, &lock, lease).await;
    let first = held.fencing_token;

    let waiter = waiting_request(&lock, lease, "waiter");
    let mut wait = WaitState::new();
    let attempt = backend.try_acquire(&waiter, &mut wait).await.unwrap();
    assert!(matches!(attempt, Attempt::Held { .. }), "{attempt:?}");
    assert_eq!(queued(&admin, &table, &lock).await, 1);
    assert_eq!(backend.queued(&lock).await.unwrap(), 1);

    assert!(backend.release(&held).await.unwrap());
    // Right after the release, before the waiter asks again: the lock is
    // the waiter's place's, with a greater token, and the line is empty.
    let after = holders(&admin, &table, &lock).await;
    assert_eq!(after.len(), 1, "{after:?}");
    let (passed_token, label) = after[0].clone();
    assert_eq!(label.as_deref(), Some("waiter"));
    assert!(u64::try_from(passed_token).unwrap() > first);
    assert_eq!(queued(&admin, &table, &lock).await, 0);
    // A try of another never takes it.
    let other = AcquireRequest::new(
        lock.clone(),
        Claim::Exclusive,
        lease,
        Arc::new(Holder::this_process(Some("other"))),
    );
    let tried = backend
        .try_acquire(&other, &mut WaitState::new())
        .await
        .unwrap();
    assert!(matches!(tried, Attempt::Held { .. }), "{tried:?}");

    // The waiter's next attempts take the grant over, at its token.
    let (taking, fencing_token) = taken_over(&backend, &waiter, &mut wait).await;
    assert_eq!(fencing_token, u64::try_from(passed_token).unwrap());
    let taken = taking.granted(fencing_token, distlock_core::backend::GrantState::none());
    assert!(backend.extend(&taken).await.unwrap(), "ours to extend");
    assert!(backend.release(&taken).await.unwrap(), "ours to release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_try_never_jumps_the_line() {
    let table = unique_table();
    let admin = admin().await;
    let (one, two) = (
        client(&open(&table).await, "one"),
        client(&open(&table).await, "two"),
    );
    let lock = name("try");
    let held = one.acquire(&lock).await.unwrap();
    let waiting = tokio::spawn({
        let (two, lock) = (two.clone(), lock.clone());
        async move { two.acquire_with(&lock, PATIENCE).await.unwrap() }
    });
    until_queued(&admin, &table, &lock, 1).await;
    assert!(held.release().await.unwrap());
    // Released, and granted at once to the waiter in line.
    assert!(one.try_acquire(&lock).await.unwrap().is_none());
    let guard = waiting.await.unwrap();
    assert!(guard.release().await.unwrap());
    assert!(one.try_acquire(&lock).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_waiter_leaves_the_line_at_once() {
    let table = unique_table();
    let admin = admin().await;
    let clients: Vec<LockClient> = [open(&table).await, open(&table).await, open(&table).await]
        .iter()
        .enumerate()
        .map(|(index, backend)| client(backend, &format!("client-{index}")))
        .collect();
    let lock = name("cancel");
    let held = clients[0].acquire(&lock).await.unwrap();
    let (cancel, gives_up) = acquire_until_cancelled(&clients[1], &lock, AcquireOptions::new());
    until_queued(&admin, &table, &lock, 1).await;
    let stays = tokio::spawn({
        let (client, lock) = (clients[2].clone(), lock.clone());
        async move { client.acquire_with(&lock, PATIENCE).await.unwrap() }
    });
    until_queued(&admin, &table, &lock, 2).await;
    cancel.send(()).unwrap();
    assert!(
        matches!(gives_up.await.unwrap(), Err(Error::Cancelled { .. })),
        "the cancelled wait ends"
    );
    assert_eq!(queued(&admin, &table, &lock).await, 1, "its place is gone");
    assert!(held.release().await.unwrap());
    let guard = stays.await.unwrap();
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_place_given_up_after_its_grant_passes_the_grant_on() {
    let table = unique_table();
    let admin = admin().await;
    let backend = open(&table).await;
    let lock = name("given-up");
    let _watch = watching(&backend, &lock).await;
    let lease = Duration::from_secs(30);
    let held = granted(&backend, &lock, lease).await;
    let (first, second) = (
        waiting_request(&lock, lease, "first"),
        waiting_request(&lock, lease, "second"),
    );
    let (mut first_wait, mut second_wait) = (WaitState::new(), WaitState::new());
    backend.try_acquire(&first, &mut first_wait).await.unwrap();
    backend
        .try_acquire(&second, &mut second_wait)
        .await
        .unwrap();
    assert!(backend.release(&held).await.unwrap());
    let passed = holders(&admin, &table, &lock).await;
    assert_eq!(passed.len(), 1);
    assert_eq!(passed[0].1.as_deref(), Some("first"));
    // The first waiter gives up before it takes its grant: the lock goes
    // to the second, in the same statement.
    backend.end_wait(&first, first_wait).await.unwrap();
    let passed_on = holders(&admin, &table, &lock).await;
    assert_eq!(passed_on.len(), 1);
    assert_eq!(passed_on[0].1.as_deref(), Some("second"));
    assert!(
        passed_on[0].0 > passed[0].0,
        "{passed:?} then {passed_on:?}"
    );
    let (_, fencing_token) = taken_over(&backend, &second, &mut second_wait).await;
    assert_eq!(fencing_token, u64::try_from(passed_on[0].0).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_waiter_holds_the_line_up_only_until_its_grant_runs_out() {
    let table = unique_table();
    let admin = admin().await;
    let backend = open(&table).await;
    let live = client(&open(&table).await, "live");
    let lock = name("dead");
    let held = client(&backend, "holder").acquire(&lock).await.unwrap();
    // A waiter that takes its place and dies: it never asks again, and
    // never ends its wait.
    let dead = waiting_request(&lock, Duration::from_secs(2), "dead");
    let attempt = backend
        .try_acquire(&dead, &mut WaitState::new())
        .await
        .unwrap();
    assert!(matches!(attempt, Attempt::Held { .. }), "{attempt:?}");
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { live.acquire_with(&lock, PATIENCE).await.unwrap() }
    });
    until_queued(&admin, &table, &lock, 2).await;
    assert!(held.release().await.unwrap());
    // The release granted the dead waiter's place, first in line ...
    let granted = holders(&admin, &table, &lock).await;
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].1.as_deref(), Some("dead"));
    // ... and once that grant ran out, unclaimed, the live waiter's next
    // attempt passed the lock on to it.
    let guard = waiting.await.unwrap();
    assert!(guard.fencing_token() > u64::try_from(granted[0].0).unwrap());
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_waiter_s_place_drops_out_within_its_lease() {
    let table = unique_table();
    let admin = admin().await;
    let backend = open(&table).await;
    let lock = name("dropped");
    let held = client(&backend, "holder").acquire(&lock).await.unwrap();
    let dead = waiting_request(&lock, Duration::from_secs(1), "dead");
    backend
        .try_acquire(&dead, &mut WaitState::new())
        .await
        .unwrap();
    assert_eq!(queued(&admin, &table, &lock).await, 1);
    // Never renewed, the place is gone by the server's clock.
    until_queued(&admin, &table, &lock, 0).await;
    assert!(held.release().await.unwrap());
    assert!(holders(&admin, &table, &lock).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fair_mode_is_in_the_capabilities_only_when_asked() {
    let table = unique_table();
    let backend = open(&table).await;
    assert!(backend.capabilities().fair);
    assert!(backend.config().fair);
    let plain = PostgresBackend::open(&fair_url(&table).replace("&fair=true", ""))
        .await
        .unwrap();
    assert!(!plain.capabilities().fair);
}

/// Whether a session waits for an advisory lock it has not been granted.
async fn someone_waits_for_an_advisory_lock(admin: &tokio_postgres::Client) -> bool {
    let rows = admin
        .query(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            &[],
        )
        .await
        .expect("read pg_locks");
    !rows.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_first_attempt_that_meets_the_row_s_deletion_is_not_told_it_waits_in_line() {
    // A release that leaves nobody holding or waiting deletes the name's
    // row, behind the name's gate; a first attempt that began just before
    // the deletion committed finds no row to take its place in. It must
    // not answer that it waits in line (a later waiter could then take a
    // place ahead of it): it asks again at once, or has its place.
    let table = unique_table();
    let admin = admin().await;
    let deleting = support::admin().await;
    let backend = open(&table).await;
    let lock = name("deleted");
    let lease = Duration::from_secs(30);
    let held = granted(&backend, &lock, lease).await;
    let bytes = lock.as_str().as_bytes().to_vec();

    // The deletion, as a release makes it: the gate held exclusively,
    // the row deleted, not yet committed.
    deleting.batch_execute("BEGIN").await.unwrap();
    deleting
        .query_typed(
            "SELECT pg_advisory_xact_lock(hashtextextended('distlock gate ' || encode($1, 'hex'), 0))",
            &[(&bytes, Type::BYTEA)],
        )
        .await
        .expect("take the gate");
    let deleted = deleting
        .execute_typed(
            &format!("DELETE FROM {table} WHERE name = $1"),
            &[(&bytes, Type::BYTEA)],
        )
        .await
        .expect("delete the row");
    assert_eq!(deleted, 1);

    let waiter = waiting_request(&lock, lease, "waiter");
    let attempt = tokio::spawn({
        let (backend, waiter) = (backend.clone(), waiter.clone());
        async move {
            let mut wait = WaitState::new();
            backend.try_acquire(&waiter, &mut wait).await.unwrap()
        }
    });
    // The attempt has begun, and waits at the gate.
    tokio::time::timeout(PATIENCE, async {
        while !someone_waits_for_an_advisory_lock(&admin).await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the attempt never reached the gate");
    deleting.batch_execute("COMMIT").await.unwrap();

    match attempt.await.unwrap() {
        Attempt::Acquired { .. } => {}
        Attempt::Held { retry_after } if retry_after == Some(Duration::ZERO) => {}
        Attempt::Held { retry_after } => assert_eq!(
            queued(&admin, &table, &lock).await,
            1,
            "told to wait {retry_after:?} with no place in line"
        ),
    }
    drop(held);
}

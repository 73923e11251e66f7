//! Lease mode without fair mode against a real server: a waiting writer's
//! mark records who waits and since when by the server's clock, a refresh
//! keeps that beginning, and `list` shows each name's live marks, in the
//! order their waits began, as waits for the whole lock; a served writer's
//! mark, or an ended wait's, is gone. `scripts/test` starts the server and
//! sets `DISTLOCK_TEST_POSTGRES_URL`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{
    AcquireRequest, Attempt, Backend, Lease, LeaseId, WaitState, WaiterList,
};
use distlock_core::{Claim, Holder, LockKind, LockName, Waiter};
use distlock_postgres::PostgresBackend;
use distlock_postgres::tokio_postgres::{self, types::Type};

use support::{admin, first_column, name, open, unique, url, with_options};

/// Every lease of these tests: far longer than any test takes.
const LEASE: Duration = Duration::from_secs(30);

/// How long a listing may take.
const LIMIT: Duration = Duration::from_secs(10);

/// The server's clock in µs since the epoch, as the backend reads it.
const NOW_US: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint";

/// A backend on a table of the test's own, without fair mode.
async fn backend() -> (Arc<PostgresBackend>, String) {
    let table = unique("marks");
    let backend = open(&with_options(&url(), &format!("table={table}"))).await;
    (backend, table)
}

/// A holder no process of this test is: what a mark records is the
/// request's.
fn someone(label: &str) -> Holder {
    Holder {
        host: format!("host-of-{label}"),
        pid: 4242,
        label: Some(label.to_owned()),
    }
}

/// An attempt of `who`'s wait for `name`'s whole lock.
fn waiting(name: &LockName, who: &str) -> AcquireRequest {
    AcquireRequest {
        retries: true,
        ..AcquireRequest::new(
            name.clone(),
            Claim::Exclusive,
            LEASE,
            Arc::new(someone(who)),
        )
    }
}

/// The next attempt of the wait `request` was the last of.
fn next_attempt(request: &AcquireRequest) -> AcquireRequest {
    AcquireRequest {
        lease_id: LeaseId::random(),
        ..request.clone()
    }
}

/// `name`'s whole lock, granted to "holder".
async fn held(backend: &PostgresBackend, name: &LockName) -> Lease {
    let request = AcquireRequest::new(
        name.clone(),
        Claim::Exclusive,
        LEASE,
        Arc::new(someone("holder")),
    );
    let Attempt::Acquired {
        fencing_token,
        state,
    } = backend
        .try_acquire(&request, &mut WaitState::new())
        .await
        .expect("acquire")
    else {
        panic!("{name} was free");
    };
    request.granted(fencing_token, state)
}

/// One attempt of a wait, which finds the lock held.
async fn still_waits(backend: &PostgresBackend, request: &AcquireRequest, wait: &mut WaitState) {
    let attempt = backend.try_acquire(request, wait).await.expect("attempt");
    assert!(
        matches!(attempt, Attempt::Held { .. }),
        "{attempt:?}: the lock is held"
    );
}

fn waiter_list(backend: &PostgresBackend) -> &dyn WaiterList {
    backend
        .abilities()
        .waiters
        .expect("lease mode lists its waiters")
}

/// The waiters the backend lists for `name`, in its order.
async fn waiters_of(backend: &PostgresBackend, name: &LockName) -> Vec<Waiter> {
    waiter_list(backend)
        .waiters(LIMIT)
        .await
        .expect("list the waiters")
        .into_iter()
        .filter(|(listed, _)| listed == name)
        .map(|(_, waiter)| waiter)
        .collect()
}

/// The labels of `name`'s listed waiters, in the listed order.
async fn labels_of(backend: &PostgresBackend, name: &LockName) -> Vec<Option<String>> {
    waiters_of(backend, name)
        .await
        .into_iter()
        .map(|waiter| waiter.holder.and_then(|holder| holder.label))
        .collect()
}

/// The server's clock now, in µs.
async fn server_now(admin: &tokio_postgres::Client) -> i64 {
    first_column(admin, NOW_US, &[], "read the server's clock")
        .await
        .remove(0)
}

/// `name`'s marks as the row stores them: each one's `since` and `exp`,
/// in the row's order.
async fn marks(admin: &tokio_postgres::Client, table: &str, name: &LockName) -> Vec<(i64, i64)> {
    let sql = format!(
        "SELECT (m ->> 'since')::bigint, (m ->> 'exp')::bigint
         FROM {table} AS t, jsonb_array_elements(t.waiting) WITH ORDINALITY AS x(m, n)
         WHERE t.name = $1 ORDER BY n"
    );
    let bytes = name.as_str().as_bytes();
    admin
        .query_typed(&sql, &[(&bytes, Type::BYTEA)])
        .await
        .expect("read the marks")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

#[tokio::test]
async fn a_mark_records_who_waits_and_since_when_by_the_server() {
    let (backend, table) = backend().await;
    let admin = admin().await;
    let lock = name(&unique("marked"));
    let lease = held(&backend, &lock).await;
    let waiter = waiting(&lock, "writer");
    let mut wait = WaitState::new();
    let before = server_now(&admin).await;
    still_waits(&backend, &waiter, &mut wait).await;
    let after = server_now(&admin).await;

    let stored = marks(&admin, &table, &lock).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let (since, _) = stored[0];
    assert!(
        (before..=after).contains(&since),
        "the wait began by the server's clock, between {before} and {after}: {since}"
    );
    let listed = waiters_of(&backend, &lock).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].kind, LockKind::Exclusive);
    assert_eq!(
        listed[0].holder,
        Some(someone("writer")),
        "the request's holder"
    );
    let waited = listed[0].waiting_for.expect("since when is recorded");
    let now = server_now(&admin).await;
    let most = Duration::from_micros(u64::try_from(now - since).unwrap());
    assert!(waited <= most, "waited {waited:?}, at most {most:?}");

    // Marks keep no line: whoever asks first after a release is served;
    // fair mode's line, on the same table, is served in its order.
    assert!(!waiter_list(&backend).serves_in_order());
    assert!(!waiter_list(&backend).sees_every_wait());
    let fair = open(&with_options(&url(), &format!("table={table}&fair=true"))).await;
    assert!(waiter_list(&fair).serves_in_order());
    backend.end_wait(&waiter, wait).await.expect("end the wait");
    backend.release(&lease).await.expect("release");
}

#[tokio::test]
async fn a_refreshed_mark_keeps_when_its_wait_began_and_its_place_in_the_list() {
    let (backend, table) = backend().await;
    let admin = admin().await;
    let lock = name(&unique("refreshed"));
    let lease = held(&backend, &lock).await;
    let first = waiting(&lock, "first");
    let mut first_wait = WaitState::new();
    still_waits(&backend, &first, &mut first_wait).await;
    let (since, exp) = marks(&admin, &table, &lock).await[0];
    let second = waiting(&lock, "second");
    let mut second_wait = WaitState::new();
    still_waits(&backend, &second, &mut second_wait).await;

    // The first writer asks again: its mark is written anew, last in the
    // row, with a later end and the same beginning.
    tokio::time::sleep(Duration::from_millis(20)).await;
    still_waits(&backend, &next_attempt(&first), &mut first_wait).await;
    let stored = marks(&admin, &table, &lock).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    let (refreshed_since, refreshed_exp) = stored[1];
    assert_eq!(refreshed_since, since, "a refresh keeps the beginning");
    assert!(refreshed_exp > exp, "a refresh lasts a lease from then");
    assert!(stored[0].0 > since, "the second began later: {stored:?}");
    assert_eq!(
        labels_of(&backend, &lock).await,
        [Some("first".to_owned()), Some("second".to_owned())],
        "in the order the waits began, not the row's"
    );

    backend.end_wait(&first, first_wait).await.expect("end");
    backend.end_wait(&second, second_wait).await.expect("end");
    backend.release(&lease).await.expect("release");
}

#[tokio::test]
async fn only_a_name_s_own_marks_are_listed_with_it() {
    let (backend, _) = backend().await;
    let one = name(&unique("one"));
    let other = name(&unique("other"));
    let one_lease = held(&backend, &one).await;
    let other_lease = held(&backend, &other).await;
    let mut waits = Vec::new();
    for (lock, who) in [(&one, "a"), (&other, "b"), (&one, "c")] {
        let request = waiting(lock, who);
        let mut wait = WaitState::new();
        still_waits(&backend, &request, &mut wait).await;
        waits.push((request, wait));
    }
    assert_eq!(
        labels_of(&backend, &one).await,
        [Some("a".to_owned()), Some("c".to_owned())]
    );
    assert_eq!(labels_of(&backend, &other).await, [Some("b".to_owned())]);
    for (request, wait) in waits {
        backend.end_wait(&request, wait).await.expect("end");
    }
    assert!(waiters_of(&backend, &one).await.is_empty(), "waits ended");
    backend.release(&one_lease).await.expect("release");
    backend.release(&other_lease).await.expect("release");
}

#[tokio::test]
async fn a_served_writer_s_mark_is_gone_and_the_other_stays() {
    let (backend, _) = backend().await;
    let lock = name(&unique("served"));
    let lease = held(&backend, &lock).await;
    let first = waiting(&lock, "first");
    let mut first_wait = WaitState::new();
    still_waits(&backend, &first, &mut first_wait).await;
    let second = waiting(&lock, "second");
    let mut second_wait = WaitState::new();
    still_waits(&backend, &second, &mut second_wait).await;
    backend.release(&lease).await.expect("release");

    // The second asks first after the release, and is served.
    let served = next_attempt(&second);
    let attempt = backend
        .try_acquire(&served, &mut second_wait)
        .await
        .expect("attempt");
    let Attempt::Acquired {
        fencing_token,
        state,
    } = attempt
    else {
        panic!("{attempt:?}: the lock was free");
    };
    assert_eq!(
        labels_of(&backend, &lock).await,
        [Some("first".to_owned())],
        "the served writer's mark went with its grant"
    );
    backend
        .release(&served.granted(fencing_token, state))
        .await
        .expect("release");
    backend.end_wait(&first, first_wait).await.expect("end");
    assert!(waiters_of(&backend, &lock).await.is_empty());
}

#[tokio::test]
async fn older_marks_are_listed_without_who_and_fair_places_not_at_all() {
    let (backend, table) = backend().await;
    let admin = admin().await;
    let lock = name(&unique("older"));
    let lease = held(&backend, &lock).await;
    let writer = waiting(&lock, "writer");
    let mut wait = WaitState::new();
    still_waits(&backend, &writer, &mut wait).await;
    // A mark of an older version, `{id, exp}` alone, and a fair client's
    // place, which fair mode lists.
    let sql = format!(
        "UPDATE {table} AS t SET waiting = t.waiting || jsonb_build_array(
             jsonb_build_object('id', 'older', 'exp', c.now_us + 30000000),
             jsonb_build_object('id', 'place', 'exp', c.now_us + 30000000,
                                'lease', 30000000, 'holder', '{{}}'::jsonb))
         FROM ({NOW_US} AS now_us) AS c WHERE t.name = $1"
    );
    let bytes = lock.as_str().as_bytes();
    admin
        .execute_typed(&sql, &[(&bytes, Type::BYTEA)])
        .await
        .expect("add the marks");
    let listed = waiters_of(&backend, &lock).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0].holder, Some(someone("writer")));
    assert_eq!(
        (listed[1].holder.as_ref(), listed[1].waiting_for),
        (None, None),
        "an older mark records neither"
    );
    // The writer's next attempt refreshes its mark beside the older one.
    still_waits(&backend, &next_attempt(&writer), &mut wait).await;
    assert_eq!(waiters_of(&backend, &lock).await.len(), 2);
    backend.end_wait(&writer, wait).await.expect("end");
    backend.release(&lease).await.expect("release");
}

//! Resuming a grant by its handle in lease mode, against a real server,
//! beyond what the conformance cases reach: a handle whose token or claim
//! is not the grant's takes nothing up; a resumed grant keeps its place
//! among readers and permits, with its token and time of grant, under its
//! new identity and holder; in fair mode the line behind a resumed grant
//! stays as it was and is served in its order, a grant passed on in line
//! resumes too, and the old holder can neither extend nor release it;
//! advisory mode refuses, saying why. `scripts/test` starts the server and
//! sets `DISTLOCK_TEST_POSTGRES_URL`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::Backend;
use distlock_core::{
    AcquireOptions, Claim, Error, LockClient, LockGuard, LockName, LockOptions, ResumeHandle,
};
use distlock_postgres::PostgresBackend;
use distlock_postgres::tokio_postgres::{self, types::Type};

use support::{admin, name, open, unique, url, with_options};

/// How long any one wait may take; waits end far sooner.
const PATIENCE: Duration = Duration::from_secs(60);

/// A client of `backend` whose holder carries `label`.
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

/// A backend on a fresh table of the test's own, with `options` too.
async fn fresh(options: &str) -> (Arc<PostgresBackend>, String) {
    let table = unique("resume");
    let url = with_options(&url(), &format!("table={table}{options}"));
    (open(&url).await, table)
}

async fn acquired(client: &LockClient, name: &LockName, claim: Claim) -> LockGuard {
    let options = AcquireOptions::new().claim(claim).timeout(PATIENCE);
    client.acquire_with(name, options).await.expect("acquire")
}

/// The identity a handle names: the fourth field of its text.
fn identity(handle: &ResumeHandle) -> String {
    handle
        .to_string()
        .split(' ')
        .nth(3)
        .expect("a handle's identity")
        .to_owned()
}

/// `handle`'s text with its field `at` (0-based) replaced by `with`.
fn forged(handle: &ResumeHandle, at: usize, with: &str) -> ResumeHandle {
    let text = handle.to_string();
    let mut fields: Vec<&str> = text.split(' ').collect();
    fields[at] = with;
    fields
        .join(" ")
        .parse()
        .expect("a forged handle still reads")
}

/// Each entry of `name`'s holders, live or not, in the row's order: its
/// identity, token, time of grant and holder's label.
async fn holders(
    admin: &tokio_postgres::Client,
    table: &str,
    name: &LockName,
) -> Vec<(String, i64, i64, Option<String>)> {
    let sql = format!(
        "SELECT h ->> 'id', (h ->> 'token')::bigint, (h ->> 'at')::bigint,
                h -> 'holder' ->> 'label'
         FROM {table} AS t, jsonb_array_elements(t.holders) WITH ORDINALITY AS x(h, n)
         WHERE t.name = $1 ORDER BY n"
    );
    let bytes = name.as_str().as_bytes();
    admin
        .query_typed(&sql, &[(&bytes, Type::BYTEA)])
        .await
        .expect("read the holders")
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect()
}

/// The identities of `name`'s waiting entries (fair mode's places), in
/// line order.
async fn places(admin: &tokio_postgres::Client, table: &str, name: &LockName) -> Vec<String> {
    let sql = format!(
        "SELECT e ->> 'id'
         FROM {table} AS t, jsonb_array_elements(t.waiting) WITH ORDINALITY AS x(e, n)
         WHERE t.name = $1 AND e ? 'lease' ORDER BY n"
    );
    let bytes = name.as_str().as_bytes();
    admin
        .query_typed(&sql, &[(&bytes, Type::BYTEA)])
        .await
        .expect("read the line")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Waits until `name` has `n` places in line.
async fn until_in_line(admin: &tokio_postgres::Client, table: &str, name: &LockName, n: usize) {
    tokio::time::timeout(PATIENCE, async {
        while places(admin, table, name).await.len() != n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{name} never had {n} places in line"));
}

fn assert_lost(outcome: distlock_core::Result<LockGuard>, what: &str) {
    match outcome {
        Err(Error::Lost { .. }) => {}
        Ok(guard) => panic!(
            "resuming {what} held {} with token {}",
            guard.name(),
            guard.fencing_token()
        ),
        Err(error) => panic!("resuming {what} failed with {error}, not Lost"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handle_with_another_token_or_claim_takes_nothing_up() {
    let (backend, _) = fresh("").await;
    let lock = name(&unique("forged"));
    let holder = client(&backend, "holder");
    let guard = acquired(&holder, &lock, Claim::Exclusive).await;
    let handle = guard.handle();
    let token = handle.fencing_token();
    let resumer = client(&backend, "resumer");
    for (what, forgery) in [
        (
            "a later token",
            forged(&handle, 4, &(token + 1).to_string()),
        ),
        (
            "an earlier token",
            forged(&handle, 4, &(token - 1).to_string()),
        ),
        (
            "a token no grant has",
            forged(&handle, 4, &u64::MAX.to_string()),
        ),
        ("a shared claim", forged(&handle, 2, "shared")),
        ("a permit", forged(&handle, 2, "permit/1")),
    ] {
        assert_lost(resumer.resume(&forgery).await, what);
    }
    // None of them changed the grant: its holder still extends it, and
    // the true handle takes it up.
    guard.extend().await.expect("the holder keeps its grant");
    let resumed = resumer.resume(&handle).await.expect("resume");
    assert_eq!(resumed.fencing_token(), token);
    assert!(resumed.release().await.expect("release"));
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resumed_reader_or_permit_keeps_its_place_token_and_time_of_grant() {
    let admin = admin().await;
    let (backend, table) = fresh("").await;
    for claim in [Claim::Shared, Claim::Permit { limit: 2 }] {
        let lock = name(&unique("among"));
        let (first, second) = (client(&backend, "first"), client(&backend, "second"));
        let one = acquired(&first, &lock, claim).await;
        let two = acquired(&second, &lock, claim).await;
        let before = holders(&admin, &table, &lock).await;
        assert_eq!(
            before.iter().map(|h| h.0.clone()).collect::<Vec<_>>(),
            [identity(&one.handle()), identity(&two.handle())],
            "{claim}"
        );

        let resumer = client(&backend, "resumer");
        let resumed = resumer.resume(&one.handle()).await.expect("resume");
        assert_eq!(resumed.fencing_token(), one.fencing_token());
        let after = holders(&admin, &table, &lock).await;
        // The first entry, under its new identity and holder, with its
        // token and time of grant; the second as it was.
        assert_eq!(
            after[0],
            (
                identity(&resumed.handle()),
                before[0].1,
                before[0].2,
                Some("resumer".to_owned())
            ),
            "{claim}"
        );
        assert_eq!(after[1..], before[1..], "{claim}");
        let listed = resumer.list().await.expect("list");
        let labels: Vec<_> = listed
            .iter()
            .filter(|info| info.name == lock)
            .map(|info| info.holder.as_ref().and_then(|h| h.label.clone()))
            .collect();
        assert_eq!(labels.len(), 2, "{listed:?}");
        assert!(labels.contains(&Some("resumer".to_owned())), "{labels:?}");

        // Two grants hold the name still: a writer, or a third permit,
        // stays out; the old holder's extension finds nothing.
        let other = client(&backend, "other");
        let excluded = match claim {
            Claim::Permit { .. } => claim,
            _ => Claim::Exclusive,
        };
        assert!(
            other
                .try_acquire_with(&lock, excluded)
                .await
                .expect("try")
                .is_none(),
            "{claim}"
        );
        let _ = one.extend().await;
        tokio::time::timeout(PATIENCE, one.lost())
            .await
            .expect("the old holder learns of its loss");
        assert!(!one.release().await.expect("release"), "{claim}");
        assert!(resumed.release().await.expect("release"), "{claim}");
        assert!(two.release().await.expect("release"), "{claim}");
    }
}

/// Two waiters for `lock` in line behind its holder, each recording its
/// label and token once served (releasing it at once): their tasks.
async fn two_in_line(
    backend: &Arc<PostgresBackend>,
    admin: &tokio_postgres::Client,
    table: &str,
    lock: &LockName,
    served: &Arc<Mutex<Vec<(String, u64)>>>,
    ahead: usize,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for (index, label) in ["waiter-1", "waiter-2"].into_iter().enumerate() {
        let waiter = client(backend, label);
        let (task_lock, served) = (lock.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let guard = waiter
                .acquire_with(&task_lock, PATIENCE)
                .await
                .expect("served");
            served
                .lock()
                .unwrap()
                .push((label.to_owned(), guard.fencing_token()));
            guard.release().await.expect("release");
        }));
        until_in_line(admin, table, lock, ahead + index + 1).await;
    }
    tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_fair_mode_the_line_behind_a_resumed_grant_is_served_in_its_order() {
    let admin = admin().await;
    let (backend, table) = fresh("&fair=true").await;
    let lock = name(&unique("line"));
    let holder = client(&backend, "holder");
    let old = acquired(&holder, &lock, Claim::Exclusive).await;
    let served = Arc::new(Mutex::new(Vec::new()));
    let tasks = two_in_line(&backend, &admin, &table, &lock, &served, 0).await;
    let line = places(&admin, &table, &lock).await;

    let resumer = client(&backend, "resumer");
    let resumed = resumer.resume(&old.handle()).await.expect("resume");
    assert_eq!(resumed.fencing_token(), old.fencing_token());
    assert_eq!(places(&admin, &table, &lock).await, line, "the line stays");
    // The old holder can neither extend nor release it, nor pass it on.
    let _ = old.extend().await;
    tokio::time::timeout(PATIENCE, old.lost())
        .await
        .expect("the old holder learns of its loss");
    assert!(!old.release().await.expect("release"));
    resumed.extend().await.expect("the resumed grant extends");
    assert!(served.lock().unwrap().is_empty(), "nobody was served yet");
    assert_eq!(places(&admin, &table, &lock).await, line);

    let token = resumed.fencing_token();
    assert!(resumed.release().await.expect("release"));
    for task in tasks {
        task.await.expect("a waiter");
    }
    let served = served.lock().unwrap().clone();
    let labels: Vec<&str> = served.iter().map(|(label, _)| label.as_str()).collect();
    assert_eq!(labels, ["waiter-1", "waiter-2"], "{served:?}");
    assert!(
        token < served[0].1 && served[0].1 < served[1].1,
        "{served:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_fair_mode_a_grant_passed_on_in_line_resumes() {
    let admin = admin().await;
    let (backend, table) = fresh("&fair=true").await;
    let lock = name(&unique("passed"));
    let first = client(&backend, "first");
    let held = acquired(&first, &lock, Claim::Exclusive).await;
    // The next holder waits in line, and is granted by the release.
    let next = {
        let waiter = client(&backend, "next");
        let lock = lock.clone();
        tokio::spawn(async move { waiter.acquire_with(&lock, PATIENCE).await })
    };
    until_in_line(&admin, &table, &lock, 1).await;
    let first_token = held.fencing_token();
    assert!(held.release().await.expect("release"));
    let passed = next.await.expect("the waiter").expect("served");
    assert!(passed.fencing_token() > first_token);

    let served = Arc::new(Mutex::new(Vec::new()));
    let tasks = two_in_line(&backend, &admin, &table, &lock, &served, 0).await;
    let resumer = client(&backend, "resumer");
    let resumed = resumer.resume(&passed.handle()).await.expect("resume");
    assert_eq!(resumed.fencing_token(), passed.fencing_token());
    let row = holders(&admin, &table, &lock).await;
    assert_eq!(row.len(), 1, "{row:?}");
    assert_eq!(row[0].0, identity(&resumed.handle()));
    assert_eq!(row[0].3.as_deref(), Some("resumer"));
    let _ = passed.extend().await;
    tokio::time::timeout(PATIENCE, passed.lost())
        .await
        .expect("the old holder learns of its loss");

    let token = resumed.fencing_token();
    assert!(resumed.release().await.expect("release"));
    for task in tasks {
        task.await.expect("a waiter");
    }
    let served = served.lock().unwrap().clone();
    let labels: Vec<&str> = served.iter().map(|(label, _)| label.as_str()).collect();
    assert_eq!(labels, ["waiter-1", "waiter-2"], "{served:?}");
    assert!(token < served[0].1, "{served:?}");
    drop(passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn advisory_mode_refuses_to_resume_saying_why() {
    let (backend, _) = fresh("&mode=advisory").await;
    let lock = name(&unique("advisory"));
    let holder = client(&backend, "holder");
    let guard = acquired(&holder, &lock, Claim::Exclusive).await;
    let refused = client(&backend, "resumer").resume(&guard.handle()).await;
    match refused {
        Err(Error::Unsupported(message)) => {
            assert!(message.contains("cannot resume"), "{message}");
            assert!(message.contains("session"), "{message}");
            assert!(message.contains("mode=lease"), "{message}");
        }
        other => panic!("advisory mode answered {other:?}"),
    }
    guard.extend().await.expect("the holder keeps its lock");
    assert!(guard.release().await.expect("release"));
}

//! Resuming a grant by its handle, as the document shows it: the very
//! grant, of every kind, goes on under the resumer's identity with its
//! token and its place; a handle that names another grant, kind, limit or
//! token changes nothing; a grant passed on in fair mode is resumed by the
//! handle its guard gives; and a resume wakes nobody.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{Backend, Resuming};
use distlock_core::{
    AcquireOptions, Claim, Error, LockClient, LockGuard, LockName, LockOptions, ResumeHandle,
};
use distlock_mongodb::MongoBackend;
use distlock_mongodb::mongodb::Collection;
use distlock_mongodb::mongodb::bson::{Bson, Document};

use crate::common::*;
use crate::fair::{WAIT, fair_backend, line, release_watch, stored, until_in_line};

/// How many rounds a test that needs a grant held as passed takes, at
/// most, to get one (as in `passed`).
const PASS_ON_ROUNDS: usize = 6;

fn labelled(backend: Arc<MongoBackend>, label: &str) -> LockClient {
    let options = LockOptions::builder()
        .lease(Duration::from_secs(20))
        .label(label)
        .build()
        .unwrap();
    client(backend, options)
}

async fn acquired(client: &LockClient, name: &LockName, claim: Claim) -> LockGuard {
    let options = AcquireOptions::new().claim(claim).timeout(WAIT);
    client.acquire_with(name, options).await.unwrap()
}

/// The identity a handle names, as the document stores it.
fn identity(handle: &ResumeHandle) -> String {
    handle.to_string().split(' ').nth(3).unwrap().to_owned()
}

/// `handle` with its `field`th field (0 is the prefix) replaced by `with`.
fn edited(handle: &ResumeHandle, field: usize, with: &str) -> ResumeHandle {
    let mut fields: Vec<String> = handle.to_string().split(' ').map(str::to_owned).collect();
    fields[field] = with.to_owned();
    fields.join(" ").parse().unwrap()
}

/// `document` without its times of expiry, which the holder's keeper
/// moves on.
fn shape(mut document: Document) -> Document {
    document.remove("expiresAt");
    if let Ok(entries) = document.get_array_mut("holders") {
        for entry in entries {
            if let Bson::Document(entry) = entry {
                entry.remove("expiresAt");
            }
        }
    }
    document
}

/// The entries of `document`'s `holders`, in order.
fn entries(document: &Document) -> Vec<Document> {
    document
        .get_array("holders")
        .unwrap()
        .iter()
        .map(|entry| entry.as_document().unwrap().clone())
        .collect()
}

fn label_of(holder: &Document) -> &str {
    holder.get_str("label").unwrap()
}

async fn assert_lost(client: &LockClient, handle: &ResumeHandle, what: &str) {
    match client.resume(handle).await {
        Err(Error::Lost { .. }) => {}
        other => panic!("resuming {what} answered {other:?}, not Lost"),
    }
}

#[tokio::test]
async fn named_locks_resume_in_both_modes() {
    let backend = backend_at(&shared_url(), &unique("resume-ability")).await;
    assert!(matches!(backend.abilities().resumes, Resuming::By(_)));
    let fair = fair_backend(&unique("resume-ability")).await;
    assert!(matches!(fair.abilities().resumes, Resuming::By(_)));
}

#[tokio::test]
async fn an_exclusive_grant_goes_on_under_the_new_identity_with_its_token() {
    let collection = unique("resume-exclusive");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let name = lock_name("resume-exclusive");
    let before = labelled(backend_at(&shared_url(), &collection).await, "before");
    let old = acquired(&before, &name, Claim::Exclusive).await;
    let handle = old.handle();
    let held = stored(&raw, &name).await;
    assert_eq!(held.get_str("lockId").unwrap(), identity(&handle));
    let after = labelled(backend_at(&shared_url(), &collection).await, "after");
    let resumed_from = server_now(&raw).await.timestamp_millis();
    let resumed = after.resume(&handle).await.unwrap();
    let now = stored(&raw, &name).await;
    assert_eq!(
        now.get_str("lockId").unwrap(),
        identity(&resumed.handle()),
        "stored under the resumer's identity"
    );
    assert_ne!(identity(&resumed.handle()), identity(&handle));
    assert_eq!(
        now.get("fencingToken"),
        held.get("fencingToken"),
        "the same token"
    );
    assert_eq!(resumed.fencing_token(), old.fencing_token());
    assert_eq!(
        now.get("acquiredAt"),
        held.get("acquiredAt"),
        "the same grant"
    );
    assert_eq!(label_of(now.get_document("holder").unwrap()), "after");
    let until = now.get_datetime("expiresAt").unwrap().timestamp_millis();
    assert!(until >= resumed_from + 20_000, "a lease from the resume");
    // The old holder's extension is refused: it learns it lost.
    let _ = old.extend().await;
    tokio::time::timeout(WAIT, old.lost()).await.unwrap();
    let third = labelled(backend_at(&shared_url(), &collection).await, "third");
    assert_lost(&third, &handle, "a spent handle").await;
    assert!(resumed.release().await.unwrap());
    assert!(stored(&raw, &name).await.get("lockId").is_none());
}

#[tokio::test]
async fn one_reader_among_several_is_resumed_in_its_place() {
    let collection = unique("resume-readers");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let name = lock_name("resume-readers");
    let before = labelled(backend_at(&shared_url(), &collection).await, "before");
    let first = acquired(&before, &name, Claim::Shared).await;
    let middle = acquired(&before, &name, Claim::Shared).await;
    let last = acquired(&before, &name, Claim::Shared).await;
    let held = entries(&stored(&raw, &name).await);
    let after = labelled(backend_at(&shared_url(), &collection).await, "after");
    let resumed = after.resume(&middle.handle()).await.unwrap();
    let document = stored(&raw, &name).await;
    let now = entries(&document);
    assert_eq!(now.len(), 3);
    assert_eq!(now[0], held[0], "the readers before it are untouched");
    assert_eq!(now[2], held[2], "and so are those after it");
    assert_eq!(now[1].get_str("id").unwrap(), identity(&resumed.handle()));
    assert_eq!(now[1].get("fencingToken"), held[1].get("fencingToken"));
    assert_eq!(now[1].get("acquiredAt"), held[1].get("acquiredAt"));
    assert_eq!(label_of(now[1].get_document("holder").unwrap()), "after");
    let latest = now
        .iter()
        .map(|entry| *entry.get_datetime("expiresAt").unwrap())
        .max()
        .unwrap();
    assert_eq!(
        *document.get_datetime("expiresAt").unwrap(),
        latest,
        "the document ends with its last reader"
    );
    assert_eq!(document.get_str("lockId").unwrap(), "shared");
    first.extend().await.unwrap();
    last.extend().await.unwrap();
    let _ = middle.extend().await;
    tokio::time::timeout(WAIT, middle.lost()).await.unwrap();
    for guard in [first, resumed, last] {
        assert!(guard.release().await.unwrap());
    }
    assert!(stored(&raw, &name).await.get("holders").is_none());
}

#[tokio::test]
async fn a_handle_of_another_kind_limit_token_or_name_changes_nothing() {
    let collection = unique("resume-mismatch");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let backend = backend_at(&shared_url(), &collection).await;
    let holder = labelled(backend.clone(), "holder");
    let resumer = labelled(backend, "resumer");
    let name = lock_name("resume-mismatch");
    let permit = acquired(&holder, &name, Claim::Permit { limit: 2 }).await;
    let handle = permit.handle();
    let before = shape(stored(&raw, &name).await);
    let token = handle.fencing_token();
    let other_name = lock_name("resume-mismatch-other");
    for (what, wrong) in [
        ("another limit", edited(&handle, 2, "permit/3")),
        ("a reader's share", edited(&handle, 2, "shared")),
        ("the whole lock", edited(&handle, 2, "exclusive")),
        (
            "another token",
            edited(&handle, 4, &(token + 1).to_string()),
        ),
        (
            "a token beyond int64",
            edited(&handle, 4, &u64::MAX.to_string()),
        ),
        (
            "another identity",
            edited(&handle, 3, &format!("{:032x}", rand::random::<u128>())),
        ),
        ("another name", edited(&handle, 5, other_name.as_str())),
    ] {
        assert_lost(&resumer, &wrong, what).await;
        assert_eq!(
            shape(stored(&raw, &name).await),
            before,
            "{what} changed nothing"
        );
    }
    let resumed = resumer.resume(&handle).await.unwrap();
    assert_eq!(resumed.claim(), Claim::Permit { limit: 2 });
    assert!(resumed.release().await.unwrap());
    drop(permit);
}

/// Takes the lock `name` of `collection` as a fair waiter of `waiter`
/// while `holder` holds it, until a round's grant is held as passed (the
/// document still stores it under the waiter's place); returns that
/// guard and the place, or the last round's guard and `None`.
async fn passed_on(
    raw: &Collection<Document>,
    holder: &LockClient,
    waiter: &LockClient,
    name: &LockName,
) -> (LockGuard, Option<String>) {
    for round in 0..PASS_ON_ROUNDS {
        let held = acquired(holder, name, Claim::Exclusive).await;
        let waiting = {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move { waiter.acquire_with(&name, WAIT).await.unwrap() })
        };
        until_in_line(raw, name, 1).await;
        let place = line(raw, name).await.remove(0);
        assert!(held.release().await.unwrap());
        let guard = waiting.await.unwrap();
        let as_passed = stored(raw, name).await.get_str("lockId").unwrap() == place;
        if as_passed {
            return (guard, Some(place));
        }
        if round + 1 == PASS_ON_ROUNDS {
            return (guard, None);
        }
        assert!(guard.release().await.unwrap());
    }
    unreachable!()
}

#[tokio::test]
async fn a_grant_passed_on_in_fair_mode_is_resumed_by_its_guards_handle() {
    let collection = unique("resume-passed");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let name = lock_name("resume-passed");
    let holder = labelled(fair_backend(&collection).await, "holder");
    let waiter = labelled(fair_backend(&collection).await, "waiter");
    let (guard, place) = passed_on(&raw, &holder, &waiter, &name).await;
    let place = place.expect("a round whose grant was held as passed");
    let handle = guard.handle();
    assert_eq!(
        identity(&handle),
        place,
        "the handle names the place the grant is stored under"
    );
    let resumer = labelled(fair_backend(&collection).await, "resumer");
    let resumed = resumer.resume(&handle).await.unwrap();
    assert_eq!(resumed.fencing_token(), guard.fencing_token());
    let now = stored(&raw, &name).await;
    assert_eq!(now.get_str("lockId").unwrap(), identity(&resumed.handle()));
    assert!(now.get("passedTo").is_none(), "{now:?}");
    let _ = guard.extend().await;
    tokio::time::timeout(WAIT, guard.lost()).await.unwrap();
    // The resumed grant is extended and released as any other, and its
    // release passes the lock on to the next in line.
    resumed.extend().await.unwrap();
    let next = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire_with(&name, WAIT).await.unwrap() })
    };
    until_in_line(&raw, &name, 1).await;
    assert!(resumed.release().await.unwrap());
    let next = tokio::time::timeout(WOKEN_WITHIN, next)
        .await
        .expect("the release passes the lock on")
        .unwrap();
    assert!(next.fencing_token() > handle.fencing_token());
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn a_resume_keeps_the_fair_line_and_wakes_nobody() {
    let collection = unique("resume-line");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let name = lock_name("resume-line");
    let looker = fair_backend(&collection).await;
    let mut woken = release_watch(&looker, &name).await;
    let holder = labelled(fair_backend(&collection).await, "holder");
    let old = acquired(&holder, &name, Claim::Exclusive).await;
    let waiter = labelled(fair_backend(&collection).await, "waiter");
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire_with(&name, WAIT).await.unwrap() })
    };
    until_in_line(&raw, &name, 1).await;
    let place = line(&raw, &name).await;
    // The waiter's place went in after the watch started: drain what it
    // may have heard of before the resume.
    let _ = tokio::time::timeout(Duration::from_millis(300), woken.released()).await;
    let resumer = labelled(fair_backend(&collection).await, "resumer");
    let resumed = resumer.resume(&old.handle()).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(1), woken.released())
            .await
            .is_err(),
        "a resume is no release"
    );
    assert_eq!(line(&raw, &name).await, place, "the line stays");
    assert!(!waiting.is_finished(), "the waiter still waits");
    drop(old);
    assert!(resumed.release().await.unwrap());
    let next = tokio::time::timeout(WOKEN_WITHIN, waiting)
        .await
        .expect("the release passes the lock on")
        .unwrap();
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn a_resume_wakes_no_waiter_of_a_plain_lock() {
    let collection = unique("resume-wakes");
    let raw = raw_collection(&inspector(&shared_url()).await, &collection);
    let looker = backend_at(&shared_url(), &collection).await;
    let holder = labelled(backend_at(&shared_url(), &collection).await, "holder");
    for claim in [Claim::Exclusive, Claim::Shared, Claim::Permit { limit: 2 }] {
        // A name of its own for each watch, which must be new to the
        // looker's stream.
        let name = lock_name("resume-wakes");
        let old = acquired(&holder, &name, claim).await;
        let mut woken = release_watch(&looker, &name).await;
        if let Claim::Permit { .. } = claim {
            // A permit's release says in `freed` that it may let a waiter
            // in; the resume that follows must not say so again.
            let other = acquired(&holder, &name, claim).await;
            assert!(other.release().await.unwrap());
            assert!(stored(&raw, &name).await.get("freed").is_some());
            tokio::time::timeout(WAIT, woken.released())
                .await
                .expect("the release wakes");
        }
        let resumer = labelled(backend_at(&shared_url(), &collection).await, "resumer");
        let resumed = resumer.resume(&old.handle()).await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_secs(1), woken.released())
                .await
                .is_err(),
            "{claim}: a resume is no release"
        );
        let document = stored(&raw, &name).await;
        assert!(document.get("freed").is_none(), "{document:?}");
        drop(old);
        assert!(resumed.release().await.unwrap());
        tokio::time::timeout(WAIT, woken.released())
            .await
            .expect("the release wakes");
    }
}

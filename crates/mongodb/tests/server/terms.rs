//! The record of election terms in the lock document: bounded, written
//! only by campaigns' grants, carried over by other grants, and started
//! afresh when the document goes.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend, TERMS_KEPT, Term, WaitState};
use distlock_core::{Claim, Error, Holder, LockClient, LockOptions};
use distlock_mongodb::MongoBackend;
use distlock_mongodb::mongodb::bson::{Bson, Document, doc};

use crate::common::*;
use distlock_core::testing::ADMIN_LIMIT;

/// How long a campaign on a free election, or an observer's look, may take.
const PROMPTLY: Duration = Duration::from_secs(10);

/// A client of `backend` with the default options.
fn plain_client(backend: &Arc<MongoBackend>) -> LockClient {
    client(Arc::clone(backend), LockOptions::default())
}

/// Wins a term of `name` with `value`, and resigns it; returns the term.
async fn one_term(client: &LockClient, name: &str, value: &str) -> u64 {
    let leading = client
        .election(name)
        .unwrap()
        .campaign(value, PROMPTLY)
        .await
        .expect("the campaign wins a free election");
    let term = leading.term();
    assert!(leading.resign().await.unwrap(), "the leader resigns");
    term
}

/// Every term the record of `name` keeps, oldest first.
async fn recorded(backend: &MongoBackend, name: &str) -> Vec<Term> {
    let name = distlock_core::LockName::new(name).unwrap();
    backend
        .term_log()
        .expect("the backend keeps a record of terms")
        .terms_after(&name, 0, ADMIN_LIMIT)
        .await
        .expect("the record reads")
}

fn terms_of(terms: &[Term]) -> Vec<(u64, Option<u64>)> {
    terms
        .iter()
        .map(|term| (term.term, term.previous))
        .collect()
}

async fn document(raw: &distlock_mongodb::mongodb::Collection<Document>, name: &str) -> Document {
    raw.find_one(doc! { "_id": name })
        .await
        .unwrap()
        .expect("the lock document")
}

#[tokio::test]
async fn the_record_keeps_the_last_terms_and_an_observer_that_missed_some_is_told_and_goes_on() {
    let url = shared_url();
    let collection = unique("terms-kept");
    let backend = backend_at(&url, &collection).await;
    let (client, watcher) = (plain_client(&backend), plain_client(&backend));
    let name = unique("kept");

    let first = client
        .election(name.as_str())
        .unwrap()
        .campaign("first", PROMPTLY)
        .await
        .unwrap();
    let mut observer = watcher.election(name.as_str()).unwrap().observe();
    let seen = tokio::time::timeout(PROMPTLY, observer.next())
        .await
        .expect("the observer looks")
        .unwrap();
    assert_eq!((seen.value.as_str(), seen.term), ("first", first.term()));
    assert!(first.resign().await.unwrap());

    // More terms than the record keeps, while the observer looks away.
    let missed = 3;
    let mut terms = Vec::new();
    for round in 0..TERMS_KEPT + missed {
        terms.push(one_term(&client, &name, &format!("term-{round}")).await);
    }

    let raw = raw_collection(&inspector(&url).await, &collection);
    let stored = document(&raw, &name).await;
    assert_eq!(
        stored.get_array("terms").map(Vec::len),
        Ok(TERMS_KEPT),
        "{stored:?}"
    );
    let kept = &terms[missed..];
    let expected: Vec<_> = kept
        .iter()
        .zip(&terms[missed - 1..])
        .map(|(&term, &previous)| (term, Some(previous)))
        .collect();
    assert_eq!(terms_of(&recorded(&backend, &name).await), expected);

    match tokio::time::timeout(PROMPTLY, observer.next())
        .await
        .expect("the observer looks")
    {
        Err(Error::TermsForgotten {
            after,
            before,
            kept: told,
            ..
        }) => assert_eq!((after, before, told), (seen.term, kept[0], TERMS_KEPT)),
        other => panic!("the observer is told that it missed terms, not {other:?}"),
    }
    for (round, &term) in kept.iter().enumerate() {
        let leader = tokio::time::timeout(PROMPTLY, observer.next())
            .await
            .expect("the observer looks")
            .expect("the observer goes on after the forgotten terms");
        assert_eq!(
            (leader.value, leader.term),
            (format!("term-{}", round + missed), term)
        );
    }
}

#[tokio::test]
async fn a_grant_without_a_campaign_writes_no_term_and_keeps_the_record() {
    let url = shared_url();
    let collection = unique("terms-plain");
    let backend = backend_at(&url, &collection).await;
    let client = plain_client(&backend);
    // Names and values that would be expressions or field paths if they
    // were not stored as literals.
    let name = unique("$terms.$$NOW");
    let raw = raw_collection(&inspector(&url).await, &collection);

    let plain = client.acquire_with(name.as_str(), PROMPTLY).await.unwrap();
    assert!(plain.release().await.unwrap());
    let stored = document(&raw, &name).await;
    assert_eq!(stored.get("terms"), None, "{stored:?}");

    let first = one_term(&client, &name, "$$NOW").await;
    let plain = client.acquire_with(name.as_str(), PROMPTLY).await.unwrap();
    assert!(plain.fencing_token() > first);
    assert!(plain.release().await.unwrap());
    let second = one_term(&client, &name, "$terms").await;

    let terms = recorded(&backend, &name).await;
    assert_eq!(
        terms_of(&terms),
        vec![(first, None), (second, Some(first))],
        "the plain grant between them is no term, and the record outlived it"
    );
    let me = Holder::this_process(None);
    for (term, value) in terms.iter().zip(["$$NOW", "$terms"]) {
        assert_eq!(term.holder.label.as_deref(), Some(value));
        assert_eq!(
            (term.holder.host.as_str(), term.holder.pid),
            (me.host.as_str(), me.pid)
        );
    }
}

#[tokio::test]
async fn an_attempt_that_finds_the_election_held_writes_no_term() {
    let url = shared_url();
    let collection = unique("terms-held");
    let backend = backend_at(&url, &collection).await;
    let client = plain_client(&backend);
    let name = unique("held");
    let leading = client
        .election(name.as_str())
        .unwrap()
        .campaign("leader", PROMPTLY)
        .await
        .unwrap();

    for retries in [false, true] {
        let request = AcquireRequest {
            records_term: true,
            retries,
            ..AcquireRequest::new(
                distlock_core::LockName::new(name.as_str()).unwrap(),
                Claim::Exclusive,
                Duration::from_secs(30),
                Arc::new(Holder::this_process(Some("rival"))),
            )
        };
        let mut wait = WaitState::new();
        let attempt = backend.try_acquire(&request, &mut wait).await.unwrap();
        assert!(matches!(attempt, Attempt::Held { .. }), "{attempt:?}");
        backend.end_wait(&request, wait).await.unwrap();
    }
    assert_eq!(
        terms_of(&recorded(&backend, &name).await),
        vec![(leading.term(), None)]
    );
    assert!(leading.resign().await.unwrap());
}

#[tokio::test]
async fn a_deleted_document_starts_the_record_afresh_with_no_previous_term() {
    let url = shared_url();
    let collection = unique("terms-deleted");
    let backend = backend_at(&url, &collection).await;
    let client = plain_client(&backend);
    let name = unique("deleted");
    let raw = raw_collection(&inspector(&url).await, &collection);

    let before = one_term(&client, &name, "before").await;
    // As the TTL monitor deletes a document once it is free.
    let deleted = raw.delete_one(doc! { "_id": name.as_str() }).await.unwrap();
    assert_eq!(deleted.deleted_count, 1);
    let after = one_term(&client, &name, "after").await;

    assert!(after > before, "tokens still increase");
    assert_eq!(
        terms_of(&recorded(&backend, &name).await),
        vec![(after, None)]
    );
}

#[tokio::test]
async fn a_record_edited_into_another_shape_is_named_in_the_error() {
    let url = shared_url();
    let collection = unique("terms-edited");
    let backend = backend_at(&url, &collection).await;
    let client = plain_client(&backend);
    let name = unique("edited");
    let raw = raw_collection(&inspector(&url).await, &collection);
    let first = one_term(&client, &name, "first").await;
    raw.update_one(
        doc! { "_id": name.as_str() },
        doc! { "$set": { "terms.0.term": "not a number" } },
    )
    .await
    .unwrap();

    let log = backend.term_log().unwrap();
    let name = distlock_core::LockName::new(name.as_str()).unwrap();
    match log.terms_after(&name, 0, ADMIN_LIMIT).await {
        Err(Error::InvalidData { field, .. }) => assert_eq!(field, "terms.0"),
        other => panic!("a malformed entry is invalid data, not {other:?}"),
    }
    // A record that is not an array at all counts as none for the next
    // campaign, which starts it afresh.
    raw.update_one(
        doc! { "_id": name.as_str() },
        doc! { "$set": { "terms": Bson::String("edited".into()) } },
    )
    .await
    .unwrap();
    let next = one_term(&client, name.as_str(), "next").await;
    assert!(next > first);
    assert_eq!(
        terms_of(&log.terms_after(&name, 0, ADMIN_LIMIT).await.unwrap()),
        vec![(next, None)]
    );
}

//! Resuming a grant by its identity, on the real stores (Azurite and
//! moto), for what the conformance suite cannot reach: the store's stamps
//! judged at a lease's end without waiting for it (a view of the store
//! whose clock jumps), a read that comes just before the object changes,
//! a handle whose token or claim is not the grant's, stamps that cannot
//! show a lease, and a resume's write whose answer was lost or met a
//! conflict.

#[macro_use]
mod support;

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use distlock_core::backend::{
    AcquireRequest, Backend, BackendExt, GrantState, Lease, Resumes, Resuming,
};
use distlock_core::testing::{try_grant, unique_name, waiting_request};
use distlock_core::{Claim, Error, LockName};
use distlock_objectstore::ObjectStoreBackend;

use support::{AlteredView, Fault, Faults, prefix_of, raw_store};

on_every_store!(
    a_resume_keeps_the_token_and_takes_the_grant_from_its_old_identity,
    a_grant_past_its_lease_by_the_stores_stamps_is_freed_not_resumed,
    a_grant_stamped_seconds_ago_but_within_its_lease_is_resumed,
    a_resume_that_read_a_version_since_replaced_changes_nothing,
    a_handle_with_another_token_or_claim_changes_nothing,
    stamps_that_cannot_show_a_lease_are_refused_and_change_nothing,
    a_resume_whose_answer_was_lost_or_met_a_conflict_holds,
);

/// Long enough that the real time between a grant and its resume in these
/// tests (a few requests) never matters: only the jumps of the view do.
const LEASE: Duration = Duration::from_secs(20);

async fn open(url: &str) -> ObjectStoreBackend {
    ObjectStoreBackend::open(url)
        .await
        .expect("the backend opens")
}

/// A backend that sees the store through an [`AlteredView`].
async fn open_altered(url: &str) -> (ObjectStoreBackend, Arc<AlteredView>) {
    let view = AlteredView::new(raw_store(url));
    let backend = ObjectStoreBackend::builder(view.clone())
        .prefix(prefix_of(url))
        .build()
        .await
        .expect("the backend opens");
    (backend, view)
}

fn resumes(backend: &ObjectStoreBackend) -> &dyn Resumes {
    match backend.abilities().resumes {
        Resuming::By(resumes) => resumes,
        Resuming::Never(why) => panic!("the backend does not resume: {why}"),
    }
}

/// The lease a handle of `granted` names: its name, claim, identity and
/// token, and none of its state.
fn handle_of(granted: &Lease) -> Lease {
    Lease {
        state: GrantState::default(),
        ..granted.clone()
    }
}

/// A new identity's request for `old`'s lock.
fn resuming(old: &Lease, label: &str) -> AcquireRequest {
    waiting_request(&old.name, LEASE, label)
}

/// Resumes `old` on `backend` for a new identity: the resumed lease, or
/// `None` when the backend answered that the grant is gone.
async fn resume(backend: &ObjectStoreBackend, old: &Lease, label: &str) -> Option<Lease> {
    let request = resuming(old, label);
    resumes(backend)
        .resume(&handle_of(old), &request)
        .await
        .expect("the resume answers")
        .map(|state| request.granted(old.fencing_token, state))
}

async fn granted(backend: &ObjectStoreBackend, name: &LockName, label: &str) -> Lease {
    try_grant(backend, &waiting_request(name, LEASE, label))
        .await
        .unwrap()
        .expect("a free lock is granted")
}

fn lock_path(backend: &ObjectStoreBackend, name: &LockName) -> Path {
    Path::parse(backend.lock_key(name)).expect("a valid key")
}

/// The lock object's body as the store holds it.
async fn body(raw: &dyn ObjectStore, path: &Path) -> serde_json::Value {
    let bytes = raw.get(path).await.unwrap().bytes().await.unwrap();
    serde_json::from_slice(&bytes).expect("a JSON record")
}

/// Asserts that the store holds `name` for nobody, keeping `token`: a
/// fresh client is granted it at once, with a greater token.
async fn assert_free(backend: &ObjectStoreBackend, name: &LockName, token: u64) {
    let next = try_grant(backend, &waiting_request(name, LEASE, "next"))
        .await
        .unwrap()
        .expect("the lock is free");
    assert!(
        next.fencing_token > token,
        "{} after {token}",
        next.fencing_token
    );
    assert!(backend.release(&next).await.unwrap());
}

async fn a_resume_keeps_the_token_and_takes_the_grant_from_its_old_identity(url: &str) {
    let (old_run, new_run, other) = (open(url).await, open(url).await, open(url).await);
    let name = unique_name("resume");
    let old = granted(&old_run, &name, "old").await;
    let resumed = resume(&new_run, &old, "new")
        .await
        .expect("a held grant is resumed");
    assert_eq!(resumed.fencing_token, old.fencing_token);
    assert_ne!(resumed.id, old.id);
    let stored = body(&*raw_store(url), &lock_path(&new_run, &name)).await;
    assert_eq!(stored["token"], old.fencing_token);
    assert_eq!(stored["grant"]["holder"]["label"], "new", "{stored}");
    assert_eq!(stored["grant"]["lease_ms"], LEASE.as_millis() as u64);
    assert!(
        try_grant(&other, &waiting_request(&name, LEASE, "other"))
            .await
            .unwrap()
            .is_none(),
        "the resumed grant holds the lock"
    );
    assert!(
        !old_run.extend(&old).await.unwrap(),
        "the old identity's extension finds the grant gone"
    );
    assert!(!old_run.release(&old).await.unwrap());
    assert!(
        resume(&other, &old, "again").await.is_none(),
        "a second resume of the same handle finds it gone"
    );
    assert!(
        new_run.extend(&resumed).await.unwrap(),
        "the new one extends"
    );
    assert!(new_run.release(&resumed).await.unwrap());
    assert_free(&other, &name, old.fencing_token).await;
}

async fn a_grant_past_its_lease_by_the_stores_stamps_is_freed_not_resumed(url: &str) {
    let old_run = open(url).await;
    let (new_run, view) = open_altered(url).await;
    let name = unique_name("resume-ran-out");
    let old = granted(&old_run, &name, "old").await;
    // The resume's own write reads stamped a lease after the old grant's:
    // the old grant's lease ran out before the store took it.
    view.clock_jumps(LEASE);
    assert!(
        resume(&new_run, &old, "new").await.is_none(),
        "a grant past its lease by the store's stamps is not resumed"
    );
    let stored = body(&*raw_store(url), &lock_path(&old_run, &name)).await;
    assert!(stored.get("grant").is_none(), "freed: {stored}");
    assert_eq!(stored["token"], old.fencing_token, "keeping the token");
    assert!(
        !old_run.extend(&old).await.unwrap(),
        "the old identity finds it gone"
    );
    assert_free(&old_run, &name, old.fencing_token).await;
}

async fn a_grant_stamped_seconds_ago_but_within_its_lease_is_resumed(url: &str) {
    let old_run = open(url).await;
    let (new_run, view) = open_altered(url).await;
    let name = unique_name("resume-in-time");
    let old = granted(&old_run, &name, "old").await;
    // Stamped half a lease after the old grant's last write: well within
    // its lease, whatever the stamps' rounding.
    view.clock_jumps(LEASE / 2);
    let resumed = resume(&new_run, &old, "new")
        .await
        .expect("a grant within its lease by the store's stamps is resumed");
    assert_eq!(resumed.fencing_token, old.fencing_token);
    assert!(!old_run.extend(&old).await.unwrap());
    assert!(new_run.extend(&resumed).await.unwrap());
    assert!(new_run.release(&resumed).await.unwrap());
}

/// The old holder releases (or is taken over) between the resume's read
/// and its write: the write, made on the version read, must not land.
async fn a_resume_that_read_a_version_since_replaced_changes_nothing(url: &str) {
    let old_run = open(url).await;
    let (new_run, view) = open_altered(url).await;
    let name = unique_name("resume-stale");
    let old = granted(&old_run, &name, "old").await;
    let path = lock_path(&old_run, &name);
    view.replay_next_read(&path).await;
    assert!(old_run.release(&old).await.unwrap());
    let after_release = body(&*raw_store(url), &path).await;
    assert!(
        resume(&new_run, &old, "new").await.is_none(),
        "a grant released after the resume's read is not resumed"
    );
    assert_eq!(
        body(&*raw_store(url), &path).await,
        after_release,
        "the free record stays as the release left it"
    );
    assert_free(&old_run, &name, old.fencing_token).await;
}

async fn a_handle_with_another_token_or_claim_changes_nothing(url: &str) {
    let (old_run, new_run) = (open(url).await, open(url).await);
    let name = unique_name("resume-mismatch");
    let old = granted(&old_run, &name, "old").await;
    let path = lock_path(&old_run, &name);
    let stored = body(&*raw_store(url), &path).await;
    let wrong = [
        Lease {
            fencing_token: old.fencing_token + 1,
            ..old.clone()
        },
        Lease {
            fencing_token: old.fencing_token - 1,
            ..old.clone()
        },
        Lease {
            claim: Claim::Shared,
            ..old.clone()
        },
        Lease {
            claim: Claim::Permit { limit: 1 },
            ..old.clone()
        },
    ];
    for handle in wrong {
        assert!(
            resume(&new_run, &handle, "new").await.is_none(),
            "{} with token {} resumed a grant of token {}",
            handle.claim,
            handle.fencing_token,
            old.fencing_token
        );
    }
    assert_eq!(body(&*raw_store(url), &path).await, stored, "unchanged");
    assert!(old_run.extend(&old).await.unwrap(), "the holder keeps it");
    assert!(old_run.release(&old).await.unwrap());
}

async fn stamps_that_cannot_show_a_lease_are_refused_and_change_nothing(url: &str) {
    let old_run = open(url).await;
    let (new_run, view) = open_altered(url).await;
    // A lease shorter than the stamps' second.
    let name = unique_name("resume-short");
    let short = Duration::from_millis(900);
    let old = try_grant(&old_run, &waiting_request(&name, short, "old"))
        .await
        .unwrap()
        .expect("granted");
    let refused = resumes(&new_run)
        .resume(&handle_of(&old), &resuming(&old, "new"))
        .await;
    match refused {
        Err(Error::Unsupported(why)) => assert!(why.contains("second"), "{why}"),
        other => panic!("a sub-second lease was not refused: {other:?}"),
    }
    assert!(old_run.extend(&old).await.unwrap(), "the holder keeps it");
    assert!(old_run.release(&old).await.unwrap());
    // A store that gives no Last-Modified.
    let name = unique_name("resume-unstamped");
    let old = granted(&old_run, &name, "old").await;
    view.without_stamps();
    let refused = resumes(&new_run)
        .resume(&handle_of(&old), &resuming(&old, "new"))
        .await;
    match refused {
        Err(Error::Unsupported(why)) => assert!(why.contains("Last-Modified"), "{why}"),
        other => panic!("a store without stamps was not refused: {other:?}"),
    }
    assert!(old_run.extend(&old).await.unwrap(), "the holder keeps it");
    assert!(old_run.release(&old).await.unwrap());
}

async fn a_resume_whose_answer_was_lost_or_met_a_conflict_holds(url: &str) {
    let old_run = open(url).await;
    let faults = Faults::default();
    let config = distlock_objectstore::ObjectStoreConfig::parse(url)
        .unwrap()
        .http_connector(faults.clone());
    let new_run = ObjectStoreBackend::connect(config).await.unwrap();
    for fault in [Fault::LoseAnswer, Fault::Conflict] {
        let name = unique_name("resume-fault");
        let old = granted(&old_run, &name, "old").await;
        faults.next(fault, 1);
        let resumed = resume(&new_run, &old, "new")
            .await
            .unwrap_or_else(|| panic!("{fault:?}: the resume holds"));
        assert_eq!(faults.left(), 0, "{fault:?} was injected");
        assert_eq!(resumed.fencing_token, old.fencing_token);
        assert!(!old_run.extend(&old).await.unwrap(), "{fault:?}");
        assert!(new_run.extend(&resumed).await.unwrap(), "{fault:?}");
        assert!(new_run.release(&resumed).await.unwrap(), "{fault:?}");
    }
}

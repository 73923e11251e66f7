//! Readers, permits and waiting writers' marks, as stored on a real server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend, Lease, LeaseId, WaitState};
use distlock_core::testing::try_grant;
use distlock_core::{
    AcquireOptions, Claim, Error, Holder, LockKind, LockName, LockOptions, Permits,
};
use distlock_mongodb::mongodb::Collection;
use distlock_mongodb::mongodb::bson::{Bson, DateTime, Document, doc};
use distlock_mongodb::{MongoBackend, MongoConfig};

use crate::common::*;
use distlock_core::testing::ADMIN_LIMIT;

/// A request for `claim` on `name`, as core would send it.
fn request(name: &LockName, claim: Claim, lease: Duration) -> AcquireRequest {
    AcquireRequest::new(
        name.clone(),
        claim,
        lease,
        Holder::this_process(Some("kinds")).into(),
    )
}

/// Takes `claim` on `name` with one attempt, which must succeed.
async fn take(backend: &MongoBackend, name: &LockName, claim: Claim, lease: Duration) -> Lease {
    try_grant(backend, &request(name, claim, lease))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{claim} on {name} was expected free, but is held"))
}

/// Whether one attempt at `claim` on `name` finds it held.
async fn is_held(backend: &MongoBackend, name: &LockName, claim: Claim) -> bool {
    let request = request(name, claim, Duration::from_secs(30));
    match backend
        .try_acquire(&request, &mut WaitState::new())
        .await
        .unwrap()
    {
        Attempt::Held { .. } => true,
        Attempt::Acquired {
            fencing_token,
            state,
        } => {
            assert!(
                backend
                    .release(&request.granted(fencing_token, state))
                    .await
                    .unwrap()
            );
            false
        }
    }
}

async fn stored(raw: &Collection<Document>, name: &LockName) -> Document {
    raw.find_one(doc! { "_id": name.as_str() })
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no document for {name}"))
}

fn ids(document: &Document, field: &str) -> Vec<String> {
    document
        .get_array(field)
        .map(|entries| {
            entries
                .iter()
                .filter_map(|entry| entry.as_document()?.get_str("id").ok())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn hex(lease: &Lease) -> String {
    format!("{:032x}", lease.id.as_u128())
}

#[tokio::test]
async fn an_exclusive_document_of_the_earlier_shape_still_works() {
    let url = shared_url();
    let collection = unique("old-shape");
    let backend = backend_at(&url, &collection).await;
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let name = lock_name("old-shape");
    // Held, as an earlier version of this backend wrote it.
    let token = DateTime::now().timestamp_millis() + 60_000;
    raw.insert_one(doc! {
        "_id": name.as_str(),
        "lockId": "00112233445566778899aabbccddeeff",
        "fencingToken": token,
        "acquiredAt": DateTime::now(),
        "expiresAt": DateTime::from_millis(DateTime::now().timestamp_millis() + 30_000),
        "holder": { "host": "old", "pid": 1_i64, "label": Bson::Null },
    })
    .await
    .unwrap();
    assert!(is_held(&backend, &name, Claim::Exclusive).await);
    assert!(is_held(&backend, &name, Claim::Shared).await);
    let permit = request(&name, Claim::Permit { limit: 2 }, Duration::from_secs(30));
    match backend.try_acquire(&permit, &mut WaitState::new()).await {
        Err(Error::KindConflict { held, .. }) => assert_eq!(held, Claim::Exclusive),
        other => panic!("a permit of an old exclusive grant must conflict, got {other:?}"),
    }
    let listed = backend.list(ADMIN_LIMIT).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].kind, LockKind::Exclusive);
    assert_eq!(listed[0].fencing_token, Some(token as u64));
    assert_eq!(listed[0].holder.as_ref().unwrap().host, "old");

    // Released as the earlier version released it.
    raw.update_one(
        doc! { "_id": name.as_str() },
        vec![
            doc! { "$set": { "expiresAt": "$$NOW" } },
            doc! { "$unset": ["lockId"] },
        ],
    )
    .await
    .unwrap();
    let reader = take(&backend, &name, Claim::Shared, Duration::from_secs(30)).await;
    assert!(reader.fencing_token > token as u64);
    assert!(backend.release(&reader).await.unwrap());
    let writer = take(&backend, &name, Claim::Exclusive, Duration::from_secs(30)).await;
    assert!(writer.fencing_token > reader.fencing_token);
    // An exclusive grant keeps the earlier shape exactly.
    let held = stored(&raw, &name).await;
    let fields: Vec<&str> = held.keys().map(String::as_str).collect();
    assert_eq!(
        fields,
        [
            "_id",
            "lockId",
            "fencingToken",
            "acquiredAt",
            "expiresAt",
            "holder"
        ]
    );
    assert!(backend.release(&writer).await.unwrap());
}

#[tokio::test]
async fn readers_and_permits_leave_the_documented_shape() {
    let url = shared_url();
    let collection = unique("kind-shape");
    let backend = backend_at(&url, &collection).await;
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let lease = Duration::from_secs(30);

    let name = lock_name("readers");
    let long_label = "é".repeat(200);
    let labelled = AcquireRequest::new(
        name.clone(),
        Claim::Shared,
        Duration::from_secs(60),
        Holder::this_process(Some(&long_label)).into(),
    );
    let first = try_grant(&*backend, &labelled)
        .await
        .unwrap()
        .expect("a fresh name admits a reader");
    let second = take(&backend, &name, Claim::Shared, lease).await;
    let held = stored(&raw, &name).await;
    assert_eq!(held.get_str("lockId").unwrap(), "shared", "{held:?}");
    assert!(held.get("limit").is_none(), "{held:?}");
    assert_eq!(ids(&held, "holders"), [hex(&first), hex(&second)]);
    let entries = held.get_array("holders").unwrap();
    let mut latest = 0;
    for (entry, lease) in entries.iter().zip([&first, &second]) {
        let entry = entry.as_document().unwrap();
        assert_eq!(
            entry.get("fencingToken"),
            Some(&Bson::Int64(lease.fencing_token as i64))
        );
        let acquired = entry.get_datetime("acquiredAt").unwrap().timestamp_millis();
        let expires = entry.get_datetime("expiresAt").unwrap().timestamp_millis();
        assert_eq!(expires - acquired, lease.lease.as_millis() as i64);
        latest = latest.max(expires);
        let holder = entry.get_document("holder").unwrap();
        assert_eq!(
            holder.get_str("host").unwrap(),
            Holder::this_process(None).host
        );
    }
    // The label is cut to 255 bytes, at a character boundary.
    let label = entries[0]
        .as_document()
        .unwrap()
        .get_document("holder")
        .unwrap()
        .get_str("label")
        .unwrap();
    assert_eq!(label.len(), 254);
    assert!(long_label.starts_with(label));
    assert_eq!(
        held.get_datetime("expiresAt").unwrap().timestamp_millis(),
        latest,
        "expiresAt is the latest entry's"
    );
    assert_eq!(
        held.get("fencingToken"),
        Some(&Bson::Int64(second.fencing_token as i64))
    );
    assert!(backend.release(&first).await.unwrap());
    assert!(backend.release(&second).await.unwrap());
    let free = stored(&raw, &name).await;
    for gone in ["lockId", "holders", "limit", "waiting"] {
        assert!(free.get(gone).is_none(), "{gone} is left: {free:?}");
    }
    assert_eq!(
        free.get("fencingToken"),
        Some(&Bson::Int64(second.fencing_token as i64)),
        "the token stays"
    );

    let name = lock_name("permits");
    let permit = take(&backend, &name, Claim::Permit { limit: 3 }, lease).await;
    let held = stored(&raw, &name).await;
    assert_eq!(held.get_str("lockId").unwrap(), "permits");
    assert_eq!(held.get("limit"), Some(&Bson::Int64(3)));
    assert_eq!(ids(&held, "holders"), [hex(&permit)]);
    assert!(backend.release(&permit).await.unwrap());
}

#[tokio::test]
async fn a_vanished_writers_mark_holds_readers_back_for_one_lease_by_the_servers_clock() {
    let url = shared_url();
    let collection = unique("mark");
    let backend = backend_at(&url, &collection).await;
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let name = lock_name("mark");
    let inside = take(&backend, &name, Claim::Shared, Duration::from_secs(60)).await;

    // A writer asks once, as a wait that will try again, and vanishes: it
    // never ends its wait.
    let writer_lease = Duration::from_secs(2);
    let mut writer = request(&name, Claim::Exclusive, writer_lease);
    writer.retries = true;
    let mut wait = WaitState::new();
    let attempt = backend.try_acquire(&writer, &mut wait).await.unwrap();
    let marked_at = Instant::now();
    let Attempt::Held { retry_after } = attempt else {
        panic!("the reader inside keeps the writer out, got {attempt:?}");
    };
    assert!(
        retry_after.is_some_and(|after| after <= writer_lease / 2),
        "a marked writer tries again within half its lease: {retry_after:?}"
    );
    assert!(!wait.is_empty(), "the wait keeps its mark");
    drop(wait);

    // The mark lasts the writer's lease from the server's now.
    let held = stored(&raw, &name).await;
    let marks = held.get_array("waiting").expect("the writer's mark");
    assert_eq!(marks.len(), 1, "{held:?}");
    let mark_ends = marks[0]
        .as_document()
        .unwrap()
        .get_datetime("expiresAt")
        .unwrap()
        .timestamp_millis();
    let now = server_now(&raw).await.timestamp_millis();
    let left = mark_ends - now;
    assert!(
        left > 0 && left <= writer_lease.as_millis() as i64,
        "the mark ends {left} ms from the server's now"
    );

    // New readers wait while the mark lives; the reader inside stays.
    assert!(is_held(&backend, &name, Claim::Shared).await);
    let readers = client(backend.clone(), short_lease(Duration::from_secs(30)));
    let late = readers
        .acquire_with(
            &name,
            AcquireOptions::new()
                .shared()
                .timeout(Duration::from_secs(20)),
        )
        .await
        .expect("a reader gets in once the mark expired");
    let waited = marked_at.elapsed();
    assert!(
        waited >= writer_lease - Duration::from_millis(500),
        "the mark held the reader back for {waited:?} only"
    );
    assert!(
        waited < writer_lease + Duration::from_secs(3),
        "the mark held the reader back for {waited:?}, beyond the writer's lease"
    );
    assert!(
        backend.extend(&inside).await.unwrap(),
        "the reader inside stayed"
    );
    let held = stored(&raw, &name).await;
    assert!(
        held.get("waiting").is_none(),
        "the expired mark is dropped: {held:?}"
    );
    assert!(late.release().await.unwrap());
    assert!(backend.release(&inside).await.unwrap());
}

#[tokio::test]
async fn a_writer_that_ends_its_wait_takes_its_mark_away() {
    let url = shared_url();
    let collection = unique("unmark");
    let backend = backend_at(&url, &collection).await;
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let name = lock_name("unmark");
    let inside = take(&backend, &name, Claim::Shared, Duration::from_secs(60)).await;
    let mut writer = request(&name, Claim::Exclusive, Duration::from_secs(60));
    writer.retries = true;
    let mut wait = WaitState::new();
    assert!(matches!(
        backend.try_acquire(&writer, &mut wait).await.unwrap(),
        Attempt::Held { .. }
    ));
    // A second attempt of the same wait refreshes its mark, not adds one.
    assert!(matches!(
        backend.try_acquire(&writer, &mut wait).await.unwrap(),
        Attempt::Held { .. }
    ));
    assert_eq!(ids(&stored(&raw, &name).await, "waiting").len(), 1);
    assert!(is_held(&backend, &name, Claim::Shared).await);
    backend.end_wait(&writer, wait).await.unwrap();
    assert!(stored(&raw, &name).await.get("waiting").is_none());
    let reader = take(&backend, &name, Claim::Shared, Duration::from_secs(30)).await;
    assert!(backend.release(&reader).await.unwrap());

    // A single try (no retries) leaves no mark at all.
    let single = request(&name, Claim::Exclusive, Duration::from_secs(60));
    let mut wait = WaitState::new();
    assert!(matches!(
        backend.try_acquire(&single, &mut wait).await.unwrap(),
        Attempt::Held { .. }
    ));
    assert!(wait.is_empty());
    assert!(stored(&raw, &name).await.get("waiting").is_none());
    assert!(backend.release(&inside).await.unwrap());
}

#[tokio::test]
async fn a_stale_release_of_a_reader_leaves_the_other_readers() {
    let url = shared_url();
    let collection = unique("stale-reader");
    let backend = backend_at(&url, &collection).await;
    let name = lock_name("stale-reader");
    let brief = take(&backend, &name, Claim::Shared, Duration::from_millis(400)).await;
    let staying = take(&backend, &name, Claim::Shared, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;

    assert!(!backend.release(&brief).await.unwrap(), "its lease ran out");
    assert!(!backend.extend(&brief).await.unwrap());
    assert!(!backend.release(&brief).await.unwrap());
    let listed = backend.list(ADMIN_LIMIT).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].kind, LockKind::Shared);
    assert_eq!(listed[0].fencing_token, Some(staying.fencing_token));
    assert!(is_held(&backend, &name, Claim::Exclusive).await);
    assert!(backend.extend(&staying).await.unwrap());
    // A stale release of the other kind's lease, or with another identity,
    // changes nothing either.
    let mut stranger = staying.clone();
    stranger.id = LeaseId::random();
    assert!(!backend.release(&stranger).await.unwrap());
    let mut as_permit = staying.clone();
    as_permit.claim = Claim::Permit { limit: 2 };
    assert!(!backend.release(&as_permit).await.unwrap());
    assert!(is_held(&backend, &name, Claim::Exclusive).await);

    assert!(backend.release(&staying).await.unwrap());
    assert!(!is_held(&backend, &name, Claim::Exclusive).await);
}

#[tokio::test]
async fn a_forced_release_clears_every_holder() {
    let url = shared_url();
    let collection = unique("force-kinds");
    let backend = backend_at(&url, &collection).await;
    let other = backend_at(&url, &collection).await;
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let lease = Duration::from_secs(30);

    let semaphore = lock_name("force-permits");
    let permits = vec![
        take(&backend, &semaphore, Claim::Permit { limit: 3 }, lease).await,
        take(&other, &semaphore, Claim::Permit { limit: 3 }, lease).await,
        take(&other, &semaphore, Claim::Permit { limit: 3 }, lease).await,
    ];
    assert!(is_held(&backend, &semaphore, Claim::Permit { limit: 3 }).await);
    assert!(
        backend
            .force_release(&semaphore, ADMIN_LIMIT)
            .await
            .unwrap()
    );
    assert!(
        !backend
            .force_release(&semaphore, ADMIN_LIMIT)
            .await
            .unwrap()
    );
    let cleared = stored(&raw, &semaphore).await;
    for gone in ["lockId", "holders", "limit"] {
        assert!(cleared.get(gone).is_none(), "{gone} is left: {cleared:?}");
    }
    for outcome in other.extend_many(&permits).await.outcomes {
        assert!(!outcome.unwrap());
    }
    for permit in &permits {
        assert!(!backend.extend(permit).await.unwrap());
        assert!(!backend.release(permit).await.unwrap());
    }
    assert!(backend.list(ADMIN_LIMIT).await.unwrap().is_empty());
    // Free, the name takes any limit again.
    let again = take(&backend, &semaphore, Claim::Permit { limit: 5 }, lease).await;
    assert!(again.fencing_token > permits[2].fencing_token);
    assert!(backend.release(&again).await.unwrap());

    // Readers go; a waiting writer's mark stays, and still keeps new readers
    // out until the writer is served.
    let name = lock_name("force-readers");
    let readers = [
        take(&backend, &name, Claim::Shared, lease).await,
        take(&other, &name, Claim::Shared, lease).await,
    ];
    let mut writer = request(&name, Claim::Exclusive, lease);
    writer.retries = true;
    let mut wait = WaitState::new();
    assert!(matches!(
        other.try_acquire(&writer, &mut wait).await.unwrap(),
        Attempt::Held { .. }
    ));
    assert!(other.force_release(&name, ADMIN_LIMIT).await.unwrap());
    for reader in &readers {
        assert!(!backend.extend(reader).await.unwrap());
    }
    assert!(is_held(&backend, &name, Claim::Shared).await);
    let Attempt::Acquired {
        fencing_token,
        state,
    } = other.try_acquire(&writer, &mut wait).await.unwrap()
    else {
        panic!("the waiting writer gets the freed name");
    };
    assert!(wait.is_empty(), "the grant took the writer's mark");
    let granted = writer.granted(fencing_token, state);
    assert!(stored(&raw, &name).await.get("waiting").is_none());
    assert!(other.release(&granted).await.unwrap());
}

#[tokio::test]
async fn list_shows_each_reader_and_permit_with_its_kind() {
    let url = shared_url();
    let backend = backend_at(&url, &unique("list-kinds")).await;
    let lease = Duration::from_secs(30);
    let readers_name = lock_name("a-readers");
    let semaphore = lock_name("b-semaphore");
    let writer_name = lock_name("c-writer");
    let readers = [
        take(&backend, &readers_name, Claim::Shared, lease).await,
        take(&backend, &readers_name, Claim::Shared, lease).await,
    ];
    let permits = [
        take(&backend, &semaphore, Claim::Permit { limit: 4 }, lease).await,
        take(&backend, &semaphore, Claim::Permit { limit: 4 }, lease).await,
        take(&backend, &semaphore, Claim::Permit { limit: 4 }, lease).await,
    ];
    let writer = take(&backend, &writer_name, Claim::Exclusive, lease).await;
    let listed = backend.list(ADMIN_LIMIT).await.unwrap();
    let rows: Vec<(&str, LockKind, Option<Permits>, Option<u64>)> = listed
        .iter()
        .map(|info| {
            (
                info.name.as_str(),
                info.kind,
                info.permits,
                info.fencing_token,
            )
        })
        .collect();
    let in_use = Some(Permits {
        in_use: 3,
        limit: 4,
    });
    assert_eq!(
        rows,
        [
            (
                readers_name.as_str(),
                LockKind::Shared,
                None,
                Some(readers[0].fencing_token)
            ),
            (
                readers_name.as_str(),
                LockKind::Shared,
                None,
                Some(readers[1].fencing_token)
            ),
            (
                semaphore.as_str(),
                LockKind::Semaphore,
                in_use,
                Some(permits[0].fencing_token)
            ),
            (
                semaphore.as_str(),
                LockKind::Semaphore,
                in_use,
                Some(permits[1].fencing_token)
            ),
            (
                semaphore.as_str(),
                LockKind::Semaphore,
                in_use,
                Some(permits[2].fencing_token)
            ),
            (
                writer_name.as_str(),
                LockKind::Exclusive,
                None,
                Some(writer.fencing_token)
            ),
        ]
    );
    for info in &listed {
        assert_eq!(info.holder, Some(Holder::this_process(Some("kinds"))));
        let left = info.expires_in.unwrap();
        assert!(left > Duration::ZERO && left <= lease, "{left:?}");
    }
    for lease in readers.iter().chain(&permits).chain([&writer]) {
        assert!(backend.release(lease).await.unwrap());
    }
    assert!(backend.list(ADMIN_LIMIT).await.unwrap().is_empty());
}

#[tokio::test]
async fn extend_many_extends_several_entries_of_one_name_and_reports_the_lost() {
    let url = shared_url();
    let collection = unique("bulk-kinds");
    let backend = backend_at(&url, &collection).await;
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let lease = Duration::from_secs(30);
    let semaphore = lock_name("bulk-permits");
    let readers = lock_name("bulk-readers");
    let writer = lock_name("bulk-writer");
    let leases = vec![
        take(&backend, &semaphore, Claim::Permit { limit: 5 }, lease).await,
        take(&backend, &semaphore, Claim::Permit { limit: 5 }, lease).await,
        take(&backend, &semaphore, Claim::Permit { limit: 5 }, lease).await,
        take(&backend, &readers, Claim::Shared, lease).await,
        take(
            &backend,
            &readers,
            Claim::Shared,
            Duration::from_millis(300),
        )
        .await,
        take(&backend, &writer, Claim::Exclusive, lease).await,
    ];
    assert!(backend.release(&leases[1]).await.unwrap());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let expiry = |document: &Document, id: &str| {
        document
            .get_array("holders")
            .unwrap()
            .iter()
            .filter_map(Bson::as_document)
            .find(|entry| entry.get_str("id").ok() == Some(id))
            .map(|entry| entry.get_datetime("expiresAt").unwrap().timestamp_millis())
    };
    let before = stored(&raw, &semaphore).await;
    let outcomes: Vec<bool> = backend
        .extend_many(&leases)
        .await
        .outcomes
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(outcomes, [true, false, true, true, false, true]);
    let after = stored(&raw, &semaphore).await;
    for kept in [&leases[0], &leases[2]] {
        assert!(expiry(&after, &hex(kept)) > expiry(&before, &hex(kept)));
    }
    assert_eq!(
        after.get_datetime("expiresAt").unwrap().timestamp_millis(),
        expiry(&after, &hex(&leases[2]))
            .unwrap()
            .max(expiry(&after, &hex(&leases[0])).unwrap())
    );
    // One lease per name: the count alone proves them all extended.
    let one_each = [leases[0].clone(), leases[3].clone(), leases[5].clone()];
    assert!(
        backend
            .extend_many(&one_each)
            .await
            .outcomes
            .into_iter()
            .all(|outcome| outcome.unwrap())
    );
    for (lease, live) in leases.iter().zip(outcomes) {
        assert_eq!(backend.release(lease).await.unwrap(), live);
    }
}

#[tokio::test]
async fn an_uncontended_reader_or_permit_costs_two_commands_as_a_lock_does() {
    let url = shared_url();
    let (commands, driver) = Commands::counted_client(&url).await;
    // Without the release watcher, whose change stream (one per backend,
    // open while anything waits) would race with the count.
    let backend = Arc::new(
        MongoBackend::connect(
            MongoConfig::new(driver)
                .database("distlock_test")
                .collection(unique("commands"))
                .release_wakeups(false),
        )
        .await
        .unwrap(),
    );
    let locks = client(backend, LockOptions::default());
    let expected: BTreeMap<String, u64> =
        [("findAndModify".to_owned(), 1), ("update".to_owned(), 1)].into();
    for claim in [Claim::Exclusive, Claim::Shared, Claim::Permit { limit: 3 }] {
        let name = lock_name("commands");
        commands.take();
        let guard = locks
            .try_acquire_with(&name, claim)
            .await
            .unwrap()
            .expect("free");
        assert!(guard.release().await.unwrap());
        assert_eq!(commands.take(), expected, "{claim}");
        // A waiting acquire that is granted at once costs the same.
        let guard = locks
            .acquire_with(
                &name,
                AcquireOptions::new()
                    .claim(claim)
                    .timeout(Duration::from_secs(5)),
            )
            .await
            .unwrap();
        assert!(guard.release().await.unwrap());
        assert_eq!(commands.take(), expected, "{claim}, waited for");
    }
}

#[tokio::test]
async fn releases_wake_waiters_of_every_kind() {
    let url = shared_url();
    let collection = unique("wake-kinds");
    let long = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .build()
        .unwrap();
    let holder = client(backend_at(&url, &collection).await, long.clone());
    let waiter = client(backend_at(&url, &collection).await, long.clone());
    let wait_for = |name: &LockName, claim: Claim| {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move {
            waiter
                .acquire_with(&name, AcquireOptions::new().claim(claim).timeout(PATIENCE))
                .await
        })
    };
    let settle = || tokio::time::sleep(Duration::from_millis(300));

    // A permit's release frees a place for a waiting permit.
    let name = lock_name("wake-permit");
    let first = holder
        .acquire_with(&name, AcquireOptions::new().permit(2).timeout(PATIENCE))
        .await
        .unwrap();
    let second = holder
        .acquire_with(&name, AcquireOptions::new().permit(2).timeout(PATIENCE))
        .await
        .unwrap();
    let waiting = wait_for(&name, Claim::Permit { limit: 2 });
    settle().await;
    assert!(!waiting.is_finished());
    assert!(first.release().await.unwrap());
    assert!(woken(waiting).await.release().await.unwrap());
    assert!(second.release().await.unwrap());

    // A writer's release lets a waiting reader in.
    let name = lock_name("wake-reader");
    let writer = holder.acquire_with(&name, PATIENCE).await.unwrap();
    let waiting = wait_for(&name, Claim::Shared);
    settle().await;
    assert!(writer.release().await.unwrap());
    assert!(woken(waiting).await.release().await.unwrap());

    // The last reader's release lets a waiting writer in; an earlier one's
    // does not.
    let name = lock_name("wake-writer");
    let readers = [
        holder
            .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
            .await
            .unwrap(),
        holder
            .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
            .await
            .unwrap(),
    ];
    let waiting = wait_for(&name, Claim::Exclusive);
    settle().await;
    let [first, last] = readers;
    assert!(first.release().await.unwrap());
    settle().await;
    assert!(!waiting.is_finished(), "a reader is still inside");
    assert!(last.release().await.unwrap());
    assert!(woken(waiting).await.release().await.unwrap());

    // A writer that gives up lets the readers held back by its mark in.
    let name = lock_name("wake-mark");
    let inside = holder
        .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .unwrap();
    let gave_up = {
        let (holder, name) = (holder.clone(), name.clone());
        tokio::spawn(async move { holder.acquire_with(&name, Duration::from_secs(1)).await })
    };
    settle().await;
    let waiting = wait_for(&name, Claim::Shared);
    settle().await;
    assert!(
        !waiting.is_finished(),
        "the writer's mark keeps the reader out"
    );
    assert!(matches!(gave_up.await.unwrap(), Err(Error::Timeout { .. })));
    assert!(woken(waiting).await.release().await.unwrap());
    assert!(inside.release().await.unwrap());
}

#[tokio::test]
async fn readers_extending_and_leaving_wake_no_waiting_writer() {
    let url = shared_url();
    let collection = unique("quiet-readers");
    let busy = LockOptions::builder()
        .lease(Duration::from_secs(20))
        .extend_every(Duration::from_millis(100))
        .build()
        .unwrap();
    let readers = client(backend_at(&url, &collection).await, busy);
    let attempts = TestBackend::wrapping(backend_at(&url, &collection).await);
    let writer = distlock_core::LockClient::new(attempts.shared(), LockOptions::default());
    let name = lock_name("quiet-readers");
    let first = readers
        .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .unwrap();
    let last = readers
        .acquire_with(&name, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .unwrap();
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move { writer.acquire_with(&name, PATIENCE).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(first.release().await.unwrap());
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The first attempt, and at most one more when the change stream starts
    // covering the name; none for the extensions or the first reader's
    // release.
    let during = attempts.calls_of(Operation::Acquire);
    assert!(
        (1..=2).contains(&during),
        "{during} attempts while readers held"
    );
    assert!(last.release().await.unwrap());
    assert!(woken(waiting).await.release().await.unwrap());
}

/// The most readers of one name at once (docs/mongodb.md).
const MAX_READERS: usize = 1000;

#[tokio::test]
async fn readers_beyond_the_cap_wait_for_a_place() {
    let url = shared_url();
    let backend = backend_at(&url, &unique("reader-cap")).await;
    let name = lock_name("reader-cap");
    let lease = Duration::from_secs(60);
    let mut readers = Vec::with_capacity(MAX_READERS);
    for _ in 0..MAX_READERS {
        readers.push(take(&backend, &name, Claim::Shared, lease).await);
    }
    let extra = request(&name, Claim::Shared, lease);
    match backend
        .try_acquire(&extra, &mut WaitState::new())
        .await
        .unwrap()
    {
        Attempt::Held { retry_after } => assert!(
            retry_after.is_some_and(|after| after > Duration::ZERO && after <= lease),
            "told when the first reader's lease ends: {retry_after:?}"
        ),
        granted => panic!("reader {} was admitted: {granted:?}", MAX_READERS + 1),
    }
    let left = readers.pop().unwrap();
    assert!(backend.release(&left).await.unwrap());
    readers.push(take(&backend, &name, Claim::Shared, lease).await);
    assert_eq!(backend.list(ADMIN_LIMIT).await.unwrap().len(), MAX_READERS);
    assert!(backend.force_release(&name, ADMIN_LIMIT).await.unwrap());
}

#[tokio::test]
async fn a_writer_waiting_behind_a_writer_writes_nothing() {
    use futures::StreamExt;
    let url = shared_url();
    let collection = unique("no-write");
    let backend = backend_at(&url, &collection).await;
    let inspector = inspector(&url).await;
    let raw = raw_collection(&inspector, &collection);
    let name = lock_name("no-write");
    let holder = take(&backend, &name, Claim::Exclusive, Duration::from_secs(30)).await;
    let mut events = raw.watch().await.unwrap();
    let mut waiting = request(&name, Claim::Exclusive, Duration::from_secs(30));
    waiting.retries = true;
    let mut wait = WaitState::new();
    for _ in 0..3 {
        assert!(matches!(
            backend.try_acquire(&waiting, &mut wait).await.unwrap(),
            Attempt::Held { .. }
        ));
    }
    assert!(wait.is_empty(), "no mark where no reader is involved");
    raw.insert_one(doc! { "_id": "after the attempts" })
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an event")
        .unwrap()
        .unwrap();
    assert_eq!(
        first.document_key.unwrap().get_str("_id").unwrap(),
        "after the attempts",
        "the waiting attempts wrote to the lock document"
    );
    assert!(backend.release(&holder).await.unwrap());
}

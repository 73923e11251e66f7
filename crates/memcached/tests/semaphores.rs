//! Semaphores on memcached, looked at on the server: slots owned through
//! CAS, the record that keeps kinds and limits apart, forced release of
//! every slot, and fencing tokens across permits. On the shared servers
//! that scripts/test starts.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend, Lease, WaitState};
use distlock_core::{
    AcquireOptions, Claim, Error, Holder, LockClient, LockKind, LockName, LockOptions, Permits,
};
use distlock_memcached::{MemcachedBackend, MemcachedConfig};

use distlock_core::testing::ADMIN_LIMIT;
use support::{Peek, eventually, grant, grant_as, quorum_url, unique, url};

const LEASE: Duration = Duration::from_secs(60);

async fn open(url: &str) -> MemcachedBackend {
    MemcachedBackend::open(url).await.expect("open")
}

/// The shared sharded server's address.
fn sharded_addr() -> String {
    MemcachedConfig::parse(&url()).unwrap().servers()[0].clone()
}

/// One permit of `limit`, through the backend alone (nobody extends it);
/// `None` when every permit is taken.
async fn permit(
    backend: &MemcachedBackend,
    name: &LockName,
    limit: u32,
    lease: Duration,
) -> Option<Lease> {
    grant_as(backend, name, Claim::Permit { limit }, lease)
        .await
        .expect("try_acquire")
}

/// The slots of `name`, below `limit`, that hold an item.
async fn live_slots(backend: &MemcachedBackend, name: &LockName, limit: u32) -> Vec<u32> {
    let mut peek = Peek::connect(&sharded_addr()).await;
    let mut live = Vec::new();
    for slot in 0..limit {
        if peek.get(&backend.slot_key(name, slot)).await.is_some() {
            live.push(slot);
        }
    }
    live
}

/// The held and requested claims of a kind conflict.
fn conflict(outcome: distlock_core::Result<Option<Lease>>) -> (Claim, Claim) {
    match outcome {
        Err(Error::KindConflict {
            held, requested, ..
        }) => (held, requested),
        other => panic!("expected a kind conflict, got {other:?}"),
    }
}

/// A permit whose lease ran out, and whose slot another holder then took,
/// can neither extend nor release: its remembered CAS belongs to an item
/// that is gone, and the item there now is someone else's, which keeps its
/// value and CAS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_permit_leaves_the_new_holders_slot_alone() {
    let stale = open(&url()).await;
    let fresh = open(&url()).await;
    let name = unique("sem-stale");
    // One permit, so both holders must use slot 0.
    let old = permit(&stale, &name, 1, Duration::from_secs(1))
        .await
        .expect("a new semaphore has a free permit");
    let slot = stale.slot_key(&name, 0);
    eventually("the stale permit's lease to run out", || async {
        Peek::connect(&sharded_addr())
            .await
            .get(&slot)
            .await
            .is_none()
    })
    .await;
    let new = permit(&fresh, &name, 1, LEASE)
        .await
        .expect("the slot is free again");
    assert!(new.fencing_token > old.fencing_token);
    let mut peek = Peek::connect(&sharded_addr()).await;
    let before = peek.get(&slot).await.expect("the new holder's slot");
    assert_eq!(before.flags, 1, "a slot records its semaphore's limit");

    assert!(
        !stale.extend(&old).await.expect("extend"),
        "not ours any more"
    );
    assert!(
        !stale.release(&old).await.expect("release"),
        "not ours any more"
    );
    let after = peek.get(&slot).await.expect("still there");
    assert_eq!(after.value, before.value, "the new holder's value");
    assert_eq!(after.cas, before.cas, "and nobody stored over it");

    assert!(fresh.extend(&new).await.expect("extend"));
    assert!(fresh.release(&new).await.expect("release"));
    assert!(peek.get(&slot).await.is_none());
}

/// The same, with the slot deleted and taken again within the stale
/// holder's lease: its CAS store and delete fail, and the read that follows
/// finds another grant's identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_whose_slot_was_taken_meanwhile_changes_nothing() {
    let stale = open(&url()).await;
    let fresh = open(&url()).await;
    let name = unique("sem-taken");
    let old = permit(&stale, &name, 1, LEASE).await.expect("free");
    let slot = stale.slot_key(&name, 0);
    let mut peek = Peek::connect(&sharded_addr()).await;
    assert!(peek.delete(&slot).await, "evicted, say");
    let new = permit(&fresh, &name, 1, LEASE).await.expect("free again");
    let before = peek.get(&slot).await.expect("the new holder's slot");
    assert!(!stale.extend(&old).await.expect("extend"));
    assert!(!stale.release(&old).await.expect("release"));
    assert_eq!(peek.get(&slot).await, Some(before));
    assert!(fresh.release(&new).await.expect("release"));
}

/// A permit asked with another limit, a lock asked on a semaphore, and a
/// permit asked on a lock are errors naming both sides, and leave nothing
/// behind: no slot of the loser's, and the holder's lock intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_and_limits_that_differ_conflict_and_leave_nothing_behind() {
    let a = open(&url()).await;
    let b = open(&url()).await;
    let mut peek = Peek::connect(&sharded_addr()).await;

    let semaphore = unique("sem-conflict");
    let held = permit(&a, &semaphore, 2, LEASE).await.expect("free");
    let record = peek
        .get(&a.lock_key(&semaphore))
        .await
        .expect("the semaphore's record is at the lock key");
    assert_eq!(record.flags, 2, "the record carries the limit");
    for asked in [Claim::Permit { limit: 3 }, Claim::Permit { limit: 1 }] {
        let outcome = grant_as(&b, &semaphore, asked, LEASE).await;
        assert_eq!(conflict(outcome), (Claim::Permit { limit: 2 }, asked));
    }
    let outcome = grant_as(&b, &semaphore, Claim::Exclusive, LEASE).await;
    assert_eq!(
        conflict(outcome),
        (Claim::Permit { limit: 2 }, Claim::Exclusive)
    );
    assert_eq!(
        live_slots(&a, &semaphore, 3).await.len(),
        1,
        "only the holder's slot: a conflicting claim gives its slot back"
    );
    // The last permit to go takes the record with it: the name is free
    // for any kind again.
    assert!(a.release(&held).await.expect("release"));
    assert!(peek.get(&a.lock_key(&semaphore)).await.is_none());
    let lock = grant(&b, &semaphore, LEASE).await.expect("a lock now");
    assert!(b.release(&lock).await.expect("release"));

    let locked = unique("lock-conflict");
    let lock = grant(&a, &locked, LEASE).await.expect("free");
    let value = peek
        .get(&a.lock_key(&locked))
        .await
        .expect("the lock")
        .value;
    let outcome = grant_as(&b, &locked, Claim::Permit { limit: 2 }, LEASE).await;
    assert_eq!(
        conflict(outcome),
        (Claim::Exclusive, Claim::Permit { limit: 2 })
    );
    assert!(live_slots(&b, &locked, 2).await.is_empty(), "no slot left");
    let item = peek.get(&a.lock_key(&locked)).await.expect("still locked");
    assert_eq!((item.value, item.flags), (value, 0), "the lock as it was");
    assert!(a.extend(&lock).await.expect("the lock extends"));
    assert!(a.release(&lock).await.expect("and releases"));
}

/// A forced release deletes every slot, whatever their number and even
/// with the record gone; the holders then lose their permits, and the name
/// is free for any kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_frees_every_slot() {
    let holder = open(&url()).await;
    let admin = open(&url()).await;
    let name = unique("sem-force");
    let limit = distlock_core::MAX_PERMITS;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(permit(&holder, &name, limit, LEASE).await.expect("free"));
    }
    assert_eq!(live_slots(&holder, &name, limit).await.len(), 5);
    // The record lost (evicted, say): the slots must go all the same.
    let mut peek = Peek::connect(&sharded_addr()).await;
    assert!(peek.delete(&holder.lock_key(&name)).await);

    assert!(
        admin
            .force_release(&name, ADMIN_LIMIT)
            .await
            .expect("force release")
    );
    assert!(live_slots(&holder, &name, limit).await.is_empty());
    assert!(peek.get(&holder.lock_key(&name)).await.is_none());
    for lease in &held {
        assert!(!holder.extend(lease).await.expect("extend"), "lost");
        assert!(!holder.release(lease).await.expect("release"));
    }
    assert!(
        !admin
            .force_release(&name, ADMIN_LIMIT)
            .await
            .expect("force release"),
        "nothing is held any more"
    );
    let lock = grant(&admin, &name, LEASE).await.expect("free for a lock");
    assert!(admin.release(&lock).await.expect("release"));
}

/// Each permit is its own grant, with a token above every grant before it,
/// permits and locks alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_across_permits_and_kinds() {
    let a = open(&url()).await;
    let b = open(&url()).await;
    let name = unique("sem-tokens");
    let mut last = 0;
    for round in 0..3 {
        let lock = grant(&a, &name, LEASE).await.expect("free");
        assert!(lock.fencing_token > last, "round {round}");
        assert!(a.release(&lock).await.expect("release"));
        last = lock.fencing_token;

        let mut permits = Vec::new();
        for backend in [&a, &b, &a] {
            let permit = permit(backend, &name, 3, LEASE).await.expect("free");
            assert!(permit.fencing_token > last, "round {round}");
            last = permit.fencing_token;
            permits.push((backend, permit));
        }
        assert!(permit(&b, &name, 3, LEASE).await.is_none(), "all 3 taken");
        let (backend, second) = permits.remove(1);
        assert!(backend.release(&second).await.expect("release"));
        let again = permit(&b, &name, 3, LEASE).await.expect("one is free");
        assert!(again.fencing_token > last, "round {round}");
        last = again.fencing_token;
        permits.push((&b, again));
        for (backend, permit) in permits {
            assert!(backend.release(&permit).await.expect("release"));
        }
    }
}

/// Permits fill every slot, a full semaphore tells waiters when the first
/// permit's lease ends, and `list` shows each permit with the limit and
/// how many of them this instance holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_fill_every_slot_and_are_listed() {
    const LIMIT: u32 = 8;
    let backend = open(&url()).await;
    let name = unique("sem-full");
    let mut held = Vec::new();
    for _ in 0..LIMIT {
        held.push(permit(&backend, &name, LIMIT, LEASE).await.expect("free"));
    }
    assert_eq!(
        live_slots(&backend, &name, LIMIT).await,
        (0..LIMIT).collect::<Vec<_>>()
    );
    let request = AcquireRequest::new(
        name.clone(),
        Claim::Permit { limit: LIMIT },
        LEASE,
        Holder::this_process(None).into(),
    );
    match backend
        .try_acquire(&request, &mut WaitState::new())
        .await
        .expect("try_acquire")
    {
        Attempt::Held {
            retry_after: Some(after),
        } => assert!(
            after > Duration::from_secs(50) && after <= LEASE + Duration::from_secs(2),
            "{after:?}"
        ),
        other => panic!("a full semaphore is held until a lease ends, got {other:?}"),
    }

    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    let mine: Vec<_> = listed.iter().filter(|info| info.name == name).collect();
    assert_eq!(mine.len(), LIMIT as usize, "{listed:?}");
    for info in &mine {
        assert_eq!(info.kind, LockKind::Semaphore);
        assert_eq!(
            info.permits,
            Some(Permits {
                in_use: LIMIT,
                limit: LIMIT
            })
        );
    }
    // A permit whose slot vanished (evicted, say) drops out of the list.
    let gone = held.pop().expect("eight");
    let id = gone.id.to_string();
    let mut peek = Peek::connect(&sharded_addr()).await;
    let mut deleted = 0;
    for slot in 0..LIMIT {
        let key = backend.slot_key(&name, slot);
        let item = peek.get(&key).await.expect("every slot is taken");
        if item.value.starts_with(id.as_bytes()) {
            deleted += usize::from(peek.delete(&key).await);
        }
    }
    assert_eq!(deleted, 1, "one slot holds the permit's identity");
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    let mine: Vec<_> = listed.iter().filter(|info| info.name == name).collect();
    assert_eq!(mine.len(), LIMIT as usize - 1);
    assert!(mine.iter().all(|info| {
        info.permits
            .is_some_and(|permits| permits.in_use == LIMIT - 1)
    }));
    assert!(!backend.release(&gone).await.expect("release"), "lost");
    for lease in held {
        assert!(backend.release(&lease).await.expect("release"));
    }
    assert!(peek.get(&backend.lock_key(&name)).await.is_none());
}

/// The record lives as long as the permits: an extension adds it back
/// when it was lost, and raises its expiry when it would end first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_keep_the_record_alive_as_long_as_the_permit() {
    let backend = open(&url()).await;
    let name = unique("sem-record");
    let lease = permit(&backend, &name, 4, LEASE).await.expect("free");
    let record = backend.lock_key(&name);
    let mut peek = Peek::connect(&sharded_addr()).await;

    assert!(peek.delete(&record).await, "lost, say evicted");
    assert!(backend.extend(&lease).await.expect("extend"));
    let item = peek.get(&record).await.expect("added back");
    assert_eq!(item.flags, 4);

    assert!(peek.touch(&record, 5).await, "about to end");
    assert!(backend.extend(&lease).await.expect("extend"));
    let item = peek.get(&record).await.expect("still there");
    let slot = live_slots(&backend, &name, 4).await;
    let slot = peek
        .get(&backend.slot_key(&name, slot[0]))
        .await
        .expect("the slot");
    assert!(
        item.ttl >= slot.ttl,
        "the record ({}s) outlives the slot ({}s)",
        item.ttl,
        slot.ttl
    );

    // A lock that took the name while the record was gone wins: the
    // permit is lost at its next extension, and gives its slot back.
    assert!(peek.delete(&record).await);
    let lock = grant(&backend, &name, LEASE)
        .await
        .expect("the name looks free");
    assert!(!backend.extend(&lease).await.expect("extend"), "lost");
    assert!(live_slots(&backend, &name, 4).await.is_empty());
    assert!(backend.release(&lock).await.expect("the lock is intact"));
}

/// A permit this instance never saw granted (its answer was lost, and the
/// core releases it by its identity) is found among the slots by that
/// identity and released; nobody else's slot is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_unknown_here_is_released_by_its_identity() {
    let granted_by = open(&url()).await;
    let stranger = open(&url()).await;
    let name = unique("sem-identity");
    let other = permit(&granted_by, &name, 5, LEASE).await.expect("free");
    let lost = permit(&granted_by, &name, 5, LEASE).await.expect("free");
    assert!(
        stranger.release(&lost).await.expect("release"),
        "found by identity"
    );
    assert_eq!(
        live_slots(&granted_by, &name, 5).await.len(),
        1,
        "the other one"
    );
    assert!(!granted_by.extend(&lost).await.expect("extend"));
    assert!(granted_by.extend(&other).await.expect("extend"));
    assert!(granted_by.release(&other).await.expect("release"));
}

/// Every claim gives the record a new CAS after its slot's add, so that a
/// release that found no slot taken, and read the record's CAS before the
/// claim, cannot delete the record from under the new permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_claim_gives_the_record_a_new_cas() {
    let backend = open(&url()).await;
    let name = unique("sem-bump");
    let mut peek = Peek::connect(&sharded_addr()).await;
    let first = permit(&backend, &name, 3, LEASE).await.expect("free");
    let before = peek.get(&backend.lock_key(&name)).await.expect("record");
    let second = permit(&backend, &name, 3, LEASE).await.expect("free");
    let after = peek.get(&backend.lock_key(&name)).await.expect("record");
    assert_ne!(after.cas, before.cas, "bumped");
    assert_eq!(
        (&after.value, after.flags),
        (&before.value, before.flags),
        "and nothing else changed"
    );
    assert!(after.ttl >= before.ttl - 1, "nor shortened");
    for lease in [first, second] {
        assert!(backend.release(&lease).await.expect("release"));
    }
}

/// Many tasks of several clients take permits of one semaphore over and
/// over: never more than the limit hold at once, the limit is reached,
/// every permit has its own token, and once they are done the name is
/// free for a lock (at once when the last release cleared the record, or
/// when a record left by a release that raced a claim has expired).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contending_clients_never_exceed_the_limit() {
    const LIMIT: u32 = 4;
    let name = unique("sem-contend");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let options = LockOptions::builder()
        .lease(Duration::from_secs(2))
        .backoff(Duration::from_millis(1), Duration::from_millis(20))
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = LockClient::new(Arc::new(open(&url()).await), options.clone());
        for _ in 0..5 {
            let (client, name) = (client.clone(), name.clone());
            let (inside, most, tokens) = (inside.clone(), most.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let permit = client
                        .acquire_with(
                            &name,
                            AcquireOptions::new()
                                .permit(LIMIT)
                                .timeout(Duration::from_secs(30)),
                        )
                        .await
                        .expect("permit");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokens.lock().unwrap().push(permit.fencing_token());
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.expect("release");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(most.load(Ordering::SeqCst), LIMIT as usize);
    let mut tokens = tokens.lock().unwrap().clone();
    let count = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), count, "every permit has its own token");

    let backend = open(&url()).await;
    assert!(live_slots(&backend, &name, LIMIT).await.is_empty());
    eventually("the name to be free for a lock", || async {
        match grant_as(&backend, &name, Claim::Exclusive, LEASE).await {
            Ok(Some(lock)) => backend.release(&lock).await.expect("release"),
            Err(Error::KindConflict { .. }) => false,
            other => panic!("{other:?}"),
        }
    })
    .await;
}

/// Quorum mode grants no permits, and says to use sharded mode.
#[tokio::test]
async fn quorum_mode_answers_unsupported_naming_sharded_mode() {
    let sharded = open(&url()).await;
    assert!(sharded.capabilities().semaphores);
    let quorum = open(&quorum_url()).await;
    assert!(!quorum.capabilities().semaphores);
    match grant_as(
        &quorum,
        &unique("sem-quorum"),
        Claim::Permit { limit: 2 },
        LEASE,
    )
    .await
    {
        Err(Error::Unsupported(reason)) => assert!(reason.contains("sharded"), "{reason}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

//! The object-storage protocol against real stores: Azurite, Azure Blob's
//! emulator (`DISTLOCK_TEST_AZURE_URL`), and moto, an S3 emulator served
//! one request at a time (`DISTLOCK_TEST_S3_URL`), both started by
//! `scripts/test`. Each case runs on each store, as a test of its own,
//! under a prefix of its own. Faults are injected between the client and
//! the store, at the HTTP level (`support::Faults`), or by a store wrapper
//! that ignores preconditions (`support::IgnoresPreconditions`); the store
//! itself is always the real one.

#[macro_use]
mod support;

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use tokio::time::Instant;

use distlock_core::backend::{Attempt, Backend, BackendExt, FeatureState, WaitState};
use distlock_core::testing::{try_grant, unique_name, waiting_request};
use distlock_core::{Claim, Error, LockName};
use distlock_objectstore::{ObjectStoreBackend, ObjectStoreConfig};

use support::{Fault, Faults, IgnoresPreconditions, prefix_of, raw_store};

on_every_store!(
    only_the_holder_extends_and_releases_and_tokens_increase,
    an_extended_lock_keeps_its_waiters_out,
    a_dead_holder_is_taken_over_after_a_silent_lease_and_never_before,
    a_write_whose_answer_was_lost_is_recognised_by_its_identity,
    a_conflict_answer_means_the_lock_is_contended,
    a_deleted_object_is_a_lost_lock_and_tokens_keep_increasing,
    a_restored_older_version_gives_no_token_twice,
    a_store_that_ignores_preconditions_is_refused,
    the_probe_finds_both_preconditions,
    list_shows_every_holder_by_name,
    a_forced_release_frees_the_lock_and_its_holder_learns,
    an_object_that_is_not_a_lock_is_refused_and_kept,
    readers_and_permits_are_unsupported,
    racing_conditional_writes_let_exactly_one_through,
);

const LEASE: Duration = Duration::from_millis(1_500);

async fn open(url: &str) -> ObjectStoreBackend {
    ObjectStoreBackend::open(url)
        .await
        .expect("the backend opens")
}

async fn open_with_faults(url: &str) -> (ObjectStoreBackend, Faults) {
    let faults = Faults::default();
    let config = ObjectStoreConfig::parse(url)
        .expect("the URL")
        .http_connector(faults.clone());
    let backend = ObjectStoreBackend::connect(config)
        .await
        .expect("the backend opens");
    (backend, faults)
}

fn lock_path(backend: &ObjectStoreBackend, name: &LockName) -> Path {
    Path::parse(backend.lock_key(name)).expect("a valid key")
}

async fn only_the_holder_extends_and_releases_and_tokens_increase(url: &str) {
    let (a, b) = (open(url).await, open(url).await);
    let name = unique_name("basic");
    let first = try_grant(&a, &waiting_request(&name, LEASE, "a"))
        .await
        .unwrap()
        .expect("a free lock is granted");
    assert!(
        try_grant(&b, &waiting_request(&name, LEASE, "b"))
            .await
            .unwrap()
            .is_none(),
        "a held lock is not granted to another"
    );
    assert!(a.extend(&first).await.unwrap(), "the holder extends");
    // Another backend's lease with the holder's name but another identity
    // neither extends nor releases it.
    let stranger =
        waiting_request(&name, LEASE, "b").granted(first.fencing_token, Default::default());
    assert!(!b.extend(&stranger).await.unwrap());
    assert!(!b.release(&stranger).await.unwrap());
    assert!(a.release(&first).await.unwrap(), "the holder releases");
    assert!(
        !a.release(&first).await.unwrap(),
        "a second release finds nothing"
    );
    assert!(
        !a.extend(&first).await.unwrap(),
        "a released lease is not extended"
    );
    let second = try_grant(&b, &waiting_request(&name, LEASE, "b"))
        .await
        .unwrap()
        .expect("a released lock is granted at once");
    assert!(second.fencing_token > first.fencing_token);
    assert!(b.release(&second).await.unwrap());
}

async fn an_extended_lock_keeps_its_waiters_out(url: &str) {
    let (a, b) = (open(url).await, open(url).await);
    let name = unique_name("extended");
    let held = try_grant(&a, &waiting_request(&name, LEASE, "a"))
        .await
        .unwrap()
        .expect("granted");
    let until = Instant::now() + LEASE * 3;
    let mut asked = 0;
    while Instant::now() < until {
        assert!(a.extend(&held).await.unwrap(), "the holder keeps its lock");
        for _ in 0..4 {
            asked += 1;
            let attempt = b
                .try_acquire(&waiting_request(&name, LEASE, "b"), &mut WaitState::new())
                .await
                .unwrap();
            assert!(
                matches!(attempt, Attempt::Held { .. }),
                "a waiter took a lock its holder extended every {:?} (attempt {asked})",
                LEASE / 4
            );
            tokio::time::sleep(LEASE / 16).await;
        }
    }
    assert!(asked >= 12, "the waiter asked only {asked} times");
    assert!(a.release(&held).await.unwrap());
}

async fn a_dead_holder_is_taken_over_after_a_silent_lease_and_never_before(url: &str) {
    let (dead, waiter) = (open(url).await, open(url).await);
    let name = unique_name("dead");
    let abandoned = try_grant(&dead, &waiting_request(&name, LEASE, "dead"))
        .await
        .unwrap()
        .expect("granted");
    // The holder dies: nothing extends its lease. The waiter asks every
    // 50 ms; it must not be granted before it has seen the object silent
    // for the whole lease, counted from (at the earliest) its first ask.
    let first_ask = Instant::now();
    let taken = loop {
        let request = waiting_request(&name, LEASE, "waiter");
        let granted = try_grant(&waiter, &request).await.unwrap();
        // Read after the answer: the backend's count starts after the first
        // ask was sent, and it grants only once its read answered a lease
        // after that, which is before this answer came back.
        let answered = Instant::now();
        if let Some(lease) = granted {
            break (lease, answered);
        }
        assert!(
            answered - first_ask < LEASE * 10,
            "the abandoned lock was never taken over"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (lease, granted_at) = taken;
    assert!(
        granted_at - first_ask >= LEASE,
        "taken over {:?} after the waiter's first ask, within the lease {LEASE:?}",
        granted_at - first_ask
    );
    assert!(lease.fencing_token > abandoned.fencing_token);
    assert!(
        !dead.extend(&abandoned).await.unwrap(),
        "the dead holder's extension finds the lock taken"
    );
    assert!(!dead.release(&abandoned).await.unwrap());
    assert!(waiter.release(&lease).await.unwrap());
}

async fn a_write_whose_answer_was_lost_is_recognised_by_its_identity(url: &str) {
    let (backend, faults) = open_with_faults(url).await;
    let other = open(url).await;
    for name in [unique_name("lost-create"), unique_name("lost-replace")] {
        if name.as_str().starts_with("lost-replace") {
            // The object exists and is free: the take replaces it.
            let first = try_grant(&other, &waiting_request(&name, LEASE, "other"))
                .await
                .unwrap()
                .expect("granted");
            assert!(other.release(&first).await.unwrap());
        }
        let sent = faults.sent();
        faults.next(Fault::LoseAnswer, 1);
        let lease = try_grant(&backend, &waiting_request(&name, LEASE, "lost"))
            .await
            .expect("a lost answer is not an error")
            .expect("the write landed, so the lock is ours");
        assert_eq!(faults.left(), 0, "the fault was injected");
        assert!(faults.sent() >= sent + 2, "the client sent the write again");
        faults.next(Fault::LoseAnswer, 1);
        assert!(
            backend.extend(&lease).await.unwrap(),
            "an extension whose answer was lost"
        );
        assert_eq!(faults.left(), 0);
        assert!(
            backend.extend(&lease).await.unwrap(),
            "and the one after it"
        );
        faults.next(Fault::LoseAnswer, 1);
        assert!(
            backend.release(&lease).await.unwrap(),
            "a release whose answer was lost"
        );
        assert_eq!(faults.left(), 0);
        let next = try_grant(&other, &waiting_request(&name, LEASE, "other"))
            .await
            .unwrap()
            .expect("the release landed");
        assert!(next.fencing_token > lease.fencing_token);
        assert!(other.release(&next).await.unwrap());
    }
}

async fn a_conflict_answer_means_the_lock_is_contended(url: &str) {
    let (backend, faults) = open_with_faults(url).await;
    let name = unique_name("conflict");
    let first = try_grant(&backend, &waiting_request(&name, LEASE, "first"))
        .await
        .unwrap()
        .expect("granted");
    assert!(backend.release(&first).await.unwrap());
    // More conflicts than the client retries: the take answers Held.
    faults.next(Fault::Conflict, 20);
    let attempt = backend
        .try_acquire(
            &waiting_request(&name, LEASE, "racing"),
            &mut WaitState::new(),
        )
        .await
        .expect("a conflict is not an error");
    assert!(matches!(attempt, Attempt::Held { .. }), "{attempt:?}");
    let injected = 20 - faults.left();
    assert!(injected >= 1, "no conflict was injected");
    // One conflict: S3's client retries past it and is granted; a store
    // whose client does not retry answers Held, and the next take, without
    // a conflict, is granted.
    faults.clear();
    faults.next(Fault::Conflict, 1);
    let request = waiting_request(&name, LEASE, "second");
    let lease = match try_grant(&backend, &request)
        .await
        .expect("a conflict is not an error")
    {
        Some(lease) => lease,
        None => try_grant(&backend, &waiting_request(&name, LEASE, "third"))
            .await
            .unwrap()
            .expect("granted once the conflict passed"),
    };
    assert!(lease.fencing_token > first.fencing_token);
    assert!(backend.release(&lease).await.unwrap());
}

async fn a_deleted_object_is_a_lost_lock_and_tokens_keep_increasing(url: &str) {
    let backend = open(url).await;
    let raw = raw_store(url);
    let name = unique_name("deleted");
    let held = try_grant(&backend, &waiting_request(&name, LEASE, "a"))
        .await
        .unwrap()
        .expect("granted");
    raw.delete(&lock_path(&backend, &name))
        .await
        .expect("deleted behind its back");
    assert!(
        !backend.extend(&held).await.unwrap(),
        "the extension finds it gone"
    );
    assert!(!backend.release(&held).await.unwrap());
    let next = try_grant(&backend, &waiting_request(&name, LEASE, "b"))
        .await
        .unwrap()
        .expect("granted again");
    assert!(
        next.fencing_token > held.fencing_token,
        "{} after {}",
        next.fencing_token,
        held.fencing_token
    );
    assert!(backend.release(&next).await.unwrap());
}

/// A store may show an older version of the object again: a person
/// restores one, or a store loses acknowledged writes in a crash (Azurite
/// keeps its index in memory for up to five seconds). The next grant must
/// still give a token greater than every one given before.
async fn a_restored_older_version_gives_no_token_twice(url: &str) {
    let backend = open(url).await;
    let raw = raw_store(url);
    let name = unique_name("restored");
    let path = lock_path(&backend, &name);
    let first = try_grant(&backend, &waiting_request(&name, LEASE, "a"))
        .await
        .unwrap()
        .expect("granted");
    assert!(backend.release(&first).await.unwrap());
    let old_version = raw.get(&path).await.unwrap().bytes().await.unwrap();
    let mut tokens = vec![first.fencing_token];
    for holder in ["b", "c"] {
        let lease = try_grant(&backend, &waiting_request(&name, LEASE, holder))
            .await
            .unwrap()
            .expect("granted");
        tokens.push(lease.fencing_token);
        assert!(backend.release(&lease).await.unwrap());
    }
    raw.put(&path, PutPayload::from(old_version))
        .await
        .expect("the older version restored behind the backend's back");
    let next = try_grant(&backend, &waiting_request(&name, LEASE, "d"))
        .await
        .unwrap()
        .expect("granted on the restored free version");
    let highest = tokens.iter().max().copied().unwrap();
    assert!(
        next.fencing_token > highest,
        "token {} after the tokens {tokens:?} given before",
        next.fencing_token
    );
    assert!(backend.release(&next).await.unwrap());
}

async fn a_store_that_ignores_preconditions_is_refused(url: &str) {
    let config = ObjectStoreConfig::parse(url).unwrap();
    let mutant: Arc<dyn object_store::ObjectStore> =
        Arc::new(IgnoresPreconditions(config.build_client().unwrap()));
    let prefix = prefix_of(url);
    let refused = ObjectStoreBackend::builder(mutant.clone())
        .prefix(prefix.clone())
        .build()
        .await;
    match refused {
        Err(Error::Unsupported(reason)) => {
            assert!(reason.contains("If-None-Match"), "{reason}");
            assert!(reason.contains("If-Match"), "{reason}");
            assert!(reason.contains("check=false"), "{reason}");
        }
        other => panic!("a store that ignores preconditions was not refused: {other:?}"),
    }
    // The real store, through the same builder, passes.
    ObjectStoreBackend::builder(config.build_client().unwrap())
        .prefix(prefix.clone())
        .build()
        .await
        .expect("the real store passes the probe");
    // Told not to check, it opens, and its probe still says what is wrong.
    let unchecked = ObjectStoreBackend::builder(mutant)
        .prefix(prefix)
        .check(false)
        .build()
        .await
        .expect("opens unchecked");
    let info = unchecked
        .server_info(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        info.features
            .iter()
            .all(|feature| feature.state == FeatureState::Missing),
        "{info:?}"
    );
}

async fn the_probe_finds_both_preconditions(url: &str) {
    let backend = open(url).await;
    let info = backend.server_info(Duration::from_secs(10)).await.unwrap();
    assert_eq!(info.features.len(), 2, "{info:?}");
    assert!(
        info.features
            .iter()
            .all(|feature| feature.state == FeatureState::Present),
        "{info:?}"
    );
    assert!(
        info.clock.is_some(),
        "the store's time of the probe's write"
    );
    assert!(
        backend
            .list(Duration::from_secs(10))
            .await
            .unwrap()
            .is_empty(),
        "probes are not locks"
    );
}

async fn list_shows_every_holder_by_name(url: &str) {
    let (a, b) = (open(url).await, open(url).await);
    let names = [
        LockName::new("plain").unwrap(),
        LockName::new("with/slashes/and spaces").unwrap(),
        LockName::new("nul\u{0}$.\r\n€").unwrap(),
    ];
    let mut leases = Vec::new();
    for name in &names {
        leases.push(
            try_grant(&a, &waiting_request(name, LEASE * 20, "lister"))
                .await
                .unwrap()
                .expect("granted"),
        );
    }
    assert!(a.release(&leases[0]).await.unwrap());
    let listed = b.list(Duration::from_secs(10)).await.unwrap();
    let shown: Vec<&str> = listed.iter().map(|info| info.name.as_str()).collect();
    let mut expected = vec![names[1].as_str(), names[2].as_str()];
    expected.sort_unstable();
    assert_eq!(
        shown, expected,
        "released locks are not listed, held ones are"
    );
    for info in &listed {
        let holder = info.holder.as_ref().expect("the holder");
        assert_eq!(holder.label.as_deref(), Some("lister"));
        assert!(info.expires_in.is_some_and(|left| left <= LEASE * 20));
    }
    for lease in &leases[1..] {
        let token = listed
            .iter()
            .find(|info| info.name == lease.name)
            .and_then(|info| info.fencing_token);
        assert_eq!(token, Some(lease.fencing_token));
        assert!(a.release(lease).await.unwrap());
    }
}

async fn a_forced_release_frees_the_lock_and_its_holder_learns(url: &str) {
    let (a, admin) = (open(url).await, open(url).await);
    let name = unique_name("forced");
    let held = try_grant(&a, &waiting_request(&name, LEASE * 20, "a"))
        .await
        .unwrap()
        .expect("granted");
    assert!(
        admin
            .force_release(&name, Duration::from_secs(10))
            .await
            .unwrap()
    );
    assert!(
        !admin
            .force_release(&name, Duration::from_secs(10))
            .await
            .unwrap(),
        "nothing left to free"
    );
    assert!(
        !a.extend(&held).await.unwrap(),
        "the holder learns at its next extension"
    );
    let next = try_grant(&admin, &waiting_request(&name, LEASE, "admin"))
        .await
        .unwrap()
        .expect("free at once");
    assert!(next.fencing_token > held.fencing_token);
    assert!(admin.release(&next).await.unwrap());
}

async fn an_object_that_is_not_a_lock_is_refused_and_kept(url: &str) {
    let backend = open(url).await;
    let raw = raw_store(url);
    let name = unique_name("foreign");
    let path = lock_path(&backend, &name);
    raw.put(&path, PutPayload::from_static(b"not a lock"))
        .await
        .unwrap();
    let attempt = backend
        .try_acquire(&waiting_request(&name, LEASE, "a"), &mut WaitState::new())
        .await;
    assert!(
        matches!(attempt, Err(Error::InvalidData { .. })),
        "{attempt:?}"
    );
    let kept = raw.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(&kept[..], b"not a lock", "the object was left as it was");
    assert!(
        backend
            .list(Duration::from_secs(10))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn readers_and_permits_are_unsupported(url: &str) {
    let backend = open(url).await;
    assert!(!backend.capabilities().shared);
    assert!(!backend.capabilities().semaphores);
    for claim in [Claim::Shared, Claim::permit(3).unwrap()] {
        let mut request = waiting_request(&unique_name("kinds"), LEASE, "a");
        request.claim = claim;
        let attempt = backend.try_acquire(&request, &mut WaitState::new()).await;
        assert!(
            matches!(attempt, Err(Error::Unsupported(_))),
            "{claim:?}: {attempt:?}"
        );
    }
}

/// What every lock here rests on, checked on the store itself: of writes
/// racing under one precondition, exactly one lands.
async fn racing_conditional_writes_let_exactly_one_through(url: &str) {
    use object_store::{PutMode, PutOptions, UpdateVersion};

    const WRITERS: usize = 8;
    let raw = raw_store(url);
    let key = Path::parse(format!(
        "{}/race/{:016x}",
        prefix_of(url),
        rand::random::<u64>()
    ))
    .unwrap();
    let race = |mode: PutMode| {
        let raw = raw.clone();
        let key = key.clone();
        async move {
            let writes = (0..WRITERS).map(|writer| {
                let (raw, key, mode) = (raw.clone(), key.clone(), mode.clone());
                tokio::spawn(async move {
                    // A body no other write has: S3's ETag is the MD5 of the
                    // body, so a winner that rewrote the body it wrote before
                    // would leave the ETag as it was, and a second write under
                    // that ETag would rightly land too.
                    let payload =
                        PutPayload::from(format!("writer {writer} {:016x}", rand::random::<u64>()));
                    let options = PutOptions {
                        mode,
                        ..PutOptions::default()
                    };
                    raw.put_opts(&key, payload, options).await
                })
            });
            let mut landed = 0;
            for write in futures::future::join_all(writes).await {
                match write.unwrap() {
                    Ok(_) => landed += 1,
                    Err(
                        object_store::Error::Precondition { .. }
                        | object_store::Error::AlreadyExists { .. },
                    ) => {}
                    Err(other) => panic!("a racing write failed otherwise: {other}"),
                }
            }
            landed
        }
    };
    for round in 0..10 {
        let _ = raw.delete(&key).await;
        assert_eq!(race(PutMode::Create).await, 1, "round {round}: creates");
        let meta = raw.head(&key).await.unwrap();
        let version = UpdateVersion {
            e_tag: meta.e_tag,
            version: meta.version,
        };
        assert_eq!(
            race(PutMode::Update(version)).await,
            1,
            "round {round}: replaces"
        );
    }
    raw.delete(&key).await.unwrap();
}

//! Advisory mode against a real server: exclusion across backends, what
//! it refuses, losses it reports (a terminated session at once, a session
//! cut off without a word within the lease), tokens, odd names through
//! `list`, names whose hashes collide, and its options. `scripts/test`
//! starts the server and sets `DISTLOCK_TEST_POSTGRES_URL`.

mod support;

use distlock_faultproxy::{Fault, FaultProxy};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Backend};
use distlock_core::testing::{assert_invalid_config, try_grant};
use distlock_core::{
    AcquireOptions, Claim, Error, Holder, LockClient, LockKind, LockName, LockOptions, LossReason,
    TryOptions,
};
use distlock_postgres::tokio_postgres::{self, types::Type};
use distlock_postgres::{DEFAULT_ADVISORY_CLASS, PostgresBackend};

use distlock_core::testing::ADMIN_LIMIT;
use support::{address_of, admin, name, on_keys, open, unique, url, with_options};

/// Long enough for any step of a test; a lease this long never runs out
/// within one.
const PATIENCE: Duration = Duration::from_secs(30);

/// A class of its own for one test, so that `pg_locks` shows only its
/// locks there.
fn fresh_class() -> i32 {
    rand::random::<i32>() & 0x7fff_ffff
}

/// Advisory mode on a fresh table, in `class`.
fn advisory_url(base: &str, table: &str, class: i32) -> String {
    with_options(
        base,
        &format!("mode=advisory&table={table}&advisory_class={class}"),
    )
}

fn client(backend: Arc<PostgresBackend>, lease: Duration) -> LockClient {
    let options = LockOptions::builder()
        .lease(lease)
        .extend_every(lease / 4)
        .safety_margin(lease / 10)
        .operation_timeout(lease / 3)
        .backoff(Duration::from_millis(5), Duration::from_millis(100))
        .label("advisory-tests")
        .build()
        .expect("valid options");
    LockClient::new(backend, options)
}

/// The server processes holding an advisory lock of `class`, shared or
/// not.
async fn holders_in(admin: &tokio_postgres::Client, class: i32) -> Vec<i32> {
    on_keys(admin, class, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_exclude_everyone_and_readers_share_across_backends() {
    let url = advisory_url(&url(), &unique("rw"), fresh_class());
    let a = client(open(&url).await, PATIENCE);
    let b = client(open(&url).await, PATIENCE);
    let lock = name(&unique("rw"));

    let writer = a.acquire_with(&lock, PATIENCE).await.expect("writer");
    assert!(b.try_acquire(&lock).await.expect("try").is_none());
    assert!(
        b.try_acquire_with(&lock, TryOptions::new().shared())
            .await
            .expect("try")
            .is_none()
    );
    assert!(writer.release().await.expect("release"));

    let first = a
        .acquire_with(&lock, AcquireOptions::new().shared().timeout(PATIENCE))
        .await
        .expect("reader");
    let second = b
        .try_acquire_with(&lock, TryOptions::new().shared())
        .await
        .expect("try")
        .expect("readers share");
    assert!(b.try_acquire(&lock).await.expect("try").is_none());
    assert!(second.fencing_token() > first.fencing_token());
    assert!(first.release().await.expect("release"));
    assert!(second.release().await.expect("release"));
    b.try_acquire(&lock)
        .await
        .expect("try")
        .expect("free once the readers left")
        .release()
        .await
        .expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn semaphores_are_refused_naming_the_mode_that_has_them() {
    let url = advisory_url(&url(), &unique("sem"), fresh_class());
    let backend = open(&url).await;
    assert!(!backend.capabilities().semaphores);
    assert!(backend.capabilities().shared);
    assert!(!backend.capabilities().process_bound);
    let a = client(backend, PATIENCE);
    match a
        .acquire_with(
            &name(&unique("sem")),
            AcquireOptions::new().permit(2).timeout(PATIENCE),
        )
        .await
    {
        Err(Error::Unsupported(why)) => assert!(why.contains("mode=lease"), "{why}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminated_holder_session_reports_the_loss_at_once() {
    let class = fresh_class();
    let url = advisory_url(&url(), &unique("kill"), class);
    let a = client(open(&url).await, PATIENCE);
    let lock = name(&unique("kill"));
    let guard = a.acquire_with(&lock, PATIENCE).await.expect("acquire");
    let admin = admin().await;
    let holders = holders_in(&admin, class).await;
    assert_eq!(holders.len(), 1, "one pinned session holds it: {holders:?}");
    let terminated = Instant::now();
    admin
        .query_typed(
            "SELECT pg_terminate_backend($1)",
            &[(&holders[0], Type::INT4)],
        )
        .await
        .expect("terminate");
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires long before the 30 s lease");
    assert_eq!(reason, LossReason::Detected);
    eprintln!("lost() {:?} after the termination", terminated.elapsed());
    assert!(!guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_cut_off_without_a_word_gives_up_within_its_lease_and_the_server_frees_it() {
    let server = url();
    let address = address_of(&server);
    // Bytes stop both ways, connections stay open: a network partition.
    let proxy = FaultProxy::start(address).expect("fault proxy");
    let proxied = server.replacen(
        &format!("{}:{}", address.ip(), address.port()),
        &proxy.addr().to_string(),
        1,
    );
    let table = unique("cut");
    let class = fresh_class();
    let lease = Duration::from_secs(2);
    let cut_off = client(open(&advisory_url(&proxied, &table, class)).await, lease);
    let other = client(open(&advisory_url(&server, &table, class)).await, lease);
    let lock = name(&unique("cut"));
    let guard = cut_off
        .acquire_with(&lock, PATIENCE)
        .await
        .expect("acquire");
    let token = guard.fencing_token();
    // Held across extensions before the cut.
    tokio::time::sleep(lease).await;
    assert!(!guard.is_lost());

    proxy.set_fault(Fault::Blackhole);
    let frozen = Instant::now();
    let reason = tokio::time::timeout(lease * 2, guard.lost())
        .await
        .expect("the holder gives the lock up");
    let gave_up = frozen.elapsed();
    assert_eq!(reason, LossReason::Expired);
    assert!(gave_up <= lease, "gave up {gave_up:?} after the cut");

    // The server ends the silent session a lease after its last check:
    // never before the holder gave up.
    let next = other
        .acquire_with(&lock, PATIENCE)
        .await
        .expect("the server frees the lock");
    let freed = frozen.elapsed();
    assert!(freed >= gave_up, "freed {freed:?}, gave up {gave_up:?}");
    assert!(freed <= lease * 3, "freed only {freed:?} after the cut");
    assert!(next.fencing_token() > token);
    eprintln!("gave up {gave_up:?} and freed {freed:?} after the cut");
    assert!(next.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_strictly_increase_across_backends_and_kinds() {
    let url = advisory_url(&url(), &unique("tokens"), fresh_class());
    let a = client(open(&url).await, PATIENCE);
    let b = client(open(&url).await, PATIENCE);
    let lock = name(&unique("tokens"));
    let mut last = 0;
    for round in 0..5 {
        for (who, shared) in [(&a, false), (&b, true), (&b, false), (&a, true)] {
            let guard = if shared {
                who.acquire_with(&lock, AcquireOptions::new().shared().timeout(PATIENCE))
                    .await
            } else {
                who.acquire_with(&lock, PATIENCE).await
            }
            .expect("acquire");
            assert!(guard.fencing_token() > last, "round {round}");
            last = guard.fencing_token();
            assert!(guard.release().await.expect("release"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn odd_names_round_trip_through_list_with_their_holders() {
    let class = fresh_class();
    let url = advisory_url(&url(), &unique("odd"), class);
    let backend = open(&url).await;
    let a = client(backend.clone(), PATIENCE);
    let prefix = unique("odd");
    let mut guards = Vec::new();
    for odd in [
        "nul\0byte",
        "quote'\"",
        "back\\slash",
        "é 🦀",
        "; DROP TABLE x; --",
    ] {
        let lock = name(&format!("{prefix}{odd}"));
        guards.push(a.acquire_with(&lock, PATIENCE).await.expect("acquire"));
    }
    let reader = a
        .acquire_with(
            &name(&format!("{prefix}-shared")),
            AcquireOptions::new().shared().timeout(PATIENCE),
        )
        .await
        .expect("reader");
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    for guard in &guards {
        let info = listed
            .iter()
            .find(|info| info.name == *guard.name())
            .unwrap_or_else(|| panic!("{:?} missing from {listed:?}", guard.name()));
        assert_eq!(info.kind, LockKind::Exclusive);
        assert_eq!(info.fencing_token, Some(guard.fencing_token()));
        let holder = info.holder.as_ref().expect("holder");
        assert_eq!(holder.pid, std::process::id());
        assert_eq!(holder.label.as_deref(), Some("advisory-tests"));
    }
    let shared = listed
        .iter()
        .find(|info| info.name == *reader.name())
        .expect("the reader is listed");
    assert_eq!(shared.kind, LockKind::Shared);
    assert_eq!(shared.fencing_token, Some(reader.fencing_token()));
    assert_eq!(listed.len(), guards.len() + 1, "{listed:?}");
    for guard in guards {
        assert!(guard.release().await.expect("release"));
    }
    assert!(reader.release().await.expect("release"));
    assert!(backend.list(ADMIN_LIMIT).await.expect("list").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn names_whose_keys_collide_get_keys_of_their_own() {
    let table = unique("collide");
    let backend = open(&advisory_url(&url(), &table, fresh_class())).await;
    let a = client(backend.clone(), PATIENCE);
    let admin = admin().await;
    let objid_of = |lock: LockName| {
        let admin = &admin;
        let sql = format!("SELECT objid FROM public.\"{table}\" WHERE name = $1");
        async move {
            let bytes = lock.as_str().as_bytes().to_vec();
            let rows = admin
                .query_typed(&sql, &[(&bytes, Type::BYTEA)])
                .await
                .expect("read the key");
            rows.first().map(|row| row.get::<_, i32>(0))
        }
    };
    // Another name already has the key that `wanted` hashes to: it takes
    // `wanted`'s first key before `wanted` ever asks.
    let wanted = name(&unique("wanted"));
    let probe_table = unique("probe");
    let probe = client(
        open(&advisory_url(&url(), &probe_table, fresh_class())).await,
        PATIENCE,
    );
    // Read while held: the release deletes the row.
    let probed = probe
        .acquire_with(&wanted, PATIENCE)
        .await
        .expect("acquire");
    let hashed: i32 = admin
        .query_typed(
            &format!("SELECT objid FROM public.\"{probe_table}\" WHERE name = $1"),
            &[(&wanted.as_str().as_bytes().to_vec(), Type::BYTEA)],
        )
        .await
        .expect("read the key")[0]
        .get(0);
    assert!(probed.release().await.expect("release"));
    let squatter = name(&unique("squatter"));
    admin
        .query_typed(
            &format!(
                "INSERT INTO public.\"{table}\" (name, objid, fencing_token) VALUES ($1, $2, 0)"
            ),
            &[
                (&squatter.as_str().as_bytes().to_vec(), Type::BYTEA),
                (&hashed, Type::INT4),
            ],
        )
        .await
        .expect("insert the colliding name");

    let held = a.acquire_with(&squatter, PATIENCE).await.expect("squatter");
    let other = a
        .try_acquire(&wanted)
        .await
        .expect("try")
        .expect("a colliding name is another lock");
    assert_eq!(objid_of(squatter.clone()).await, Some(hashed));
    let moved = objid_of(wanted.clone()).await.expect("wanted has a key");
    assert_ne!(moved, hashed);
    assert_eq!(moved % 2, 0);
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    for lock in [&squatter, &wanted] {
        assert!(listed.iter().any(|info| info.name == *lock), "{listed:?}");
    }
    assert!(held.release().await.expect("release"));
    assert!(other.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn classes_are_validated_and_keep_locks_apart() {
    for bad in ["-1", "2147483648", "twelve"] {
        match PostgresBackend::open(&with_options(
            &url(),
            &format!("mode=advisory&advisory_class={bad}"),
        ))
        .await
        {
            Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "advisory_class"),
            other => panic!("advisory_class={bad} must be refused, got {other:?}"),
        }
    }
    let config =
        distlock_postgres::PostgresConfig::parse(&with_options(&url(), "mode=advisory")).unwrap();
    assert_eq!(config.advisory_class, DEFAULT_ADVISORY_CLASS);

    // The same name in two classes is two locks.
    let table = unique("classes");
    let one = client(
        open(&advisory_url(&url(), &table, fresh_class())).await,
        PATIENCE,
    );
    let two = client(
        open(&advisory_url(&url(), &unique("classes"), fresh_class())).await,
        PATIENCE,
    );
    let lock = name(&unique("classes"));
    let first = one.acquire_with(&lock, PATIENCE).await.expect("one");
    let second = two
        .try_acquire(&lock)
        .await
        .expect("try")
        .expect("another class");
    assert!(first.release().await.expect("release"));
    assert!(second.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_mode_table_is_refused_and_force_release_ends_every_holder() {
    let table = unique("modes");
    let lease_mode = open(&with_options(&url(), &format!("table={table}"))).await;
    drop(lease_mode);
    let refused = PostgresBackend::open(&advisory_url(&url(), &table, fresh_class())).await;
    assert_invalid_config(&refused, "table", "mode=lease");

    let class = fresh_class();
    let backend = open(&advisory_url(&url(), &unique("force"), class)).await;
    let lock = name(&unique("force"));
    assert!(
        !backend
            .force_release(&lock, ADMIN_LIMIT)
            .await
            .expect("nothing held")
    );
    let request = AcquireRequest::new(
        lock.clone(),
        Claim::Shared,
        PATIENCE,
        Holder::this_process(None).into(),
    );
    let mut grants = Vec::new();
    for _ in 0..2 {
        let request = AcquireRequest {
            lease_id: distlock_core::backend::LeaseId::random(),
            ..request.clone()
        };
        let grant = try_grant(&*backend, &request).await.expect("try");
        grants.push(grant.expect("readers share"));
    }
    let admin = admin().await;
    assert_eq!(holders_in(&admin, class).await.len(), 2);
    assert!(
        backend
            .force_release(&lock, ADMIN_LIMIT)
            .await
            .expect("force release")
    );
    assert!(holders_in(&admin, class).await.is_empty());
    for grant in &grants {
        assert!(!backend.extend(grant).await.expect("extend"));
        assert!(!backend.release(grant).await.expect("release"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opening_through_a_transaction_pooler_is_refused() {
    let pgbouncer = std::env::var("DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL").unwrap_or_else(|_| {
        panic!(
            "DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL is not set: run the tests with scripts/test, \
             which starts PgBouncer"
        )
    });
    for _ in 0..5 {
        let pooled =
            PostgresBackend::open(&advisory_url(&pgbouncer, &unique("pooled"), fresh_class()))
                .await;
        assert_invalid_config(&pooled, "mode", "PgBouncer");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_the_server_cannot_enforce_is_refused() {
    let backend = open(&advisory_url(&url(), &unique("t"), fresh_class())).await;
    let longest = distlock_postgres::MAX_ADVISORY_LEASE;
    let client = |lease| {
        LockClient::builder()
            .lease(lease)
            .build_shared(backend.clone())
            .unwrap()
    };
    // At the bound, the server takes it and enforces it.
    let guard = client(longest).try_acquire("longest").await.unwrap();
    assert!(guard.expect("a free name").release().await.unwrap());
    // A second more, and the call says which option to change.
    let outcome = client(longest + Duration::from_secs(1))
        .acquire_with("too-long", Duration::from_secs(5))
        .await;
    assert!(
        matches!(&outcome, Err(Error::InvalidConfig { field, .. }) if field == "lease"),
        "{outcome:?}"
    );
}

/// A release whose notification the server refuses for a full queue did
/// unlock: advisory unlocks take effect at once and are not undone with
/// the statement. So it reports success, and the name is free (review
/// finding 9). The full queue (8 GB) is stood in for by a `pg_notify` of
/// the test's own, ahead of the server's on the backend's search path,
/// that refuses with the same error, SQLSTATE 54000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_for_a_full_notification_queue_reports_success() {
    let admin = admin().await;
    let schema = unique("full_queue");
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE FUNCTION {schema}.pg_notify(text, text) RETURNS void LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'queue full' USING ERRCODE = '54000'; END $$;"
        ))
        .await
        .expect("the refusing pg_notify");
    let (table, class) = (unique("t"), fresh_class());
    let refusing = with_options(
        &advisory_url(&url(), &table, class),
        &format!("options=-c%20search_path%3D{schema}%2Cpublic%2Cpg_catalog"),
    );
    let backend = open(&refusing).await;
    let client = client(backend, PATIENCE);
    let guard = client
        .try_acquire("queue-full")
        .await
        .expect("try")
        .expect("a free name");
    assert!(
        guard.release().await.expect("the release succeeds"),
        "the lock was ours"
    );
    assert!(holders_in(&admin, class).await.is_empty(), "unlocked");
    let other = client_for(&advisory_url(&url(), &table, class)).await;
    let again = other
        .try_acquire("queue-full")
        .await
        .expect("try")
        .expect("the name is free");
    again.release().await.expect("release");
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop the schema");
}

async fn client_for(url: &str) -> LockClient {
    client(open(url).await, PATIENCE)
}

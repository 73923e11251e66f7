//! Leases, releases and opening, on the shared servers that scripts/test
//! starts.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend};
use distlock_core::testing::assert_invalid_config;
use distlock_core::{AcquireOptions, Error, Holder, LockClient, LockOptions};
use distlock_memcached::{MAX_LEASE, MemcachedBackend, MemcachedConfig, Mode};

use distlock_core::testing::ADMIN_LIMIT;
use support::{Peek, eventually, grant, quorum_url, unique, url};

async fn open(url: &str) -> MemcachedBackend {
    MemcachedBackend::open(url).await.expect("open")
}

/// A client of `backend` whose leases last two seconds.
fn two_second_client(backend: Arc<dyn Backend>) -> LockClient {
    let options = LockOptions::builder()
        .lease(Duration::from_secs(2))
        .build()
        .unwrap();
    LockClient::new(backend, options)
}

/// The shared sharded server's address.
fn sharded_addr() -> String {
    MemcachedConfig::parse(&url()).unwrap().servers()[0].clone()
}

#[tokio::test]
async fn a_200ms_lease_is_stored_for_whole_seconds_never_zero() {
    let backend = open(&url()).await;
    let name = unique("ttl-short");
    let lease = grant(&backend, &name, Duration::from_millis(200))
        .await
        .expect("a fresh name is free");
    let mut peek = Peek::connect(&sharded_addr()).await;
    let item = peek
        .get(&backend.lock_key(&name))
        .await
        .expect("the lock is stored");
    // Rounded up to 1 s, plus the second memcached's clock may take away:
    // 2 s, of which the server may already have counted one.
    assert!(
        (1..=2).contains(&item.ttl),
        "the expiry is whole seconds, neither 0 nor never: {}",
        item.ttl
    );
    // It does expire.
    eventually("the short lease to expire", || async {
        peek_missing(&backend.lock_key(&name)).await
    })
    .await;
    assert!(!backend.extend(&lease).await.expect("extend"));
}

async fn peek_missing(key: &str) -> bool {
    Peek::connect(&sharded_addr())
        .await
        .get(key)
        .await
        .is_none()
}

#[tokio::test]
async fn leases_over_thirty_days_are_refused_naming_the_lease() {
    let backend = open(&url()).await;
    let name = unique("ttl-long");
    let request = AcquireRequest::new(
        name.clone(),
        distlock_core::Claim::Exclusive,
        Duration::from_secs(31 * 86_400),
        Holder::this_process(None).into(),
    );
    let attempt = backend
        .try_acquire(&request, &mut distlock_core::backend::WaitState::new())
        .await;
    assert_invalid_config(&attempt, "lease", "30 days");
    let mut peek = Peek::connect(&sharded_addr()).await;
    assert_eq!(
        peek.get(&backend.lock_key(&name)).await,
        None,
        "nothing stored"
    );

    // The longest lease memcached can express works.
    let lease = grant(&backend, &name, MAX_LEASE).await.expect("free");
    let item = peek.get(&backend.lock_key(&name)).await.expect("stored");
    assert!(item.ttl > 29 * 86_400, "{}", item.ttl);
    assert!(backend.release(&lease).await.expect("release"));
}

/// A holder whose lease ran out releases after another process took the
/// lock: the new holder's key stays, and so does its lock.
async fn stale_release_leaves_the_new_holder(url: &str) {
    let stale = open(url).await;
    let fresh = open(url).await;
    let name = unique("stale");
    let old = grant(&stale, &name, Duration::from_secs(1))
        .await
        .expect("free");
    let started = std::time::Instant::now();
    let new = loop {
        if let Some(new) = grant(&fresh, &name, Duration::from_secs(60)).await {
            break new;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the unextended lease never ran out"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(new.fencing_token > old.fencing_token);
    assert!(
        !stale.extend(&old).await.expect("stale extend"),
        "a stale holder cannot extend"
    );
    assert!(
        !stale.release(&old).await.expect("stale release"),
        "a stale release reports false"
    );
    assert!(
        grant(&stale, &name, Duration::from_secs(60))
            .await
            .is_none(),
        "the new holder's lock is intact"
    );
    assert!(
        fresh.extend(&new).await.expect("extend"),
        "and still its own"
    );
    assert!(fresh.release(&new).await.expect("release"));
}

#[tokio::test]
async fn stale_release_leaves_the_new_holder_sharded() {
    stale_release_leaves_the_new_holder(&url()).await;
}

#[tokio::test]
async fn stale_release_leaves_the_new_holder_quorum() {
    stale_release_leaves_the_new_holder(&quorum_url()).await;
}

#[tokio::test]
async fn waiters_learn_when_the_lease_ends() {
    let backend = open(&url()).await;
    let name = unique("retry-after");
    let lease = grant(&backend, &name, Duration::from_secs(30))
        .await
        .unwrap();
    let request = AcquireRequest::new(
        name.clone(),
        distlock_core::Claim::Exclusive,
        Duration::from_secs(30),
        Holder::this_process(None).into(),
    );
    match backend
        .try_acquire(&request, &mut distlock_core::backend::WaitState::new())
        .await
        .expect("try")
    {
        Attempt::Held {
            retry_after: Some(left),
        } => assert!(
            left <= Duration::from_secs(31) && left >= Duration::from_secs(1),
            "{left:?}"
        ),
        other => panic!("expected held with a time, got {other:?}"),
    }
    assert!(backend.release(&lease).await.unwrap());
}

#[tokio::test]
async fn locks_are_stored_under_the_prefix_with_the_name_recoverable() {
    let prefixed = format!("{}?prefix=tests%2Fp1:", url());
    let backend = open(&prefixed).await;
    let name = unique("prefix a\r\nb");
    let lease = grant(&backend, &name, Duration::from_secs(30))
        .await
        .unwrap();
    let key = backend.lock_key(&name);
    assert!(key.starts_with("tests/p1:L="), "{key}");
    let item = Peek::connect(&sharded_addr())
        .await
        .get(&key)
        .await
        .expect("stored");
    let text = String::from_utf8(item.value).unwrap();
    let (id, json) = text.split_once('\n').unwrap();
    assert_eq!(id, lease.id.to_string());
    let details: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(details["name"], name.as_str());
    // Another prefix is another key space.
    let other = open(&url()).await;
    let mine = grant(&other, &name, Duration::from_secs(30))
        .await
        .expect("a different prefix does not contend");
    assert!(other.release(&mine).await.unwrap());
    assert!(backend.release(&lease).await.unwrap());
}

#[tokio::test]
async fn the_raw_baseline_takes_and_releases() {
    let backend = open(&url()).await;
    let raw = backend.raw();
    let name = unique("raw");
    let grant = raw
        .try_lock(&name, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("free");
    assert_eq!(grant.name(), &name);
    assert!(
        raw.try_lock(&name, Duration::from_secs(30))
            .await
            .unwrap()
            .is_none()
    );
    assert!(raw.unlock(grant.clone()).await.unwrap());
    assert!(
        !raw.unlock(grant).await.unwrap(),
        "a second unlock is false"
    );
}

#[tokio::test]
async fn opening_reports_unreachable_servers_and_bad_urls() {
    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = MemcachedBackend::open(&format!("memcache://127.0.0.1:{closed}?timeout=500ms"))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Backend { .. }), "{error:?}");
    assert!(error.to_string().contains(&closed.to_string()), "{error}");

    let two = MemcachedBackend::open(&format!("{}?mode=quorum", url())).await;
    assert!(matches!(two, Err(Error::InvalidConfig { .. })));

    // Quorum mode opens with a majority.
    let config = MemcachedConfig::parse(&quorum_url()).unwrap();
    let mut servers = config.servers().to_vec();
    servers[2] = format!("127.0.0.1:{closed}");
    let degraded = MemcachedConfig::builder(servers)
        .mode(Mode::Quorum)
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let backend = MemcachedBackend::connect(degraded).await.expect("2 of 3");
    let name = unique("degraded");
    let lease = grant(&backend, &name, Duration::from_secs(30))
        .await
        .expect("2 of 3 grant");
    assert!(backend.release(&lease).await.unwrap());
}

#[tokio::test]
async fn stats_report_every_server() {
    let backend = open(&quorum_url()).await;
    let stats = backend.stats().await.unwrap();
    assert_eq!(stats.len(), 3);
    for (_, values) in &stats {
        assert!(values.iter().any(|(name, _)| name == "evictions"));
    }
}

#[tokio::test]
async fn a_client_holds_and_lists_through_the_backend() {
    let client = two_second_client(Arc::new(open(&url()).await));
    let name = unique("client");
    let guard = client
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    let listed = client.list().await.unwrap();
    let info = listed
        .iter()
        .find(|info| info.name == name)
        .expect("listed");
    assert_eq!(info.fencing_token, Some(guard.fencing_token()));
    assert!(client.force_release(&name).await.unwrap());
    assert!(
        !client
            .list()
            .await
            .unwrap()
            .iter()
            .any(|info| info.name == name),
        "a forced release drops the lock from the list"
    );
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_held_locks_outlive_their_lease() {
    let client = two_second_client(Arc::new(open(&url()).await));
    let names: Vec<_> = (0..1000).map(|_| unique("many")).collect();
    let guards: Vec<_> =
        futures::future::join_all(names.iter().map(|name| client.try_acquire(name)))
            .await
            .into_iter()
            .map(|guard| guard.expect("try").expect("free"))
            .collect();
    // Two leases: every lock needed extending at least twice.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        guards.iter().all(|guard| !guard.is_lost()),
        "a lock was lost"
    );
    assert_eq!(client.list().await.unwrap().len(), 1000);
    for released in futures::future::join_all(guards.into_iter().map(|guard| guard.release())).await
    {
        assert!(released.expect("release"), "still ours");
    }
}

/// A guard dropped with no runtime left drops its grant's state at once:
/// the backend forgets the grant, so `list` shows nothing (the lock on the
/// server runs out with its lease).
#[test]
fn a_guard_dropped_with_no_runtime_leaves_nothing_listed() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let (name, semaphore) = (unique("no-runtime"), unique("no-runtime-permits"));
    let first = runtime();
    let backend = Arc::new(first.block_on(open(&url())));
    let client = two_second_client(backend.clone());
    let guards = first.block_on(async {
        let guard = client
            .acquire_with(&name, Duration::from_secs(5))
            .await
            .unwrap();
        let permit = client
            .acquire_with(
                &semaphore,
                AcquireOptions::new()
                    .permit(2)
                    .timeout(Duration::from_secs(5)),
            )
            .await
            .unwrap();
        let listed = backend.list(ADMIN_LIMIT).await.unwrap();
        assert_eq!(listed.len(), 2, "{listed:?}");
        (guard, permit)
    });
    drop(first);
    drop(guards);
    drop(client);
    // Nothing is left to check against the servers: `list` needs no call.
    let listed = runtime().block_on(backend.list(ADMIN_LIMIT)).expect("list");
    assert!(listed.is_empty(), "{listed:?}");
}

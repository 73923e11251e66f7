//! Quorum mode on three memcached processes of the test's own, some of
//! which the tests kill or restart.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::Backend;
use distlock_core::testing::assert_still_held;
use distlock_core::{LockClient, LockOptions};
use distlock_memcached::MemcachedBackend;

use distlock_core::testing::ADMIN_LIMIT;
use support::{OwnServer, Peek, grant, unique};

struct Cluster {
    servers: Vec<OwnServer>,
}

impl Cluster {
    async fn start() -> Self {
        let mut servers = Vec::new();
        for _ in 0..3 {
            servers.push(OwnServer::start(&[]).await);
        }
        Self { servers }
    }

    fn url(&self) -> String {
        let addrs: Vec<String> = self.servers.iter().map(OwnServer::addr).collect();
        format!("memcache://{}?mode=quorum&timeout=500ms", addrs.join(","))
    }

    async fn backend(&self) -> MemcachedBackend {
        MemcachedBackend::open(&self.url()).await.expect("open")
    }

    async fn client(&self) -> LockClient {
        LockClient::new(
            Arc::new(self.backend().await),
            LockOptions::builder()
                .lease(Duration::from_secs(2))
                .extend_every(Duration::from_millis(500))
                .build()
                .unwrap(),
        )
    }
}

/// Waits two full leases, so that every surviving key has been extended.
async fn two_leases() {
    tokio::time::sleep(Duration::from_secs(4)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_of_three_keeps_the_lock() {
    let mut cluster = Cluster::start().await;
    let holder = cluster.client().await;
    let other = cluster.client().await;
    let name = unique("minority");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();

    cluster.servers[0].kill();
    two_leases().await;
    assert_still_held(&guard, &other).await;
    assert!(
        guard.release().await.expect("release"),
        "released on 2 of 3"
    );

    // A new acquire needs 2 of 3, and 2 of 3 are there.
    let again = other
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .expect("2 of 3 grant");
    assert!(again.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_two_of_three_loses_the_lock() {
    let mut cluster = Cluster::start().await;
    let holder = cluster.client().await;
    let name = unique("majority");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    let other = cluster.backend().await;

    cluster.servers[0].kill();
    cluster.servers[1].kill();
    tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("the holder reports the loss");
    let attempt = other
        .try_acquire(
            &distlock_core::backend::AcquireRequest::new(
                name.clone(),
                distlock_core::Claim::Exclusive,
                Duration::from_secs(2),
                distlock_core::Holder::this_process(None).into(),
            ),
            &mut distlock_core::backend::WaitState::new(),
        )
        .await;
    assert!(
        attempt.is_err(),
        "one server of three cannot grant, and says so: {attempt:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_decides_and_partial_grants_are_rolled_back() {
    let cluster = Cluster::start().await;
    let backend = cluster.backend().await;
    let name = unique("partial");
    let key = backend.lock_key(&name);
    let mut peeks = Vec::new();
    for server in &cluster.servers {
        peeks.push(Peek::connect(&server.addr()).await);
    }

    // Someone else's key on two servers: a majority is taken.
    peeks[0].set(&key, b"someone else", 60).await;
    peeks[1].set(&key, b"someone else", 60).await;
    assert!(
        grant(&backend, &name, Duration::from_secs(30))
            .await
            .is_none(),
        "one server of three is not a majority"
    );
    assert_eq!(
        peeks[2].get(&key).await,
        None,
        "the grant on the third server was rolled back"
    );

    // On one server only: two of three grant.
    assert!(backend.force_release(&name, ADMIN_LIMIT).await.unwrap());
    peeks[0].set(&key, b"someone else", 60).await;
    let lease = grant(&backend, &name, Duration::from_secs(30))
        .await
        .expect("two of three grant");
    assert_eq!(
        peeks[0].get(&key).await.unwrap().value,
        b"someone else",
        "the other key is untouched"
    );
    assert!(backend.release(&lease).await.unwrap());
    assert_eq!(peeks[0].get(&key).await.unwrap().value, b"someone else");
    assert_eq!(peeks[1].get(&key).await, None);
    assert_eq!(peeks[2].get(&key).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_gets_the_lock_back_and_tokens_keep_rising() {
    let mut cluster = Cluster::start().await;
    let holder = cluster.client().await;
    let other = cluster.client().await;
    let name = unique("restarted");
    let first = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    let token = first.fencing_token();
    assert!(first.release().await.unwrap());

    let guard = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(guard.fencing_token() > token);
    cluster.servers[2].restart().await;
    two_leases().await;
    assert_still_held(&guard, &other).await;
    // The extension restored the key on the restarted server.
    let lock_key = MemcachedBackend::open(&cluster.url())
        .await
        .unwrap()
        .lock_key(&name);
    let restored = Peek::connect(&cluster.servers[2].addr())
        .await
        .get(&lock_key)
        .await;
    assert!(
        restored.is_some(),
        "the restarted server holds the lock again"
    );
    let held_token = guard.fencing_token();
    assert!(guard.release().await.unwrap());

    // Its counter restarted from the clock; the others' did not. Tokens
    // keep rising either way.
    let next = other
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(next.fencing_token() > held_token);
    assert!(next.release().await.unwrap());
}

/// Each server restarts in turn, forgetting its copy, while one lock is
/// held throughout: each extension puts the copy back, so no restart
/// leaves a majority without it, nobody else is granted, and the holder
/// never loses the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_of_each_server_in_turn_keep_one_lock_held_throughout() {
    let mut cluster = Cluster::start().await;
    let holder = cluster.client().await;
    let other = cluster.client().await;
    let name = unique("in-turn");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    let lock_key = MemcachedBackend::open(&cluster.url())
        .await
        .unwrap()
        .lock_key(&name);
    for restarted in 0..cluster.servers.len() {
        cluster.servers[restarted].restart().await;
        let mut peek = Peek::connect(&cluster.servers[restarted].addr()).await;
        assert_eq!(
            peek.get(&lock_key).await,
            None,
            "server {restarted} forgot the copy"
        );
        two_leases().await;
        assert_still_held(&guard, &other).await;
        assert!(
            peek.get(&lock_key).await.is_some(),
            "the extension put the copy back on server {restarted}"
        );
    }
    assert!(!guard.is_lost());
    assert!(guard.release().await.unwrap());
}

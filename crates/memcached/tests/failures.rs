//! What memcached can lose, on servers of the tests' own: a restart while a
//! lock is held, an eviction, and a server that stops answering.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{Backend, Lease, LeaseId};
use distlock_core::testing::assert_lost_to_a_restart;
use distlock_core::{LockClient, LockOptions, LossReason};
use distlock_memcached::MemcachedBackend;

use support::{OwnServer, Peek, unique};

fn options() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(2))
        .extend_every(Duration::from_millis(500))
        .build()
        .unwrap()
}

async fn client(addr: &str) -> LockClient {
    let backend = MemcachedBackend::open(&format!("memcache://{addr}?timeout=500ms"))
        .await
        .expect("open");
    LockClient::new(Arc::new(backend), options())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_held_is_reported_at_the_next_extension() {
    let mut server = OwnServer::start(&[]).await;
    let holder = client(&server.addr()).await;
    let name = unique("restart");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();

    server.restart().await;
    // The restarted server answers that the key is gone; its counter went
    // with it, and the next token comes from the clock.
    assert_lost_to_a_restart(guard, &client(&server.addr()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_lock_is_detected_as_lost() {
    let server = OwnServer::start(&["-m", "4"]).await;
    let holder = client(&server.addr()).await;
    let name = unique("evicted");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(5))
        .await
        .unwrap();
    let mut filler = Peek::connect(&server.addr()).await;
    let key = holder_key(&server, &name).await;
    let size = filler
        .get(&key)
        .await
        .expect("the lock is stored")
        .value
        .len();
    // Items the size of the lock, with keys as long as its key, so that
    // they compete for the same slab class, until memcached has evicted the
    // lock and its holder has noticed.
    let prefix = "f".repeat(key.len() - 8);
    let mut written = 0;
    while !guard.is_lost() {
        let refused = filler.fill(&prefix, written, 5_000, size).await;
        assert_eq!(refused, 0, "memcached refused filler items");
        written += 5_000;
        assert!(written < 5_000_000, "the lock was never evicted");
    }
    let reason = guard.lost().await;
    assert_eq!(
        reason,
        LossReason::Refused,
        "the extension found the key gone"
    );
    assert!(filler.stat("evictions").await > 0);
    assert_eq!(filler.get(&key).await, None, "the key is gone");
    assert!(!guard.release().await.unwrap());
    let other = client(&server.addr()).await;
    let again = other
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(again.release().await.unwrap());
}

async fn holder_key(server: &OwnServer, name: &distlock_core::LockName) -> String {
    MemcachedBackend::open(&format!("memcache://{}", server.addr()))
        .await
        .unwrap()
        .lock_key(name)
}

/// In sharded mode the backend bounds its own calls (core sets no timer of
/// its own around them): against a server that stops answering, acquire,
/// hand-over and release still end, with an error, and the lock works
/// again once the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_server_that_stops_answering_end_with_an_error() {
    let server = OwnServer::start(&[]).await;
    let url = format!("memcache://{}?timeout=300ms", server.addr());
    // 300 ms is short for a machine busy with other tests: the steps before
    // the pause are tried again, so that only the pause is put to the test.
    let backend = until_ok(|| MemcachedBackend::open(&url)).await;
    assert!(distlock_core::backend::Backend::capabilities(&backend).bounds_calls);
    let holder = LockClient::new(Arc::new(backend), options());
    let name = unique("paused");
    let held = until_ok(|| holder.acquire_with(&name, Duration::from_secs(10))).await;
    let waiter = {
        let (holder, name) = (holder.clone(), name.clone());
        tokio::spawn(async move { holder.acquire_with(&name, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;

    server.pause();
    // Hang guards only: each call ends after its 300 ms of patience.
    let released = tokio::time::timeout(Duration::from_secs(20), held.release())
        .await
        .expect("the hand-over or release ended");
    assert!(released.is_err(), "nothing answered: {released:?}");
    let other = unique("paused-other");
    let tried = tokio::time::timeout(Duration::from_secs(20), holder.try_acquire(&other))
        .await
        .expect("the attempt ended");
    assert!(tried.is_err(), "nothing answered: {tried:?}");

    // The waiter, whose turn came with the failed hand-over, keeps trying
    // through the errors, and gets the lock once the server answers again
    // (a grant left by the failed release ends with its lease).
    server.resume();
    let waited = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the waiter ended")
        .unwrap();
    let guard = waited.expect("the wait outlived the pause");
    assert!(guard.release().await.unwrap());
    // Once the server answers again the lock works: any grant left by the
    // failed calls is released by identity or expires with its lease.
    let guard = holder
        .acquire_with(&name, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(guard.release().await.unwrap());
}

/// The first success of `attempt`, tried for at most 20 s.
async fn until_ok<T, E: std::fmt::Debug, Fut>(attempt: impl Fn() -> Fut) -> T
where
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let started = std::time::Instant::now();
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(error) if started.elapsed() > Duration::from_secs(20) => {
                panic!("still failing after 20 s: {error:?}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// memcached deletes a key's item when it cannot store a new one there, even
/// for an `add` that was never going to succeed. So no lock value may be
/// too large for the server, or a competitor with a long label would free
/// the holder's lock. On the smallest item size memcached allows, every
/// name and label still fits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_competitor_frees_the_lock_with_a_value_too_large_for_the_server() {
    let server = OwnServer::start(&["-I", "1k", "-o", "slab_chunk_max=512"]).await;
    let labelled = |label: String| {
        let addr = server.addr();
        async move {
            let backend = MemcachedBackend::open(&format!("memcache://{addr}?timeout=500ms"))
                .await
                .expect("open");
            let options = LockOptions::builder()
                .lease(Duration::from_secs(30))
                .label(label)
                .build()
                .unwrap();
            LockClient::new(Arc::new(backend), options)
        }
    };
    let holder = labelled("holder".into()).await;
    let competitor = labelled("é".repeat(32 * 1024)).await;
    let bystander = labelled("bystander".into()).await;

    let names = [
        unique("too-large"),
        unique(&"r".repeat(230)),
        unique(&"\r\n".repeat(500)),
    ];
    for name in &names {
        let guard = holder.try_acquire(name).await.unwrap().expect("free");
        assert!(competitor.try_acquire(name).await.unwrap().is_none());
        assert!(
            bystander.try_acquire(name).await.unwrap().is_none(),
            "{name}: the holder's lock survived the competitor"
        );
        guard.extend().await.unwrap();
        assert!(guard.release().await.unwrap());
        // The competitor's own, shortened value fits too.
        let taken = competitor.try_acquire(name).await.unwrap().expect("free");
        assert!(taken.release().await.unwrap());
    }
}

/// A grant whose answer was lost is released by its identity. The store
/// itself may still be queued, on another connection than that release,
/// and land after it looked: the backend looks once more, later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_lands_after_its_release_looked_is_released_too() {
    let server = OwnServer::start(&[]).await;
    let backend = MemcachedBackend::open(&format!("memcache://{}?timeout=300ms", server.addr()))
        .await
        .expect("open");
    let name = unique("late");
    let lease = Lease {
        name: name.clone(),
        id: LeaseId::random(),
        fencing_token: 1,
        lease: Duration::from_secs(60),
        operation_timeout: Duration::from_secs(1),
        claim: distlock_core::Claim::Exclusive,
        state: distlock_core::backend::GrantState::none(),
    };
    assert!(!backend.release(&lease).await.unwrap(), "nothing there yet");

    // The grant lands now, as the lost answer's store would.
    let key = backend.lock_key(&name);
    let mut peek = Peek::connect(&server.addr()).await;
    peek.set(&key, format!("{}\n{{}}", lease.id).as_bytes(), 600)
        .await;
    support::eventually("the late grant is released", || {
        let (addr, key) = (server.addr(), key.clone());
        async move { Peek::connect(&addr).await.get(&key).await.is_none() }
    })
    .await;
}

//! Releases through a connection that fails (finding 13): a release that
//! fails as an election would make it fail is tried again within its
//! operation timeout, and a delete that happened without its answer still
//! counts as released. A proxy sits between the client and the test
//! member that `scripts/test` starts (`DISTLOCK_TEST_ETCD_URL`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{LockClient, LockName, LockOptions};
use distlock_etcd::EtcdBackend;
use distlock_faultproxy::{Fault, FaultProxy};

#[path = "support/member.rs"]
mod member;

use member::{PATIENCE, range_of, unique, url};

fn member() -> String {
    url().replacen("etcd://", "", 1)
}

/// A client of the test member through a new proxy.
async fn through_proxy() -> (LockClient, Arc<EtcdBackend>, FaultProxy) {
    let upstream: SocketAddr = member().parse().expect("host:port");
    let proxy = FaultProxy::start(upstream).expect("start the proxy");
    let backend = Arc::new(
        EtcdBackend::open(&format!("etcd://{}", proxy.addr()))
            .await
            .expect("open etcd"),
    );
    let options = LockOptions::builder()
        .lease(Duration::from_secs(6))
        .operation_timeout(Duration::from_secs(3))
        .build()
        .expect("valid options");
    (LockClient::new(backend.clone(), options), backend, proxy)
}

/// How many keys `name` has, read straight from the member.
async fn keys_of(backend: &EtcdBackend, name: &LockName) -> usize {
    range_of(backend, name).await.len()
}

/// The connection breaks and new ones are refused as the release is sent;
/// the fault is cleared only once a try was refused. The release is tried
/// again and deletes the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_that_fails_is_tried_again_within_its_operation_timeout() {
    let (client, backend, proxy) = through_proxy().await;
    let proxy = Arc::new(proxy);
    let name = unique("release-retried");
    let guard = client.acquire(&name).await.expect("acquire");
    proxy.set_fault(Fault::Refuse);
    proxy.reset_all();
    let clearing = {
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            while proxy.stats().refused == 0 {
                assert!(started.elapsed() < PATIENCE, "no try was refused");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            proxy.clear();
        })
    };
    let released = guard.release().await;
    // A release that gave up at once never saw the fault cleared.
    clearing.abort();
    proxy.clear();
    assert!(
        released.expect("released after the failed try"),
        "the lock was still ours"
    );
    assert_eq!(keys_of(&backend, &name).await, 0, "the key is gone");
}

/// The release reaches etcd and deletes the key, but its answer is lost
/// with its connection: the next try finds the key gone while the session
/// lives, which only this release can have done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_whose_answer_was_lost_counts_as_released() {
    let (client, backend, proxy) = through_proxy().await;
    let name = unique("release-unanswered");
    let guard = client.acquire(&name).await.expect("acquire");
    let lost = guard.lost_signal();
    proxy.set_fault(Fault::ResetAfterRequest);
    assert!(
        guard.release().await.expect("released"),
        "our own delete is a release, not a loss"
    );
    assert_eq!(proxy.fault(), Fault::None, "the request's answer was lost");
    assert_eq!(keys_of(&backend, &name).await, 0, "the key is gone");
    assert_eq!(lost.lost().await, distlock_core::LossReason::Released);
}

//! `etcds://` against a member of the test's own that serves TLS only,
//! with a certificate from a throwaway CA: trusted through `?ca=`, the
//! backend takes and gives back a lock; without it, the member's
//! certificate is not trusted (the backend then trusts Mozilla's roots
//! alone), and no call goes through.

// Shared with the cluster tests, which use the rest of it.
#[allow(dead_code)]
mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{Error, LockClient, LockName, LockOptions};
use distlock_etcd::EtcdBackend;

use support::lone_member::LoneMember;

fn client(backend: EtcdBackend) -> LockClient {
    let options = LockOptions::builder()
        .lease(Duration::from_secs(5))
        .build()
        .expect("valid options");
    LockClient::new(Arc::new(backend), options)
}

fn name() -> LockName {
    LockName::new(format!("tls-{:016x}", rand::random::<u64>())).expect("name")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_private_ca_given_by_url_is_trusted() {
    let member = LoneMember::start_tls();
    member.wait_healthy().await;
    let ca = member.ca().expect("a TLS member has a CA").display();
    let url = format!("etcds://{}?ca={ca}", member.host());
    let backend = EtcdBackend::open(&url).await.expect("open");
    let client = client(backend);
    let guard = client
        .try_acquire(&name())
        .await
        .expect("try_acquire over TLS")
        .expect("a free name is granted");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_ca_the_members_certificate_is_refused() {
    let member = LoneMember::start_tls();
    member.wait_healthy().await;
    let url = format!("etcds://{}", member.host());
    let backend = EtcdBackend::open(&url)
        .await
        .expect("open (connects lazily)");
    let error = client(backend)
        .try_acquire(&name())
        .await
        .expect_err("a certificate from an unknown CA is refused");
    // A refused handshake is a backend error: the call went nowhere.
    assert!(matches!(error, Error::Backend { .. }), "{error:?}");
    let mut chain = format!("{error}");
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        chain.push_str(&format!(" / {cause}"));
        source = cause.source();
    }
    assert!(chain.contains("UnknownIssuer"), "why it failed: {chain}");
}

//! What the tests against the one test member share: its URL, unique
//! names, a backend and a client of it, and a raw client to look at the
//! keys of a name by hand. `scripts/test` starts etcd and sets
//! `DISTLOCK_TEST_ETCD_URL`.

// Each test file includes this module and uses a part of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{LockClient, LockName};
use distlock_etcd::EtcdBackend;
use distlock_etcd::raw::etcdserverpb::RangeRequest;
use distlock_etcd::raw::mvccpb::KeyValue;
use distlock_etcd::raw::{Client, ConnectOptions};

// The options the child processes' tests use too.
#[path = "child.rs"]
mod child;

pub(crate) use child::options;

/// The test member's URL, `etcd://host:port`.
pub(crate) fn url() -> String {
    std::env::var("DISTLOCK_TEST_ETCD_URL").unwrap_or_else(|_| {
        panic!(
            "DISTLOCK_TEST_ETCD_URL is not set: run the tests with scripts/test, which starts etcd"
        )
    })
}

/// A name no other test uses: tests share the member.
pub(crate) fn unique(prefix: &str) -> LockName {
    LockName::new(format!("{prefix}-{:016x}", rand::random::<u64>())).expect("valid name")
}

/// A backend of the test member.
pub(crate) async fn backend() -> Arc<EtcdBackend> {
    Arc::new(EtcdBackend::open(&url()).await.expect("open etcd"))
}

/// A client of `backend`, with [`options`] for `lease`.
pub(crate) fn client_of(backend: &Arc<EtcdBackend>, lease: Duration) -> LockClient {
    LockClient::new(backend.clone(), options(lease))
}

/// A raw client of the test member at `url`, to look at or change keys and
/// leases by hand.
pub(crate) async fn etcd_at(url: &str) -> Client {
    let member = url.replacen("etcd://", "http://", 1);
    Client::connect(&ConnectOptions::new([member]))
        .await
        .expect("connect")
}

/// A raw client of the test member.
pub(crate) async fn etcd() -> Client {
    etcd_at(&url()).await
}

/// The keys etcd holds in `name`'s range, in key order.
pub(crate) async fn range_of(backend: &EtcdBackend, name: &LockName) -> Vec<KeyValue> {
    let (key, range_end) = backend.key_range(name);
    etcd()
        .await
        .range(RangeRequest {
            key,
            range_end,
            ..RangeRequest::default()
        })
        .await
        .expect("read the name's keys")
        .kvs
}

/// How long a test waits for what must happen, at most: a bound on hangs,
/// not a claim about speed.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

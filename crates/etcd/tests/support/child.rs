//! What the etcd tests that run child processes (`cluster.rs`,
//! `partition.rs`) share with those children (tests/helpers): the client
//! options (which `member.rs` gives the other tests too), the client, and
//! the wall clock that every process of the machine reads, inside a
//! network namespace or not.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::testing::quick_options;
use distlock_core::{LockClient, LockOptions};
use distlock_etcd::EtcdBackend;

/// Options for a `lease`, with quick extension and backoff.
pub(crate) fn options(lease: Duration) -> LockOptions {
    quick_options(lease).build().expect("valid options")
}

/// A client of the etcd at `url`, with [`options`] for `lease`.
pub(crate) async fn client(url: &str, lease: Duration) -> LockClient {
    let backend = EtcdBackend::open(url)
        .await
        .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
    LockClient::new(Arc::new(backend), options(lease))
}

/// Nanoseconds on the wall clock, which every process of the machine
/// shares; nothing here shifts it during a test.
pub(crate) fn now_ns() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch");
    u64::try_from(since.as_nanos()).expect("fits 64 bits")
}

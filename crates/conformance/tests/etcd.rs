//! The conformance suite on etcd: on one member, and on a cluster of
//! three. `scripts/test` starts them and sets `DISTLOCK_TEST_ETCD_URL` and
//! `DISTLOCK_TEST_ETCD_CLUSTER_URL`.

mod support;

use std::time::Duration;

use distlock_conformance::conformance_suite;
use distlock_etcd::EtcdBackend;

use support::{OpenUrl, UrlFixture};

#[async_trait::async_trait]
impl OpenUrl for EtcdBackend {
    async fn open_url(url: &str) -> distlock_core::Result<Self> {
        Self::open(url).await
    }
}

/// etcd keeps a session a second longer than the lease, in whole seconds
/// (3 s for the suite's 2 s), so an abandoned key outlives its holder's
/// last renewal by up to that.
fn etcd(var: &str) -> UrlFixture<EtcdBackend> {
    UrlFixture::from_env(var, "etcd").with_expiry_slack(Duration::from_secs(1))
}

mod single {
    use super::*;
    conformance_suite!(etcd("DISTLOCK_TEST_ETCD_URL"));
}

mod cluster {
    use super::*;
    conformance_suite!(etcd("DISTLOCK_TEST_ETCD_CLUSTER_URL"));
}

//! The conformance suite on etcd in fair mode (`fair=true`), on one member
//! and on a cluster of three: every promise of the suite holds when whole
//! locks go to waiters in the order they asked. The URL carries the
//! option, so the cross-process cases' `distlock` children are fair too.
//! `scripts/test` starts etcd and sets `DISTLOCK_TEST_ETCD_URL` and
//! `DISTLOCK_TEST_ETCD_CLUSTER_URL`.

use std::sync::Arc;
use std::time::Duration;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::Backend;
use distlock_etcd::EtcdBackend;

struct FairEtcd {
    url: String,
}

impl FairEtcd {
    fn from_env(var: &str) -> Self {
        let url = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: run the tests with scripts/test, which starts etcd")
        });
        let separator = if url.contains('?') { '&' } else { '?' };
        Self {
            url: format!("{url}{separator}fair=true"),
        }
    }
}

#[async_trait::async_trait]
impl Fixture for FairEtcd {
    async fn backend(&self) -> Arc<dyn Backend> {
        let backend = EtcdBackend::open(&self.url)
            .await
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.url));
        assert!(backend.capabilities().fair, "{} is in fair mode", self.url);
        Arc::new(backend)
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    fn lease(&self) -> Duration {
        Duration::from_secs(2)
    }

    /// etcd keeps a session a second longer than the lease, in whole
    /// seconds (3 s for 2 s), so an abandoned key outlives its holder's
    /// last renewal by up to that.
    fn expiry_slack(&self) -> Duration {
        Duration::from_secs(1)
    }
}

mod single {
    use super::*;
    conformance_suite!(FairEtcd::from_env("DISTLOCK_TEST_ETCD_URL"));
}

mod cluster {
    use super::*;
    conformance_suite!(FairEtcd::from_env("DISTLOCK_TEST_ETCD_CLUSTER_URL"));
}

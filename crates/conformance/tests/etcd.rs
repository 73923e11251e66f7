//! The conformance suite on etcd: on one member, and on a cluster of
//! three. `scripts/test` starts them and sets `DISTLOCK_TEST_ETCD_URL` and
//! `DISTLOCK_TEST_ETCD_CLUSTER_URL`.

use std::sync::Arc;
use std::time::Duration;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::backend::Backend;
use distlock_etcd::EtcdBackend;

struct Etcd {
    url: String,
}

impl Etcd {
    fn from_env(var: &str) -> Self {
        let url = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: run the tests with scripts/test, which starts etcd")
        });
        Self { url }
    }
}

#[async_trait::async_trait]
impl Fixture for Etcd {
    async fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(
            EtcdBackend::open(&self.url)
                .await
                .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.url)),
        )
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
    conformance_suite!(Etcd::from_env("DISTLOCK_TEST_ETCD_URL"));
}

mod cluster {
    use super::*;
    conformance_suite!(Etcd::from_env("DISTLOCK_TEST_ETCD_CLUSTER_URL"));
}

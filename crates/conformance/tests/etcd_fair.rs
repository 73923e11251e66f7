//! The conformance suite on etcd in fair mode (`fair=true`), on one member
//! and on a cluster of three: every promise of the suite holds when whole
//! locks go to waiters in the order they asked, and so do the fair cases.
//! The URL carries the
//! option, so the cross-process cases' `distlock` children are fair too.
//! `scripts/test` starts etcd and sets `DISTLOCK_TEST_ETCD_URL` and
//! `DISTLOCK_TEST_ETCD_CLUSTER_URL`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_conformance::{Fixture, conformance_suite, fair_cases};
use distlock_core::LockName;
use distlock_core::backend::Backend;
use distlock_etcd::raw::etcdserverpb::RangeRequest;
use distlock_etcd::raw::{Client, ConnectOptions};
use distlock_etcd::{EtcdBackend, EtcdConfig};

struct FairEtcd {
    url: String,
    /// A backend of its own, for the name's keys, and a plain client of
    /// the members that reads them.
    looker: tokio::sync::OnceCell<(EtcdBackend, Client)>,
}

impl FairEtcd {
    fn from_env(var: &str) -> Self {
        let url = support::server_url(var, "etcd");
        let separator = if url.contains('?') { '&' } else { '?' };
        Self {
            url: format!("{url}{separator}fair=true"),
            looker: tokio::sync::OnceCell::new(),
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

    /// The name's keys but the first, the holder's: each waiter has one.
    async fn queued(&self, name: &LockName) -> Option<usize> {
        let (backend, members) = self
            .looker
            .get_or_init(|| async {
                let backend = EtcdBackend::open(&self.url).await.expect("open etcd");
                let config = EtcdConfig::parse(&self.url).expect("a valid URL");
                let endpoints = config
                    .endpoints
                    .iter()
                    .map(|endpoint| format!("http://{endpoint}"));
                let members = Client::connect(&ConnectOptions::new(endpoints))
                    .await
                    .expect("connect to the members");
                (backend, members)
            })
            .await;
        let (key, range_end) = backend.key_range(name);
        let keys = members
            .clone()
            .range(RangeRequest {
                key,
                range_end,
                keys_only: true,
                ..RangeRequest::default()
            })
            .await
            .expect("read the name's keys")
            .kvs
            .len();
        Some(keys.saturating_sub(1))
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
    fair_cases!(FairEtcd::from_env("DISTLOCK_TEST_ETCD_URL"));
}

mod cluster {
    use super::*;
    conformance_suite!(FairEtcd::from_env("DISTLOCK_TEST_ETCD_CLUSTER_URL"));
    fair_cases!(FairEtcd::from_env("DISTLOCK_TEST_ETCD_CLUSTER_URL"));
}

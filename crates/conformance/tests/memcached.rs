//! The conformance suite on memcached: in sharded mode on one server, and
//! in quorum mode on three. `scripts/test` starts the servers and sets
//! `DISTLOCK_TEST_MEMCACHED_URL` and `DISTLOCK_TEST_MEMCACHED_QUORUM_URL`.

use std::sync::Arc;
use std::time::Duration;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::backend::Backend;
use distlock_memcached::MemcachedBackend;

struct Memcached {
    url: String,
}

impl Memcached {
    fn from_env(var: &str) -> Self {
        let url = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: run the tests with scripts/test, which starts memcached")
        });
        Self { url }
    }
}

#[async_trait::async_trait]
impl Fixture for Memcached {
    async fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(
            MemcachedBackend::open(&self.url)
                .await
                .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.url)),
        )
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    /// memcached expires in whole seconds; two keep the cases quick while
    /// leaving room for the rounding.
    fn lease(&self) -> Duration {
        Duration::from_secs(2)
    }

    fn expiry_slack(&self) -> Duration {
        Duration::from_secs(1)
    }
}

mod sharded {
    use super::*;
    conformance_suite!(Memcached::from_env("DISTLOCK_TEST_MEMCACHED_URL"));
}

mod quorum {
    use super::*;
    conformance_suite!(Memcached::from_env("DISTLOCK_TEST_MEMCACHED_QUORUM_URL"));
}

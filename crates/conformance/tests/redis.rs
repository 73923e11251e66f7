//! The conformance suite on Redis: in single mode on one server, in quorum
//! mode on three, and in cluster mode on a cluster of three masters.
//! `scripts/test` starts the servers and sets `DISTLOCK_TEST_REDIS_URL`,
//! `DISTLOCK_TEST_REDIS_QUORUM_URL` and `DISTLOCK_TEST_REDIS_CLUSTER_URL`.

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::backend::Backend;
use distlock_redis::RedisBackend;

struct Redis {
    url: String,
}

impl Redis {
    fn from_env(var: &str) -> Self {
        let url = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: run the tests with scripts/test, which starts redis")
        });
        Self { url }
    }
}

#[async_trait::async_trait]
impl Fixture for Redis {
    async fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(
            RedisBackend::open(&self.url)
                .await
                .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.url)),
        )
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }
}

mod single {
    use super::*;
    conformance_suite!(Redis::from_env("DISTLOCK_TEST_REDIS_URL"));
}

mod quorum {
    use super::*;
    conformance_suite!(Redis::from_env("DISTLOCK_TEST_REDIS_QUORUM_URL"));
}

mod cluster {
    use super::*;
    conformance_suite!(Redis::from_env("DISTLOCK_TEST_REDIS_CLUSTER_URL"));
}

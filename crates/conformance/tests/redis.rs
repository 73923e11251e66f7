//! The conformance suite on Redis: in single mode on one server, in quorum
//! mode on three, and in cluster mode on a cluster of three masters.
//! `scripts/test` starts the servers and sets `DISTLOCK_TEST_REDIS_URL`,
//! `DISTLOCK_TEST_REDIS_QUORUM_URL` and `DISTLOCK_TEST_REDIS_CLUSTER_URL`.

mod support;

use distlock_conformance::conformance_suite;
use distlock_redis::RedisBackend;

use support::{OpenUrl, UrlFixture};

#[async_trait::async_trait]
impl OpenUrl for RedisBackend {
    async fn open_url(url: &str) -> distlock_core::Result<Self> {
        Self::open(url).await
    }
}

fn redis(var: &str) -> UrlFixture<RedisBackend> {
    UrlFixture::from_env(var, "redis")
}

mod single {
    use super::*;
    conformance_suite!(redis("DISTLOCK_TEST_REDIS_URL"));
}

mod quorum {
    use super::*;
    conformance_suite!(redis("DISTLOCK_TEST_REDIS_QUORUM_URL"));
}

mod cluster {
    use super::*;
    conformance_suite!(redis("DISTLOCK_TEST_REDIS_CLUSTER_URL"));
}

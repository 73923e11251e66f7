//! The conformance suite on memcached: in sharded mode on one server, and
//! in quorum mode on three. `scripts/test` starts the servers and sets
//! `DISTLOCK_TEST_MEMCACHED_URL` and `DISTLOCK_TEST_MEMCACHED_QUORUM_URL`.

mod support;

use std::time::Duration;

use distlock_conformance::conformance_suite;
use distlock_memcached::MemcachedBackend;

use support::{OpenUrl, UrlFixture};

#[async_trait::async_trait]
impl OpenUrl for MemcachedBackend {
    async fn open_url(url: &str) -> distlock_core::Result<Self> {
        Self::open(url).await
    }
}

/// memcached expires in whole seconds: the suite's 2 s lease keeps the
/// cases quick while leaving room for the rounding, which keeps an
/// abandoned key up to a second longer.
fn memcached(var: &str) -> UrlFixture<MemcachedBackend> {
    UrlFixture::from_env(var, "memcached").with_expiry_slack(Duration::from_secs(1))
}

mod sharded {
    use super::*;
    conformance_suite!(memcached("DISTLOCK_TEST_MEMCACHED_URL"));
}

mod quorum {
    use super::*;
    conformance_suite!(memcached("DISTLOCK_TEST_MEMCACHED_QUORUM_URL"));
}

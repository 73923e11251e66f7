//! The conformance suite on object storage, on each store `scripts/test`
//! starts: Azurite, Azure Blob's emulator (`DISTLOCK_TEST_AZURE_URL`), and
//! moto, an S3 emulator served one request at a time
//! (`DISTLOCK_TEST_S3_URL`), with the credentials in each cloud client's
//! environment variables.

mod support;

use std::time::Duration;

use distlock_conformance::conformance_suite;
use distlock_objectstore::ObjectStoreBackend;

use support::{OpenUrl, UrlFixture};

#[async_trait::async_trait]
impl OpenUrl for ObjectStoreBackend {
    async fn open_url(url: &str) -> distlock_core::Result<Self> {
        Self::open(url).await
    }
}

/// A store has no expiry: a waiter takes an abandoned lock over once it
/// has seen the lock's object unchanged for a lease, counted from its
/// first read, so a lock outlives its holder's last extension by up to a
/// lease more, and a poll.
fn store(var: &str) -> UrlFixture<ObjectStoreBackend> {
    UrlFixture::from_env(var, "the object stores").with_expiry_slack(Duration::from_secs(3))
}

mod azure {
    use super::*;
    conformance_suite!(store("DISTLOCK_TEST_AZURE_URL"));
}

mod s3 {
    use super::*;
    conformance_suite!(store("DISTLOCK_TEST_S3_URL"));
}

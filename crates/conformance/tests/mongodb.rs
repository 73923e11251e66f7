//! The conformance suite on the MongoDB backend, against the server whose
//! URL is in `DISTLOCK_TEST_MONGODB_URL` (scripts/test starts one). Each
//! test uses a fresh collection.

mod support;

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::backend::Backend;
use distlock_mongodb::MongoBackend;

struct Mongo {
    /// The distlock URL of a fresh collection, as the `distlock` command
    /// opens it.
    url: String,
}

impl Mongo {
    fn new() -> Self {
        Self {
            url: support::mongodb::fresh_collection_url(""),
        }
    }
}

#[async_trait::async_trait]
impl Fixture for Mongo {
    async fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(
            MongoBackend::open(&self.url)
                .await
                .expect("the test server answers"),
        )
    }

    fn writers_wait_behind_writers_in_line(&self) -> bool {
        // A writer kept out by a writer posts no mark (its waiting attempt
        // writes nothing), so a reader that comes before its next attempt
        // may go first: docs/mongodb.md states the limit.
        false
    }

    async fn backend_keeping_idle_records(&self) -> Arc<dyn Backend> {
        support::mongodb::backend_without_ttl_index(&self.url).await
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }
}

conformance_suite!(Mongo::new());

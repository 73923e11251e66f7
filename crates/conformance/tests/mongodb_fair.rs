//! The conformance suite on the MongoDB backend in fair mode, against the
//! server whose URL is in `DISTLOCK_TEST_MONGODB_URL` (scripts/test starts
//! one): every promise of the suite holds when whole locks go to waiters in
//! the order they asked, and so do the fair cases. Each test uses a fresh
//! collection.

mod support;

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite, fair_cases};
use distlock_core::LockName;
use distlock_core::backend::Backend;
use distlock_mongodb::MongoBackend;
use distlock_mongodb::mongodb::bson::doc;

struct FairMongo {
    /// The distlock URL of a fresh collection in fair mode, as the
    /// `distlock` command opens it.
    url: String,
    /// A backend of its own whose collection shows the line.
    looker: tokio::sync::OnceCell<MongoBackend>,
}

impl FairMongo {
    fn new() -> Self {
        Self {
            url: support::mongodb::fresh_collection_url("&fair=true"),
            looker: tokio::sync::OnceCell::new(),
        }
    }
}

#[async_trait::async_trait]
impl Fixture for FairMongo {
    async fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(self.open().await)
    }

    async fn backend_keeping_idle_records(&self) -> Arc<dyn Backend> {
        support::mongodb::backend_without_ttl_index(&self.url).await
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    /// The places in the lock document's `queue` (see docs/mongodb.md).
    async fn queued(&self, name: &LockName) -> Option<usize> {
        let looker = self.looker.get_or_init(|| self.open()).await;
        let document = looker
            .collection()
            .find_one(doc! { "_id": name.as_str() })
            .await
            .expect("read the lock document");
        let places = document
            .and_then(|document| document.get_array("queue").ok().map(Vec::len))
            .unwrap_or(0);
        Some(places)
    }
}

impl FairMongo {
    async fn open(&self) -> MongoBackend {
        MongoBackend::open(&self.url)
            .await
            .expect("the test server answers")
    }
}

conformance_suite!(FairMongo::new());
fair_cases!(FairMongo::new());

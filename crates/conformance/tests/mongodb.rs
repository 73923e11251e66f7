//! The conformance suite on the MongoDB backend, against the server whose
//! URL is in `DISTLOCK_TEST_MONGODB_URL` (scripts/test starts one). Each
//! test uses a fresh collection.

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
        let server = match std::env::var("DISTLOCK_TEST_MONGODB_URL") {
            Ok(url) if !url.is_empty() => url,
            _ => panic!(
                "DISTLOCK_TEST_MONGODB_URL is not set: run the tests through scripts/test, \
                 which starts a MongoDB-compatible server and sets it"
            ),
        };
        let collection = format!("conformance_{:016x}", rand::random::<u64>());
        let (head, query) = match server.split_once('?') {
            Some((head, query)) => (head.to_owned(), format!("{query}&")),
            None => (server.clone(), String::new()),
        };
        let head = head.trim_end_matches('/');
        let authority_has_path = head
            .split_once("://")
            .is_some_and(|(_, rest)| rest.contains('/'));
        let base = if authority_has_path {
            head.to_owned()
        } else {
            format!("{head}/distlock_conformance")
        };
        Self {
            url: format!("{base}?{query}collection={collection}"),
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

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }
}

conformance_suite!(Mongo::new());

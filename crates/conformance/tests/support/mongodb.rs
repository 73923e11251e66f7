//! MongoDB's fixtures: a fresh collection for each test.

use super::server_url;

/// The distlock URL of a fresh collection on the server in
/// `DISTLOCK_TEST_MONGODB_URL`, in the `distlock_conformance` database
/// unless the server's URL names one, with `options` (`&`-separated)
/// added.
pub fn fresh_collection_url(options: &str) -> String {
    let server = server_url("DISTLOCK_TEST_MONGODB_URL", "a MongoDB-compatible server");
    assert!(!server.is_empty(), "DISTLOCK_TEST_MONGODB_URL is empty");
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
    format!("{base}?{query}collection={collection}{options}")
}

/// A backend on the collection of `url` that never creates the TTL
/// index, so that a free lock document and its record of terms stay
/// (docs/mongodb.md, the record of terms).
pub async fn backend_without_ttl_index(
    url: &str,
) -> std::sync::Arc<dyn distlock_core::backend::Backend> {
    let config = distlock_mongodb::MongoConfig::parse(url)
        .expect("the test URL parses")
        .ttl_index(false);
    std::sync::Arc::new(
        distlock_mongodb::MongoBackend::connect(config)
            .await
            .expect("the test server answers"),
    )
}

//! The object-storage backend under test (`s3://`, `gs://`, `az://`
//! URLs): opened with a client whose HTTP requests are counted
//! ([`requests`]), beside the raw conditional-put pair on the same store
//! ([`raw_pair`]) and the cost of a waiter polling a held lock
//! ([`polling`]).

pub(crate) mod polling;
pub(crate) mod raw_pair;
pub(crate) mod requests;

use std::sync::Arc;

use distlock::backend::Backend;
use distlock::objectstore::object_store::{ObjectStore, path::Path};
use distlock::objectstore::{ObjectStoreBackend, ObjectStoreConfig};

use crate::outcome::Outcome;

use self::requests::Requests;

/// The store behind an object-storage target: its requests, counted in
/// this process, and a client of its own on the same store and counter,
/// for the raw pair and for reading what the store keeps.
#[derive(Debug, Clone)]
pub(crate) struct ObjectStoreServer {
    pub(crate) requests: Requests,
    pub(crate) store: Arc<dyn ObjectStore>,
    /// The URL's prefix, under which every object of the backend lies.
    pub(crate) prefix: Path,
}

/// Opens the backend of `url` with its requests counted.
pub(crate) async fn open(url: &str) -> Outcome<(Arc<dyn Backend>, ObjectStoreServer)> {
    let requests = Requests::default();
    let config = ObjectStoreConfig::parse(url)
        .map_err(|e| e.to_string())?
        .http_connector(requests.clone());
    let store = config.build_client().map_err(|e| e.to_string())?;
    let prefix = prefix_of(&config);
    let backend = ObjectStoreBackend::connect(config)
        .await
        .map_err(|e| e.to_string())?;
    let server = ObjectStoreServer {
        requests,
        store,
        prefix,
    };
    Ok((Arc::new(backend), server))
}

/// The prefix of `config`, read from its display name
/// (`az://container/prefix`), the one public place that shows it.
fn prefix_of(config: &ObjectStoreConfig) -> Path {
    let root = format!("{}://{}", config.cloud().scheme(), config.bucket());
    let shown = config.display_name();
    Path::from(shown.strip_prefix(&root).unwrap_or_default())
}

/// Whether `url` names an object store (`s3://`, `gs://`, `az://`).
pub(crate) fn is_objectstore_url(url: &str) -> bool {
    ["s3://", "gs://", "az://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_read_from_the_url() {
        let config = ObjectStoreConfig::parse("az://c/team/bench?endpoint=http://h/a").unwrap();
        assert_eq!(prefix_of(&config).as_ref(), "team/bench");
        let config = ObjectStoreConfig::parse("s3://b").unwrap();
        assert_eq!(prefix_of(&config).as_ref(), "");
        assert!(is_objectstore_url("AZ://c/p"));
        assert!(!is_objectstore_url("azure://c"));
    }
}

//! The baseline on object storage: the raw conditional-put pair on the
//! same store, the least a lock on an object store sends. The acquire is
//! one `PUT If-None-Match: *` (`object_store`'s `PutMode::Create`) of an
//! object naming its holder, which the store refuses while the object
//! exists; the release is one `DELETE` of it. Two requests a cycle, with
//! no fencing token, no lease (a holder that dies leaves the object for
//! ever) and no check of the owner on release (`object_store` has no
//! conditional delete).

use std::time::{Duration, Instant};

use distlock::LockName;
use distlock::objectstore::object_store::{
    ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, path::Path,
};

use super::ObjectStoreServer;
use crate::clock::now_ns;
use crate::outcome::Outcome;

/// Where the pair keeps its objects, under the URL's prefix: beside the
/// backend's `locks/`, never in it, so that the backend's listing never
/// reads them.
const DIRECTORY: &str = "bench-raw-pair";

impl ObjectStoreServer {
    /// The raw pair's object for `name`.
    fn raw_pair_key(&self, name: &LockName) -> Path {
        self.prefix.clone().join(DIRECTORY).join(name.as_str())
    }

    /// The raw pair's acquire and release on `name`, as often as `seconds`
    /// allows.
    pub(crate) async fn raw_cycles(&self, name: &LockName, seconds: Duration) -> Outcome<u64> {
        let key = self.raw_pair_key(name);
        let holder = format!("{:016x}{:08x}", now_ns(), std::process::id());
        let started = Instant::now();
        let mut cycles = 0u64;
        while started.elapsed() < seconds {
            let create = PutOptions::from(PutMode::Create);
            self.store
                .put_opts(&key, PutPayload::from(holder.clone()), create)
                .await
                .map_err(|e| format!("the raw pair's create: {e}"))?;
            self.store
                .delete(&key)
                .await
                .map_err(|e| format!("the raw pair's delete: {e}"))?;
            cycles += 1;
        }
        Ok(cycles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::bench_name;

    async fn azurite() -> ObjectStoreServer {
        let url = std::env::var("DISTLOCK_TEST_AZURE_URL")
            .expect("DISTLOCK_TEST_AZURE_URL is not set: run the tests with scripts/test");
        let (_, server) = crate::objectstore::open(&url).await.unwrap();
        server
    }

    #[tokio::test]
    async fn a_cycle_is_a_create_and_a_delete_each_counted_once() {
        let server = azurite().await;
        let name = bench_name("raw-pair");
        let before = server.requests.snapshot();
        let cycles = server
            .raw_cycles(&name, Duration::from_millis(200))
            .await
            .unwrap();
        let sent = server.requests.snapshot().since(&before);
        assert!(cycles > 0);
        // object_store sends the delete on Azure as a Blob Batch.
        assert_eq!(sent.0.get("PUT If-None-Match"), Some(&cycles), "{sent:?}");
        assert_eq!(sent.0.get("POST"), Some(&cycles), "{sent:?}");
        assert_eq!(sent.total(), 2 * cycles, "{sent:?}");
        assert!(
            server
                .requests
                .server()
                .is_some_and(|s| s.starts_with("Azurite"))
        );
    }

    #[tokio::test]
    async fn the_pair_is_refused_while_its_object_exists() {
        let server = azurite().await;
        let name = bench_name("raw-pair-held");
        let key = server.raw_pair_key(&name);
        server
            .store
            .put(&key, PutPayload::from("someone else"))
            .await
            .unwrap();
        let refused = server.raw_cycles(&name, Duration::from_millis(200)).await;
        assert!(refused.is_err_and(|e| e.contains("create")));
        server.store.delete(&key).await.unwrap();
    }
}

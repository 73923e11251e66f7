//! The conformance suite on the file backend.

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::backend::Backend;
use distlock_file::FileBackend;

struct Files(tempfile::TempDir);

impl Files {
    fn new() -> Self {
        Self(tempfile::tempdir().expect("temp dir"))
    }
}

#[async_trait::async_trait]
impl Fixture for Files {
    async fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(FileBackend::open(self.0.path()).expect("open the lock directory"))
    }

    fn url(&self) -> Option<String> {
        Some(format!("file://{}", self.0.path().display()))
    }

    /// A grant is the answer's `flock`; see the trait.
    fn finds_grants_by_identity(&self) -> bool {
        false
    }
}

conformance_suite!(Files::new());

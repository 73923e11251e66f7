//! The conformance suite on the file backend as macOS and the BSDs run it,
//! forced on Linux with `DISTLOCK_PORTABLE=1`: waiters poll instead of
//! watching the directory, and the `distlock` of the cross-process cases
//! knows its command alone. Each case runs in a child process of this
//! binary with the variable set.

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::backend::Backend;
use distlock_core::backend::BackendExt;
use distlock_file::FileBackend;

struct PolledFiles(tempfile::TempDir);

impl PolledFiles {
    fn new() -> Self {
        Self(tempfile::tempdir().expect("temp dir"))
    }
}

#[async_trait::async_trait]
impl Fixture for PolledFiles {
    async fn backend(&self) -> Arc<dyn Backend> {
        let backend = FileBackend::open(self.0.path()).expect("open the lock directory");
        assert!(
            backend.wakeups().is_none(),
            "with DISTLOCK_PORTABLE=1 the backend watches nothing"
        );
        Arc::new(backend)
    }

    fn url(&self) -> Option<String> {
        Some(format!("file://{}", self.0.path().display()))
    }

    /// A grant is the answer's `flock`; see the trait.
    fn finds_grants_by_identity(&self) -> bool {
        false
    }
}

conformance_suite!(env("DISTLOCK_PORTABLE" = "1"): PolledFiles::new());

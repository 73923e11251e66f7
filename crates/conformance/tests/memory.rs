//! The conformance suite on the in-memory backend.

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::MemoryBackend;
use distlock_core::backend::Backend;

struct Memory(Arc<MemoryBackend>);

#[async_trait::async_trait]
impl Fixture for Memory {
    async fn backend(&self) -> Arc<dyn Backend> {
        self.0.clone()
    }
}

conformance_suite!(in_process: Memory(Arc::new(MemoryBackend::new())));

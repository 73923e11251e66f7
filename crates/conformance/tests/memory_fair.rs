//! The conformance suite on the in-memory backend in fair mode: every
//! promise of the suite holds when whole locks go to waiters in the order
//! they asked.

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite};
use distlock_core::{Backend, MemoryBackend};

struct FairMemory(Arc<MemoryBackend>);

#[async_trait::async_trait]
impl Fixture for FairMemory {
    async fn backend(&self) -> Arc<dyn Backend> {
        self.0.clone()
    }
}

conformance_suite!(in_process: FairMemory(Arc::new(MemoryBackend::fair())));

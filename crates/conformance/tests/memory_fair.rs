//! The conformance suite on the in-memory backend in fair mode: every
//! promise of the suite holds when whole locks go to waiters in the order
//! they asked, and so do the fair cases.

use std::sync::Arc;

use distlock_conformance::{Fixture, conformance_suite, fair_cases};
use distlock_core::backend::Backend;
use distlock_core::{LockName, MemoryBackend};

struct FairMemory(Arc<MemoryBackend>);

#[async_trait::async_trait]
impl Fixture for FairMemory {
    async fn backend(&self) -> Arc<dyn Backend> {
        self.0.clone()
    }

    async fn queued(&self, name: &LockName) -> Option<usize> {
        Some(self.0.queued(name))
    }
}

conformance_suite!(in_process: FairMemory(Arc::new(MemoryBackend::fair())));
fair_cases!(in_process: FairMemory(Arc::new(MemoryBackend::fair())));

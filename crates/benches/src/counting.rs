//! Counts the calls core makes, for scenarios where the server cannot
//! count commands itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use distlock::Result;
use distlock::backend::Backend;
use distlock::testing::{Call, Hook, TestBackend};

/// Calls made through a backend from [`counting`].
#[derive(Debug, Default)]
pub(crate) struct Calls {
    pub(crate) acquire: AtomicU64,
    pub(crate) extend_batches: AtomicU64,
    pub(crate) extended_leases: AtomicU64,
    /// Renewals of a session backend's session (etcd), which keep every
    /// lease of the client at once.
    pub(crate) session_renewals: AtomicU64,
    pub(crate) release: AtomicU64,
}

impl Calls {
    pub(crate) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn add(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }
}

#[distlock::backend::async_trait]
impl Hook for Calls {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        match call {
            Call::Acquire(_) => Self::add(&self.acquire, 1),
            Call::Extend(leases) => {
                Self::add(&self.extend_batches, 1);
                Self::add(&self.extended_leases, leases.len() as u64);
            }
            Call::RenewSession => Self::add(&self.session_renewals, 1),
            Call::Release(_) => Self::add(&self.release, 1),
            // One step that ends a grant and makes the next.
            Call::HandOver { .. } => {
                Self::add(&self.acquire, 1);
                Self::add(&self.release, 1);
            }
            _ => {}
        }
        Ok(())
    }
}

/// `inner`, passing every call on and counting it in the `Calls` returned.
pub(crate) fn counting(inner: Arc<dyn Backend>) -> (Arc<dyn Backend>, Arc<Calls>) {
    let calls = Arc::new(Calls::default());
    let backend = TestBackend::wrapping(inner).with_hook(calls.clone());
    (backend.shared(), calls)
}

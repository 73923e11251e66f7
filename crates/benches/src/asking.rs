//! When each wait of our workers first asked the store, and when the store
//! first answered that it waits in line: what judges a fair lock's order
//! without guessing (see [`order::overtaking_in_line`](crate::order)).
//!
//! The time a task calls acquire is not the time its place is stored: the
//! request may sit in the process, or on the wire, for milliseconds on a
//! busy machine. The attempts' own times bound it on both sides. The place
//! is stored after the wait's first attempt was sent, and before the first
//! answer that tells the wait to wait came back (an answer to ask again at
//! once may come from an attempt that lost a race and stored nothing), so a
//! wait whose answer came back before another wait's first attempt was
//! sent is surely ahead of it in line. In PostgreSQL's advisory mode the
//! place is taken by a statement sent just after that answer, so there the
//! bound is only close.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock_core::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, Extended, Lease, ServerInfo,
    WaitState, async_trait,
};
use distlock_core::{LockInfo, LockName, Result};

use crate::clock::now_ns;

tokio::task_local! {
    /// The times of the wait the current task is making, if it records them.
    static WAIT: Arc<FirstAsk>;
}

/// A wait's first attempt, by the wall clock all processes share
/// (nanoseconds since the Unix epoch; 0 where it did not happen).
#[derive(Debug, Default)]
pub(crate) struct FirstAsk {
    /// When the first attempt was about to be sent.
    sent_ns: AtomicU64,
    /// When the first answer to wait came back: the wait is in line from
    /// then on. 0 when it was granted without one.
    in_line_ns: AtomicU64,
}

impl FirstAsk {
    pub(crate) fn sent_ns(&self) -> u64 {
        self.sent_ns.load(Ordering::Relaxed)
    }

    pub(crate) fn in_line_ns(&self) -> u64 {
        self.in_line_ns.load(Ordering::Relaxed)
    }
}

/// Runs `wait` (one acquisition and its release), recording the times of
/// its first attempt where it goes through a backend of [`recording`].
pub(crate) async fn timed<T>(wait: impl Future<Output = T>) -> (T, Arc<FirstAsk>) {
    let first = Arc::new(FirstAsk::default());
    let output = WAIT.scope(first.clone(), wait).await;
    (output, first)
}

/// Sets `at` to now unless it is set already: a later time would only say
/// less.
fn set_once(at: &AtomicU64) {
    let _ = at.compare_exchange(0, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
}

/// `inner`, recording the first attempt of each wait run within [`timed`];
/// everything else passes through as it is.
pub(crate) fn recording(inner: Arc<dyn Backend>) -> Arc<dyn Backend> {
    Arc::new(Recording { inner })
}

#[derive(Debug)]
struct Recording {
    inner: Arc<dyn Backend>,
}

#[async_trait]
impl Backend for Recording {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn store_name(&self) -> &'static str {
        self.inner.store_name()
    }

    async fn server_info(&self, limit: Duration) -> Result<ServerInfo> {
        self.inner.server_info(limit).await
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        // The first attempt of a wait sets when it asked.
        let _ = WAIT.try_with(|wait| set_once(&wait.sent_ns));
        let outcome = self.inner.try_acquire(request, wait).await;
        // An answer to ask again at once may mean that the attempt stored
        // nothing (it lost the race to make the name's row or document):
        // the wait is in line from the first answer that tells it to wait.
        if matches!(
            outcome,
            Ok(Attempt::Held { retry_after }) if retry_after != Some(Duration::ZERO)
        ) {
            let _ = WAIT.try_with(|wait| set_once(&wait.in_line_ns));
        }
        outcome
    }

    async fn end_wait(&self, request: &AcquireRequest, wait: WaitState) -> Result<()> {
        self.inner.end_wait(request, wait).await
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        self.inner.extend_many(leases).await
    }

    fn extend_many_limit(&self) -> usize {
        self.inner.extend_many_limit()
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }

    async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        self.inner.list(limit).await
    }

    async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool> {
        self.inner.force_release(name, limit).await
    }

    fn abilities(&self) -> Abilities<'_> {
        self.inner.abilities()
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

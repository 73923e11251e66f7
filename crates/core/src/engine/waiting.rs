//! The backend's side of one call's wait, and the sleep between its
//! attempts.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{AcquireRequest, Backend, LossReporter, ReleaseWatch};
use crate::engine::attempt::{Asking, Outcome};
use crate::error::Result;

/// The backend's side of a wait: what it asks, and the state the backend
/// keeps for it. If the wait is dropped unfinished, the backend's record of
/// it is ended in the background.
pub(crate) struct PendingWait {
    backend: Arc<dyn Backend>,
    /// The next request; `None` once an attempt was left to finish in the
    /// background, until the next one begins afresh.
    asking: Option<Asking>,
    template: AcquireRequest,
}

impl PendingWait {
    /// What each attempt asks: the first request, less its state.
    pub(crate) fn request(&self) -> &AcquireRequest {
        &self.template
    }

    pub(crate) fn new(backend: Arc<dyn Backend>, asking: Asking) -> Self {
        Self {
            backend,
            template: asking.request.clone(),
            asking: Some(asking),
        }
    }

    pub(crate) async fn attempt(&mut self, budget: Duration) -> Result<Outcome> {
        let asking = self.asking.take().unwrap_or_else(|| {
            // The last attempt went on in the background with its state,
            // and ends it there; this one starts afresh.
            Asking::new(AcquireRequest {
                loss: LossReporter::new(),
                ..self.template.clone()
            })
        });
        let (outcome, asking) = asking.attempt(&self.backend, budget).await;
        self.asking = asking;
        outcome
    }

    /// Ends the backend's record of the wait, if it kept one.
    pub(crate) async fn end(mut self) {
        if let Some(asking) = self.asking.take() {
            asking.end(&*self.backend).await;
        }
    }
}

impl Drop for PendingWait {
    fn drop(&mut self) {
        let Some(asking) = self.asking.take().filter(|asking| !asking.wait.is_empty()) else {
            return;
        };
        if let Some(runtime) = crate::sync::Runtime::current() {
            let backend = self.backend.clone();
            runtime.spawn(async move { asking.end(&*backend).await });
        }
    }
}

/// Sleeps for `wait`, or less if `watch` reports a release first.
pub(crate) async fn sleep_unless_released(watch: Option<&mut ReleaseWatch>, wait: Duration) {
    match watch {
        Some(watch) => {
            tokio::select! {
                () = watch.released() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
        None => tokio::time::sleep(wait).await,
    }
}

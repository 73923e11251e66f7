//! One attempt of a wait, run so that nothing is left held when its caller
//! stops listening.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::LossReporter;
use crate::backend::state::{GrantState, WaitState};
use crate::backend::{AcquireRequest, Attempt, Backend, Holder, Lease, LeaseId};
use crate::engine::bounded;
use crate::engine::detach::Detach;
use crate::error::{Error, Result};

/// What one wait asks for, and the state the backend keeps across its
/// attempts.
#[derive(Debug)]
pub(crate) struct Asking {
    pub(crate) request: AcquireRequest,
    pub(crate) wait: WaitState,
}

/// What an attempt gave, as the wait loop needs it.
pub(crate) enum Outcome {
    /// Granted by a request sent at that instant; the reporter is the one
    /// the request carried.
    Granted(Lease, Instant, LossReporter),
    Held(Option<Duration>),
}

impl Asking {
    pub(crate) fn new(request: AcquireRequest) -> Self {
        Self {
            request,
            wait: WaitState::new(),
        }
    }

    /// Makes the attempt, bounded by `budget` (and by the request's
    /// operation timeout in any case), and gives back this wait to ask again
    /// with. If the budget runs out first, the outcome is a timeout and the
    /// wait is not given back: the attempt completes in the background, as
    /// it does when the caller stops waiting, and there a grant that nobody
    /// waits for is released and what the backend keeps for the wait is
    /// ended.
    pub(crate) async fn attempt(
        mut self,
        backend: &Arc<dyn Backend>,
        budget: Duration,
    ) -> (Result<Outcome>, Option<Self>) {
        let operation_timeout = self.request.operation_timeout;
        // Each attempt has its own identity: an earlier attempt whose answer
        // was lost may still hold a grant under the old one.
        self.request.lease_id = LeaseId::random();
        let call = {
            let backend = backend.clone();
            async move {
                let outcome = self.ask(&backend).await;
                (outcome, self)
            }
        };
        let orphaned = {
            let backend = backend.clone();
            move |(outcome, asking): (Result<Outcome>, Self)| async move {
                if let Ok(Outcome::Granted(lease, ..)) = outcome {
                    Unclaimed::of(&asking.request, lease)
                        .release(&*backend, operation_timeout)
                        .await;
                }
                asking.end(&*backend).await;
            }
        };
        let attempt = Detach::with_orphan(call, orphaned);
        if budget >= operation_timeout {
            // The call is bounded by the operation timeout already; a second
            // timer would only cost the runtime's timer wheel a registration.
            let (outcome, asking) = attempt.await;
            return (outcome, Some(asking));
        }
        match tokio::time::timeout(budget, attempt).await {
            Ok((outcome, asking)) => (outcome, Some(asking)),
            // Unanswered so far: the wait goes on without it (or ends).
            Err(_) => (Err(Error::operation_timeout("acquire", budget)), None),
        }
    }

    async fn ask(&mut self, backend: &Arc<dyn Backend>) -> Result<Outcome> {
        let operation_timeout = self.request.operation_timeout;
        let sent_at = Instant::now();
        let attempt = bounded::call(
            &**backend,
            operation_timeout,
            "acquire",
            backend.try_acquire(&self.request, &mut self.wait),
        )
        .await;
        match attempt {
            Ok(Attempt::Acquired {
                fencing_token,
                state,
            }) => Ok(Outcome::Granted(
                self.request.granted(fencing_token, state),
                sent_at,
                self.request.loss.clone(),
            )),
            Ok(Attempt::Held { retry_after }) => Ok(Outcome::Held(retry_after)),
            Err(error) => {
                if error.is_transient() {
                    // The backend may have granted before the reply was
                    // lost; release by identity, harmless if it did not.
                    let unclaimed =
                        Unclaimed::of(&self.request, self.request.granted(0, GrantState::none()));
                    let backend = backend.clone();
                    crate::sync::spawn(async move {
                        unclaimed.release(&*backend, operation_timeout).await;
                    });
                }
                Err(error)
            }
        }
    }

    /// Ends the wait on the backend, if it kept anything for it.
    pub(crate) async fn end(self, backend: &dyn Backend) {
        if self.wait.is_empty() {
            return;
        }
        let operation_timeout = self.request.operation_timeout;
        let name = self.request.name.clone();
        let ended = bounded::call(
            backend,
            operation_timeout,
            "end wait",
            backend.end_wait(&self.request, self.wait),
        );
        if let Err(error) = ended.await {
            tracing::warn!(%name, %error, "could not end a wait on the backend; its record will expire");
        }
    }
}

/// A grant its holder will never receive: released, and first its term
/// withdrawn from the election's record when it recorded one, so that no
/// observer reports a leader that never led.
pub(crate) struct Unclaimed {
    lease: Lease,
    /// Whom the grant's term was recorded for, when it recorded one.
    term_of: Option<Arc<Holder>>,
}

impl Unclaimed {
    /// `lease`, granted (or perhaps granted) to `request`.
    pub(crate) fn of(request: &AcquireRequest, lease: Lease) -> Self {
        Self {
            lease,
            term_of: request.records_term.then(|| request.holder.clone()),
        }
    }

    /// Withdraws the grant's term, if it recorded one, then releases it,
    /// each within `timeout`.
    pub(crate) async fn release(self, backend: &dyn Backend, timeout: Duration) {
        let lease = &self.lease;
        if let (Some(holder), Some(log)) = (&self.term_of, backend.abilities().term_log) {
            // Before the release: while the grant holds the lock, no later
            // grant can name its term as the one before it.
            let withdrawn =
                bounded::within(false, timeout, "withdraw term", log.withdraw(lease, holder));
            if let Err(error) = withdrawn.await {
                tracing::warn!(name = %lease.name, %error, "could not withdraw the term of a grant nobody received; observers may report it");
            }
        }
        match bounded::call(backend, timeout, "release", backend.release(lease)).await {
            Ok(true) => tracing::debug!(name = %lease.name, "released a grant nobody waited for"),
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(name = %lease.name, %error, "could not release an unclaimed grant; it will expire")
            }
        }
    }
}

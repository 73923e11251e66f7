//! Taking up a grant made before a restart: [`LockClient::resume`].

use std::sync::Arc;

use tokio::time::Instant;

use crate::backend::state::{GrantState, Payload};
use crate::backend::{AcquireRequest, Backend, Lease, Resuming};
use crate::engine::attempt::Unclaimed;
use crate::engine::bounded;
use crate::engine::detach::Detach;
use crate::engine::slots::Baton;
use crate::error::{Error, Result};
use crate::guard::{LockGuard, SlotPermit};
use crate::name::LockName;
use crate::resume::ResumeHandle;

use super::LockClient;

impl LockClient {
    /// Takes up the grant `handle` names, if the store still holds it: a
    /// process that restarted while it held a lock (a rolling deploy, a
    /// crash loop) carries on with its own grant, with the same fencing
    /// token, instead of waiting behind itself until the lease runs out.
    ///
    /// The grant gets a new identity in the same atomic step that confirms
    /// it, and lasts this client's lease from then; the keeper extends it
    /// and [`lost`](LockGuard::lost) reports its end, as for any guard.
    /// Whoever held it by the old identity (the process before the
    /// restart, if it still runs) loses it at its next extension, and the
    /// handle is spent: take a new one from the guard this returns. The
    /// resumed guard records this client's holder and label where the
    /// store records holders.
    ///
    /// An exclusive lock first takes this client's slot of the name, as
    /// [`acquire`](Self::acquire) does, waiting for it at most one
    /// operation timeout.
    ///
    /// ```
    /// use distlock_core::{Error, LockClient, MemoryBackend, ResumeHandle};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let backend = std::sync::Arc::new(MemoryBackend::new());
    /// let first_run = LockClient::new(backend.clone(), Default::default());
    /// let guard = first_run.acquire("jobs/nightly").await?;
    /// // Written to a file before the work starts, read back after a restart.
    /// let saved = guard.handle().to_string();
    /// # std::mem::forget(guard);
    ///
    /// let next_run = LockClient::new(backend, Default::default());
    /// let handle: ResumeHandle = saved.parse()?;
    /// let guard = next_run.resume(&handle).await?;
    /// assert_eq!(guard.fencing_token(), handle.fencing_token());
    /// # guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Lost`] when the store no longer holds that grant: it was
    ///   released, ran out, or was taken over or resumed already;
    /// - [`Error::Unsupported`] on a backend whose grants die with their
    ///   process (the file backend, PostgreSQL's advisory mode), saying
    ///   why;
    /// - [`Error::InvalidConfig`] for a handle made on another store;
    /// - [`Error::Timeout`] when another task of this client held or waited
    ///   for the lock all along one operation timeout;
    /// - a backend error, after which the grant, if the store had changed
    ///   it, is released.
    ///
    /// # Cancel safety
    /// Cancel safe: a resume dropped after the store took the grant up
    /// releases it in the background.
    pub async fn resume(&self, handle: &ResumeHandle) -> Result<LockGuard> {
        let backend = &self.inner.backend;
        let store = backend.store_name();
        if let Resuming::Never(why) = backend.abilities().resumes {
            return Err(Error::Unsupported(format!(
                "{store} cannot resume a lock: {why}"
            )));
        }
        if handle.store() != store {
            return Err(Error::config(
                "resume handle",
                format!(
                    "the handle is of a lock on {}, and this client's store is {store}: \
                     resume it with a client of the store that granted it",
                    handle.store()
                ),
            ));
        }
        let name = handle.name().clone();
        let claim = handle.claim();
        let started = Instant::now();
        let permit = if self.waits_in_store(claim) {
            None
        } else {
            Some(self.local_slot(&name, started).await?)
        };
        let details = self.grant_details(Payload::none(), None, false)?;
        let request = self.request(&name, claim, false, details);
        let old = Lease {
            id: handle.lease_id(),
            fencing_token: handle.fencing_token(),
            state: GrantState::none(),
            ..request.granted(0, GrantState::none())
        };
        let sent_at = Instant::now();
        let Some(state) = take_up(backend, old, request.clone()).await? else {
            return Err(Error::Lost {
                name: name.to_string(),
            });
        };
        tracing::info!(%name, fencing_token = handle.fencing_token(), "resumed a lock");
        let lease = request.granted(handle.fencing_token(), state);
        Ok(self.guard(permit, lease, sent_at, request.loss, started))
    }

    /// This client's slot of `name`, waited for at most one operation
    /// timeout from `started`.
    async fn local_slot(&self, name: &LockName, started: Instant) -> Result<SlotPermit> {
        let timeout = self.inner.options.operation_timeout();
        let turn = tokio::time::timeout(timeout, self.inner.slots.acquire(name, false)).await;
        let timed_out = || Error::Timeout {
            name: name.to_string(),
            waited: started.elapsed(),
            last_error: None,
        };
        match turn {
            Ok(Baton::Free(permit) | Baton::Yielded(permit)) => Ok(permit),
            // A waiter that takes no hand-overs is never handed a lock; if
            // one came, it goes back (its drop releases it).
            Ok(Baton::Granted(guard)) => {
                drop(guard);
                Err(timed_out())
            }
            Err(_) => Err(timed_out()),
        }
    }
}

/// Asks `backend` to take `old` up under `request`'s identity, within the
/// operation timeout. A grant whose caller went away, or whose answer was
/// an error after which it may have been made, is released by the new
/// identity in the background.
async fn take_up(
    backend: &Arc<dyn Backend>,
    old: Lease,
    request: AcquireRequest,
) -> Result<Option<GrantState>> {
    let timeout = request.operation_timeout;
    let token = old.fencing_token;
    let call = {
        let backend = backend.clone();
        let request = request.clone();
        async move {
            let Resuming::By(resumes) = backend.abilities().resumes else {
                return Err(Error::Unsupported(format!(
                    "{} stopped resuming locks",
                    backend.store_name()
                )));
            };
            let resumed = resumes.resume(&old, &request);
            bounded::call(&*backend, timeout, "resume", resumed).await
        }
    };
    let orphaned = {
        let backend = backend.clone();
        let request = request.clone();
        move |outcome: Result<Option<GrantState>>| async move {
            if let Ok(Some(state)) = outcome {
                let lease = request.granted(token, state);
                Unclaimed::of(&request, lease)
                    .release(&*backend, timeout)
                    .await;
            }
        }
    };
    let outcome = Detach::with_orphan(call, orphaned).await;
    if let Err(error) = &outcome
        && error.is_transient()
    {
        // The store may have taken the grant up before the answer was
        // lost; release by the new identity, harmless if it did not.
        let unclaimed = Unclaimed::of(&request, request.granted(0, GrantState::none()));
        let backend = backend.clone();
        crate::sync::spawn(async move {
            unclaimed.release(&*backend, timeout).await;
        });
    }
    outcome
}

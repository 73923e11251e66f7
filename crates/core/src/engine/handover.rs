//! Local hand-over: when a task releases a lock that another task of the
//! same client waits for, the backend ends the old grant and makes the new
//! one in one step, and the waiter gets the lock without asking for it.
//!
//! That costs one server command instead of a release and a new grant, and
//! the lock is never free in between, so no other process can slip in, and
//! none is woken for nothing. A run of hand-overs ends once it has made
//! [`LockOptions::local_hand_overs`](crate::LockOptions::local_hand_overs)
//! of them and lasted
//! [`LockOptions::min_local_run`](crate::LockOptions::min_local_run); then
//! the lock is released to everyone, and the next local waiter lets other
//! processes try first.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::state::GrantState;
use crate::backend::{AcquireRequest, HandOver, Holder, Lease};
use crate::claim::Claim;
use crate::engine::bounded;
use crate::engine::held::HeldLease;
use crate::engine::keeper::Keeper;
use crate::engine::slots::SlotPermit;
use crate::error::{Error, Result};
use crate::lost::LossReason;

/// What a client needs to make the next grant of a lock it hands over.
#[derive(Debug)]
pub(crate) struct Succession {
    pub(crate) holder: Arc<Holder>,
    pub(crate) lease: Duration,
    pub(crate) bound: u32,
    pub(crate) min_run: Duration,
    pub(crate) keeper: Keeper,
}

impl Succession {
    /// Whether the lock `permit` holds should go straight to the next task
    /// of this client. At the bound, marks the permit to yield instead.
    pub(crate) fn applies<T>(&self, permit: &mut SlotPermit<T>) -> bool {
        if !permit.next_takes_hand_overs() {
            return false;
        }
        let ended = self.bound == 0
            || (permit.hand_overs() >= self.bound && permit.run_length() >= self.min_run);
        if ended {
            permit.yield_next();
            return false;
        }
        true
    }
}

/// The grant a hand-over made, for the next task in line: the caller
/// builds its guard and offers it.
pub(crate) struct NextGrant<T> {
    pub(crate) permit: SlotPermit<T>,
    pub(crate) held: Arc<HeldLease>,
    /// Its key in the keeper.
    pub(crate) key: u64,
}

/// Hands `held`, which must still be unlost, to the next task waiting in
/// this client, through the backend; the caller holds `held`'s operations
/// lock. Returns whether `held` was still ours, and the new grant when
/// there is one. Whatever happens, `held` ends; without a new grant, the
/// slot passes on free.
pub(crate) async fn hand_over<T>(
    held: &HeldLease,
    mut permit: SlotPermit<T>,
    succession: &Succession,
) -> Result<(bool, Option<NextGrant<T>>)> {
    let next = AcquireRequest {
        operation_timeout: held.lease.operation_timeout,
        ..AcquireRequest::new(
            held.lease.name.clone(),
            Claim::Exclusive,
            succession.lease,
            succession.holder.clone(),
        )
    };
    let sent_at = Instant::now();
    let outcome = bounded::call(
        &*held.backend,
        held.lease.operation_timeout,
        "hand-over",
        async {
            match held.backend.abilities().hand_overs {
                Some(hand_overs) => hand_overs.hand_over(&held.lease, &next).await,
                None => Err(Error::Unsupported(
                    "the backend no longer hands locks over".into(),
                )),
            }
        },
    )
    .await;
    held.end(LossReason::Released);
    let lease = next.granted(0, GrantState::none());
    match outcome {
        Ok(HandOver::Granted {
            fencing_token,
            confirmed_at,
            state,
        }) => {
            tracing::debug!(
                name = %lease.name,
                from = held.lease.fencing_token,
                to = fencing_token,
                "lock handed over"
            );
            let next_held = Arc::new(HeldLease::new(
                next.granted(fencing_token, state),
                held.backend.clone(),
                next.loss.clone(),
                held.metrics_by_name,
            ));
            // A grant made under a lease the server confirmed earlier ends a
            // lease after that confirmation, not after this call.
            let since = confirmed_at.map_or(sent_at, |at| at.min(sent_at));
            let key = succession.keeper.insert(next_held.clone(), since);
            permit.count_hand_over();
            crate::metrics::hand_over(held.backend.store_name());
            let next = NextGrant {
                permit,
                held: next_held,
                key,
            };
            Ok((true, Some(next)))
        }
        Ok(HandOver::NotOurs) => {
            // A hand-over the store ran twice (a driver sending it again
            // after a lost answer) can answer "not ours" to the grant its
            // first run made, which nobody would own for a lease: release
            // it by its identity, which finds nothing when the hand-over
            // did nothing. When it was there, the old grant was ours.
            match release(held, &lease).await {
                Ok(released) => Ok((released, None)),
                Err(error) => {
                    tracing::debug!(name = %lease.name, %error, "releasing a hand-over's grant failed");
                    Ok((false, None))
                }
            }
        }
        Err(error) => {
            // Either grant may hold the lock now: release both by identity,
            // the new one first, since it exists only if the old one ended.
            let new_released = release(held, &lease).await;
            let old_released = release(held, &held.lease).await;
            tracing::debug!(name = %lease.name, %error, "a hand-over failed; released both grants");
            match (new_released, old_released) {
                (Ok(true), _) | (_, Ok(true)) => Ok((true, None)),
                (Ok(false), Ok(false)) => Ok((false, None)),
                _ => Err(error),
            }
        }
    }
}

async fn release(held: &HeldLease, lease: &Lease) -> Result<bool> {
    bounded::call(
        &*held.backend,
        held.lease.operation_timeout,
        "release",
        held.backend.release(lease),
    )
    .await
}

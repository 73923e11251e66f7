//! The guard of an entity lock.

use std::fmt;
use std::sync::Arc;

use distlock_core::{Error, LockGuard, LossReason, LostSignal, Result, RiskReason};
use mongodb::bson::Bson;
use serde::Serialize;

use super::backend::EntityBackend;
use super::{update, value};
use crate::error::driver;

/// Proof that this process holds the lock of one entity, with the entity's
/// value as the lock read it.
///
/// Like a [`LockGuard`], it is owned, `'static` and `Send` (when `T` is),
/// and while it lives the lease is extended in the background;
/// [`lost`](Self::lost) resolves if the lease stops being ours.
///
/// End it with [`release`](Self::release) (write a new value and unlock in
/// one update), [`commit`](Self::commit) (write the value as changed
/// through [`value_mut`](Self::value_mut)) or
/// [`release_unchanged`](Self::release_unchanged) (unlock only). Dropping
/// the guard unlocks without writing, in a spawned task; where no Tokio
/// runtime is left to do that, the lock ends when its lease expires.
#[must_use = "dropping the guard unlocks the entity at once, without writing its value"]
pub struct EntityGuard<T> {
    guard: LockGuard,
    id: Bson,
    value: T,
    inserted: bool,
    backend: Arc<EntityBackend>,
}

impl<T: fmt::Debug> fmt::Debug for EntityGuard<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntityGuard")
            .field("id", &self.id)
            .field("fencing_token", &self.guard.fencing_token())
            .field("inserted", &self.inserted)
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

impl<T> EntityGuard<T> {
    pub(crate) fn new(
        guard: LockGuard,
        id: Bson,
        value: T,
        inserted: bool,
        backend: Arc<EntityBackend>,
    ) -> Self {
        Self {
            guard,
            id,
            value,
            inserted,
            backend,
        }
    }

    /// The entity's id.
    pub fn id(&self) -> &Bson {
        &self.id
    }

    /// The entity's value, as read when it was locked (with the changes
    /// made through [`value_mut`](Self::value_mut)).
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The entity's value, to change before [`commit`](Self::commit).
    /// Nothing is written until then.
    pub fn value_mut(&mut self) -> &mut T {
        &mut self.value
    }

    /// Whether this lock inserted the entity (only ever by
    /// `lock_or_insert` or `try_lock_or_insert`).
    pub fn inserted(&self) -> bool {
        self.inserted
    }

    /// The fencing token of this lock: the entity's counter, strictly
    /// greater than the token of every earlier lock of the same entity.
    pub fn fencing_token(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Resolves, with the reason, when the lease is no longer ours; see
    /// [`LockGuard::lost`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        self.guard.lost().await
    }

    /// Whether the lease has already been lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// A cloneable, `'static` signal of loss, for the task doing the work.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    /// Resolves, with the reason, when the lease is in danger or lost;
    /// see [`LockGuard::at_risk`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn at_risk(&self) -> RiskReason {
        self.guard.at_risk().await
    }

    /// Whether the lease is in danger now, and why; see
    /// [`LockGuard::risk`].
    pub fn risk(&self) -> Option<RiskReason> {
        self.guard.risk()
    }

    /// Extends the lease now, on top of the background extension. Only the
    /// lock's expiry field changes.
    ///
    /// # Errors
    /// [`Error::Lost`] if the lease is no longer ours; a backend error if
    /// the server could not be asked (the background extension keeps
    /// trying while the lease lasts).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`LockGuard::extend`].
    pub async fn extend(&self) -> Result<()> {
        self.guard.extend().await.map_err(|error| self.named(error))
    }

    /// Unlocks the entity without writing its value. Returns `Ok(true)` if
    /// the lock was still ours, `Ok(false)` if it had been lost.
    ///
    /// # Errors
    /// A backend error if the unlock could not be sent or confirmed; the
    /// lock then ends when its lease expires.
    ///
    /// # Cancel safety
    /// If the future is dropped before it completes, the unlock carries on
    /// in a spawned task.
    pub async fn release_unchanged(self) -> Result<bool> {
        self.guard.release().await
    }

    fn named(&self, error: Error) -> Error {
        named(&self.backend, &self.id, error)
    }
}

impl<T: Serialize> EntityGuard<T> {
    /// Writes `new_value` and unlocks the entity in one update, filtered on
    /// our lock: if the lease was lost (expired by the server's clock, or
    /// taken by someone else), nothing is written and the result is
    /// [`Error::Lost`].
    ///
    /// Each top-level field of `new_value` is set with `$set`, except `_id`,
    /// the lock fields and the version field; fields of the stored document
    /// that `T` does not model are left as they are. The version field is
    /// incremented, so that an optimistic update prepared from a value read
    /// before this lock is refused.
    ///
    /// # Errors
    /// [`Error::Lost`] as above; [`Error::InvalidData`], naming the field,
    /// when `new_value` cannot be written as a document (nothing is written
    /// and the entity is unlocked); a backend error when the update could
    /// not be sent or confirmed (whether it applied is then unknown; an
    /// update that did not apply leaves the lock to expire).
    ///
    /// # Cancel safety
    /// If the future is dropped once the update was sent, the update still
    /// completes, in a spawned task.
    pub async fn release(self, new_value: T) -> Result<()> {
        write_and_release(self.guard, self.id, self.backend, new_value).await
    }

    /// Writes the value as changed through [`value_mut`](Self::value_mut)
    /// and unlocks the entity, exactly as [`release`](Self::release) does
    /// with that value.
    ///
    /// # Errors
    /// As [`release`](Self::release).
    ///
    /// # Cancel safety
    /// As [`release`](Self::release).
    pub async fn commit(self) -> Result<()> {
        let Self {
            guard,
            id,
            value,
            backend,
            ..
        } = self;
        write_and_release(guard, id, backend, value).await
    }
}

/// Writes `new_value` and unlocks in one update, in place of the lock
/// client's own release.
async fn write_and_release<T: Serialize>(
    guard: LockGuard,
    id: Bson,
    backend: Arc<EntityBackend>,
    new_value: T,
) -> Result<()> {
    let what = backend.describe(&id);
    let set = match value::encode(&new_value, &what)
        .and_then(|document| value::modelled_fields(document, backend.fields(), &what))
    {
        Ok(set) => set,
        Err(error) => {
            let _ = guard.release().await;
            return Err(error);
        }
    };
    let write = update::write_and_unlock(backend.fields(), set);
    let written = guard
        .release_with({
            let backend = backend.clone();
            let id = id.clone();
            move |lease| async move {
                let updated = backend
                    .collection()
                    .update_one(update::ours(backend.fields(), &id, lease.id), write)
                    .await
                    .map_err(|error| {
                        driver(&format!("writing {}", backend.describe(&id)), error)
                    })?;
                Ok(updated.matched_count == 1)
            }
        })
        .await
        .map_err(|error| named(&backend, &id, error))?;
    if written {
        Ok(())
    } else {
        Err(Error::Lost { name: what })
    }
}

/// Renames the lock-name-based errors of the lock client after the entity.
pub(crate) fn named(backend: &EntityBackend, id: &Bson, error: Error) -> Error {
    match error {
        Error::Lost { .. } => Error::Lost {
            name: backend.describe(id),
        },
        Error::Timeout {
            waited, last_error, ..
        } => Error::Timeout {
            name: backend.describe(id),
            waited,
            last_error,
        },
        other => other,
    }
}

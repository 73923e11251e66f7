//! Exclusive locks, one object per name: how a grant is made, extended,
//! released and forced free with conditional writes alone.
//!
//! - **Take:** read the object. None: create it (`If-None-Match: *`) with
//!   our grant and a token floored by this machine's clock. Free, or held
//!   by a holder this process has seen silent for a whole lease: replace
//!   the version read (`If-Match`) with our grant and the token plus one
//!   (or this machine's clock in µs, if that is greater).
//!   Held otherwise: wait, at most until that lease would be over.
//! - **Extend:** replace the version our last write made with the same
//!   grant, under a new write identity (so a new ETag).
//! - **Release:** replace it with a free record that keeps the token.
//! - **Resume** (a grant taken up by its identity after a restart):
//!   replace the version that holds the grant, with its token, under the
//!   new identity; then read it back, and keep it only if the store's
//!   stamps of the old grant's last write and of this one show that the
//!   old lease still ran (see [`crate::stamps`]); otherwise free it.
//! - A write that meets a changed object reads it back: holding its own
//!   write identity, the write landed and only its answer was lost;
//!   holding our grant under an earlier write of ours (an extension whose
//!   answer was lost), it writes again over that; anything else is
//!   someone else's, so the lock is held (a take) or lost (an extension).

use std::time::{Duration, SystemTime};

use object_store::UpdateVersion;
use object_store::path::Path;

use distlock_core::backend::{AcquireRequest, Attempt, GrantState, Lease, token_floor};
use distlock_core::{Claim, Error, LockName, Result};

use crate::grant::GrantHandle;
use crate::keys::KeySpace;
use crate::record::{Grant, Record};
use crate::sightings::Sightings;
use crate::stamps::{check_stamped, within_lease};
use crate::store::{BACKEND, Found, Store, Written};

/// How many writes one extension, release or forced release makes before it
/// gives up on an object that keeps changing under it: each round is one
/// conditional write, and a round ends early unless an earlier write of
/// the same grant landed unseen.
const ROUNDS: usize = 3;

/// The exclusive locks of one backend.
#[derive(Debug)]
pub(crate) struct Locks {
    pub(crate) store: Store,
    pub(crate) keys: KeySpace,
    sightings: Sightings,
}

impl Locks {
    pub(crate) fn new(store: Store, keys: KeySpace) -> Self {
        Self {
            store,
            keys,
            sightings: Sightings::default(),
        }
    }

    /// One attempt at `request.name`.
    pub(crate) async fn try_acquire(&self, request: &AcquireRequest) -> Result<Attempt> {
        let key = self.keys.lock(&request.name);
        let grant = Grant {
            id: request.lease_id,
            holder: (*request.holder).clone(),
            lease: request.lease,
        };
        let (record, written) = match self.store.read(&key).await? {
            None => {
                let record = Record::held(&request.name, first_token(), grant);
                let written = self.store.create(&key, &record).await?;
                (record, written)
            }
            Some(found) => {
                check_name(&key, &found, &request.name)?;
                if let Some(held) = self.still_held(&key, &found) {
                    return Ok(held);
                }
                let record = Record::held(&request.name, next_token(&key, &found)?, grant);
                let written = self.store.replace(&key, &record, &found.version).await?;
                (record, written)
            }
        };
        match written {
            Written::Stored(Some(version)) => Ok(self.acquired(key, request, &record, version)),
            Written::Stored(None) | Written::Conflict => self.settle(key, request, &record).await,
            // The answer was lost: the read says whether the write landed,
            // and if the store cannot be read either, core releases the
            // attempt by its identity.
            Written::Unsure(error) => self.settle(key, request, &record).await.map_err(|_| error),
        }
    }

    /// `Some(Held)` when `found` is held by a holder that may still be
    /// alive: one this process has not yet seen silent for its lease.
    fn still_held(&self, key: &Path, found: &Found) -> Option<Attempt> {
        let Some(holder) = &found.record.grant else {
            self.sightings.forget(key);
            return None;
        };
        let silent_for = self
            .sightings
            .unchanged_for(key, found.etag(), found.read_at);
        if silent_for < holder.lease {
            return Some(Attempt::Held {
                retry_after: Some(holder.lease - silent_for),
            });
        }
        tracing::debug!(
            target: "distlock::objectstore",
            %key,
            lease = ?holder.lease,
            "taking over a lock whose object was unchanged for its whole lease"
        );
        None
    }

    /// The grant `record` made for `request`, stored as `version`.
    fn acquired(
        &self,
        key: Path,
        request: &AcquireRequest,
        record: &Record,
        version: UpdateVersion,
    ) -> Attempt {
        self.sightings.forget(&key);
        let holder = (*request.holder).clone();
        Attempt::Acquired {
            fencing_token: record.token,
            state: GrantHandle::state(key, record.token, holder, version),
        }
    }

    /// After a take whose write met a changed object (or whose answer gave
    /// no version): reads the object to learn whether `record` is in it.
    async fn settle(
        &self,
        key: Path,
        request: &AcquireRequest,
        record: &Record,
    ) -> Result<Attempt> {
        match self.store.read(&key).await? {
            Some(found) if found.record.write == record.write => {
                Ok(self.acquired(key, request, record, found.version))
            }
            Some(found) => Ok(self.still_held(&key, &found).unwrap_or(Attempt::Held {
                // Someone else's write came between ours and this read, and
                // left the lock free again: ask again at the next backoff.
                retry_after: None,
            })),
            None => Ok(Attempt::Held { retry_after: None }),
        }
    }

    /// Extends `lease`, if it is still ours.
    pub(crate) async fn extend(&self, lease: &Lease) -> Result<bool> {
        let Some(handle) = GrantHandle::of(lease) else {
            // Core extends only grants whose attempt answered.
            return Ok(false);
        };
        let mut version = handle.version();
        for _ in 0..ROUNDS {
            let grant = Grant {
                id: lease.id,
                holder: handle.holder.clone(),
                lease: lease.lease,
            };
            let record = Record::held(&lease.name, handle.token, grant);
            match self.replace_settled(&handle.key, &record, &version).await? {
                Replaced::Landed(made) => {
                    handle.wrote(made);
                    return Ok(true);
                }
                // An earlier write of this grant landed unseen: write over it.
                Replaced::Changed(found) if found.record.held_by(lease.id) => {
                    version = found.version;
                }
                Replaced::Changed(_) | Replaced::Missing => return Ok(false),
            }
        }
        Err(kept_changing(&handle.key, "extension"))
    }

    /// Releases `lease`, if it is still ours.
    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        let key = self.keys.lock(&lease.name);
        let mut known = GrantHandle::of(lease).map(|handle| (handle.version(), handle.token));
        for _ in 0..ROUNDS {
            let (version, token) = match known.take() {
                Some(known) => known,
                // A grant whose answer was lost: find it by its identity.
                None => match self.store.read(&key).await? {
                    Some(found) if found.record.held_by(lease.id) => {
                        (found.version, found.record.token)
                    }
                    _ => return Ok(false),
                },
            };
            let record = Record::free(&lease.name, token);
            match self.replace_settled(&key, &record, &version).await? {
                Replaced::Landed(_) => return Ok(true),
                Replaced::Changed(found) if found.record.held_by(lease.id) => {
                    known = Some((found.version, found.record.token));
                }
                Replaced::Changed(_) | Replaced::Missing => return Ok(false),
            }
        }
        Err(kept_changing(&key, "release"))
    }

    /// Takes up `lease`, a grant made before a restart, for `request`: the
    /// object's grant must have `lease`'s identity and token. Its version
    /// is replaced (`If-Match`) with the same token under
    /// `request.lease_id`, holder and lease, so that the old identity, a
    /// second resume and a take-over all meet a changed object. Answers
    /// the new grant's state if the old one was still within its lease
    /// when the store took the write, by the store's stamps; otherwise
    /// frees the lock (the write already took it from the old identity)
    /// and answers `None`, as when the grant is gone.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the store's stamps cannot show the
    /// grant within its lease (see [`check_stamped`]); the store's errors,
    /// after which the new identity may hold the lock.
    pub(crate) async fn resume(
        &self,
        lease: &Lease,
        request: &AcquireRequest,
    ) -> Result<Option<GrantState>> {
        if lease.claim != Claim::Exclusive {
            // Only exclusive locks are granted here, so no other claim is held.
            return Ok(None);
        }
        let key = self.keys.lock(&lease.name);
        let Some(mut found) = self.store.read(&key).await? else {
            return Ok(None);
        };
        check_name(&key, &found, &lease.name)?;
        for _ in 0..ROUNDS {
            let old_lease = match &found.record.grant {
                Some(grant)
                    if grant.id == lease.id && found.record.token == lease.fencing_token =>
                {
                    grant.lease
                }
                _ => return Ok(None),
            };
            check_stamped(&key, found.modified, old_lease)?;
            let grant = Grant {
                id: request.lease_id,
                holder: (*request.holder).clone(),
                lease: request.lease,
            };
            let record = Record::held(&lease.name, lease.fencing_token, grant);
            match self.replace_settled(&key, &record, &found.version).await? {
                Replaced::Landed(_) => {
                    return self
                        .keep_if_within(key, request, &record, &found, old_lease)
                        .await;
                }
                // The old holder extended in between: take up that version.
                Replaced::Changed(now) if now.record.held_by(lease.id) => found = now,
                Replaced::Changed(_) | Replaced::Missing => return Ok(None),
            }
        }
        Err(kept_changing(&key, "resume"))
    }

    /// After a resume's write of `record` over `old` landed: reads it back
    /// for the store's stamp of it, and keeps the grant if `old`, with
    /// `old_lease`, was then still within its lease by the two stamps;
    /// otherwise frees the lock, keeping the token.
    async fn keep_if_within(
        &self,
        key: Path,
        request: &AcquireRequest,
        record: &Record,
        old: &Found,
        old_lease: Duration,
    ) -> Result<Option<GrantState>> {
        let written = match self.store.read(&key).await? {
            Some(found) if found.record.write == record.write => found,
            // Changed again already (a forced release, a deleted object):
            // the grant is gone, and nothing of ours is left to free.
            _ => return Ok(None),
        };
        if within_lease(old.modified, written.modified, old_lease) {
            self.sightings.forget(&key);
            let holder = (*request.holder).clone();
            let state = GrantHandle::state(key, record.token, holder, written.version);
            return Ok(Some(state));
        }
        tracing::debug!(
            target: "distlock::objectstore",
            %key,
            lease = ?old_lease,
            "a resumed grant was not shown within its lease by the store's stamps; freeing it"
        );
        let free = Record::free(&record.name, record.token);
        self.replace_settled(&key, &free, &written.version).await?;
        Ok(None)
    }

    /// Frees `name` from whoever holds it. Returns whether it was held.
    pub(crate) async fn force_release(&self, name: &LockName) -> Result<bool> {
        let key = self.keys.lock(name);
        for _ in 0..ROUNDS {
            let Some(found) = self.store.read(&key).await? else {
                return Ok(false);
            };
            check_name(&key, &found, name)?;
            if found.record.grant.is_none() {
                return Ok(false);
            }
            let record = Record::free(name, found.record.token);
            if let Replaced::Landed(_) = self.replace_settled(&key, &record, &found.version).await?
            {
                return Ok(true);
            }
        }
        Err(kept_changing(&key, "forced release"))
    }

    /// Replaces `version` of `key` with `record`, and when the answer does
    /// not say that it landed (a failed precondition, a lost answer, no
    /// version given), reads the object back to learn it.
    ///
    /// # Errors
    /// The store fails the write for good (credentials, no conditional
    /// writes), or cannot be read back.
    async fn replace_settled(
        &self,
        key: &Path,
        record: &Record,
        version: &UpdateVersion,
    ) -> Result<Replaced> {
        if let Written::Stored(Some(made)) = self.store.replace(key, record, version).await? {
            return Ok(Replaced::Landed(made));
        }
        Ok(match self.store.read(key).await? {
            Some(found) if found.record.write == record.write => Replaced::Landed(found.version),
            Some(found) => Replaced::Changed(found),
            None => Replaced::Missing,
        })
    }
}

/// What a replacement came to, settled by reading back where needed.
enum Replaced {
    /// It landed: the version it made.
    Landed(UpdateVersion),
    /// The object holds something else: another write came first.
    Changed(Found),
    /// The object is gone.
    Missing,
}

/// The token of a lock whose object is missing: on first use, or after the
/// object was deleted (a lifecycle rule, a person). This machine's clock,
/// in microseconds: greater than every token of the lost object as long as
/// the clock of the machine that creates it now reads later than the clock
/// of the one that created the lost object did then, by more than the
/// grants made since.
fn first_token() -> u64 {
    token_floor(SystemTime::now()).max(1)
}

/// The token after `found`'s: one more, and at least this machine's clock
/// in microseconds, as for a missing object. The precondition alone makes
/// it greater than the token read; the clock floor keeps it greater than
/// the tokens of versions the store no longer shows: an older version
/// restored by a person, or writes a store lost in a crash (Azurite, say).
fn next_token(key: &Path, found: &Found) -> Result<u64> {
    let next = found
        .record
        .token
        .checked_add(1)
        .ok_or_else(|| Error::InvalidData {
            what: format!("lock object {key}"),
            field: "token".into(),
            reason: "the fencing token is at its largest value".into(),
        })?;
    Ok(next.max(first_token()))
}

/// Refuses an object whose body names another lock: its key is the hash of
/// the name, so it was not written by distlock for this name.
fn check_name(key: &Path, found: &Found, name: &LockName) -> Result<()> {
    if found.record.name == *name {
        return Ok(());
    }
    Err(Error::InvalidData {
        what: format!("lock object {key}"),
        field: "name".into(),
        reason: format!(
            "the object names lock {}, not {name}: it was not written by distlock for this name",
            found.record.name
        ),
    })
}

/// The error of a write that met a changed object `ROUNDS` times.
fn kept_changing(key: &Path, what: &str) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: format!(
            "the {what} of {key} met a changed object {ROUNDS} times in a row; it will be tried again"
        ),
        source: None,
    }
}

/// How long a lease has left by the store's last write of it, estimated
/// for [`list`](distlock_core::backend::Backend::list) only, with this
/// machine's clock against the store's time of that write.
pub(crate) fn expires_in(lease: Duration, written: SystemTime) -> Duration {
    let since = SystemTime::now()
        .duration_since(written)
        .unwrap_or(Duration::ZERO);
    lease.saturating_sub(since)
}

//! The entity lock backend: the lock client's [`Backend`] over the lock
//! fields of the entities in one collection.
//!
//! It hands two things past the lock client: the value `lock_or_insert`
//! inserts when the entity is missing comes with each attempt as its
//! payload ([`InsertValue`]), and the document a successful lock read goes
//! back to the caller in the grant's state ([`LockedDocument`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use distlock_core::backend::Waiters;
use distlock_core::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, Extended, GrantState, Lease,
    LeaseId, ReleaseWatch, WaitState, Wakeups,
};
use distlock_core::{Claim, Error, LockInfo, LockKind, LockName, Result};
use futures::TryStreamExt;
use mongodb::Collection;
use mongodb::bson::{Bson, Document};
use mongodb::options::ReturnDocument;

use super::fields::Fields;
use super::{id, primary, update};
use crate::bulk::{copy_error, settle};
use crate::clock::ServerClock;
use crate::counter;
use crate::document::lock_id;
use crate::error::{BACKEND, driver, is_duplicate_key};
use crate::watch::{LazyWatcher, Subject};

/// What a successful lock read, waiting for its caller.
#[derive(Debug)]
pub(crate) struct Grant {
    /// The entity's document as the lock left it.
    pub(crate) document: Document,
    /// Whether this lock inserted the entity.
    pub(crate) inserted: bool,
}

/// A grant's state: what the lock read, until its caller takes it.
#[derive(Debug)]
pub(crate) struct LockedDocument(Mutex<Option<Grant>>);

impl LockedDocument {
    /// Takes what the lock read; `None` once taken.
    pub(crate) fn take(&self) -> Option<Grant> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// The payload of a `lock_or_insert` call's attempts: the fields to insert
/// when the entity is missing.
#[derive(Debug)]
pub(crate) struct InsertValue(pub(crate) Document);

pub(crate) struct EntityBackend {
    collection: Collection<Document>,
    fields: Fields,
    clock: ServerClock,
    operation_timeout: Duration,
    /// Release wake-ups, when asked for.
    watcher: Option<LazyWatcher>,
}

impl fmt::Debug for EntityBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntityBackend")
            .field("namespace", &self.collection.namespace().to_string())
            .field("fields", &self.fields)
            .finish_non_exhaustive()
    }
}

impl EntityBackend {
    pub(crate) fn new(
        collection: Collection<Document>,
        fields: Fields,
        operation_timeout: Duration,
        release_wakeups: bool,
    ) -> Self {
        let collection = primary::on_primary(&collection);
        let watcher = release_wakeups.then(|| {
            let subject = Subject::Entities {
                lock_id: fields.lock_id.clone(),
            };
            LazyWatcher::new(collection.clone(), subject, operation_timeout)
        });
        Self {
            watcher,
            collection,
            fields,
            clock: ServerClock::default(),
            operation_timeout,
        }
    }

    pub(crate) fn collection(&self) -> &Collection<Document> {
        &self.collection
    }

    pub(crate) fn fields(&self) -> &Fields {
        &self.fields
    }

    /// Starts release wake-ups unless they run; returns whether they do.
    pub(crate) async fn start_release_wakeups(&self) -> bool {
        match &self.watcher {
            Some(watcher) => watcher.start().await,
            None => false,
        }
    }

    /// How an entity is named in messages.
    pub(crate) fn describe(&self, id: &Bson) -> String {
        format!("entity {id} in {}", self.collection.namespace())
    }

    /// Judges the document a lock attempt returned: ours when it carries
    /// our identity. Keeps it for the caller when it is. A stored token no
    /// lock can be built on (the lock pipeline leaves the entity as it was)
    /// is an error, whoever holds the entity.
    fn judge(
        &self,
        request: &AcquireRequest,
        id: &Bson,
        document: Document,
        sent: Instant,
        inserted: bool,
    ) -> Result<Attempt> {
        let fields = &self.fields;
        let expires_at = document
            .get_datetime(&fields.expires_at)
            .ok()
            .map(|date| date.timestamp_millis());
        let token = counter::read(&document, &fields.token)
            .map_err(|bad| bad.into_error(self.describe(id)))?;
        if document.get_str(&fields.lock_id).ok() != Some(lock_id(request.lease_id).as_str()) {
            let retry_after = expires_at.and_then(|at| self.clock.until(at));
            return Ok(Attempt::Held { retry_after });
        }
        let fencing_token = token.ok_or_else(|| Error::Backend {
            backend: BACKEND,
            message: format!(
                "locking {}: the locked document has no valid `{}`",
                self.describe(id),
                fields.token
            ),
            source: None,
        })?;
        if let Some(expires_at) = expires_at {
            let lease = i64::try_from(request.lease.as_millis()).unwrap_or(i64::MAX);
            self.clock
                .observe(expires_at.saturating_sub(lease), sent, Instant::now());
        }
        let locked = LockedDocument(Mutex::new(Some(Grant { document, inserted })));
        Ok(Attempt::Acquired {
            fencing_token,
            state: GrantState::new(locked),
        })
    }

    /// Inserts the entity, locked by us, with `value` as its fields. Loses
    /// (held, retry now) when the entity exists by now.
    async fn insert_locked(
        &self,
        request: &AcquireRequest,
        id: &Bson,
        value: &Document,
    ) -> Result<Attempt> {
        let sent = Instant::now();
        let inserted = self
            .collection
            .find_one_and_update(
                update::insert_filter(&self.fields, id, request.lease_id),
                update::insert(&self.fields, value, request.lease),
            )
            .upsert(true)
            .return_document(ReturnDocument::After)
            .max_time(request.operation_timeout)
            .await;
        match inserted {
            Ok(Some(document)) => self.judge(request, id, document, sent, true),
            // A losing concurrent upsert may come back without a document
            // on some servers: read it back. The insert was ours exactly
            // when it carries our identity.
            Ok(None) => {
                let found = self
                    .collection
                    .find_one(update::by_id(id))
                    .max_time(request.operation_timeout)
                    .await
                    .map_err(|error| driver(&format!("inserting {}", self.describe(id)), error))?;
                match found {
                    Some(document) => self.judge(request, id, document, sent, true),
                    None => Ok(Attempt::Held {
                        retry_after: Some(Duration::ZERO),
                    }),
                }
            }
            // Somebody else inserted it first; it exists now, so try again
            // to lock it.
            Err(error) if is_duplicate_key(&error) => Ok(Attempt::Held {
                retry_after: Some(Duration::ZERO),
            }),
            Err(error) => Err(driver(&format!("inserting {}", self.describe(id)), error)),
        }
    }

    /// One row of the list pipeline; `None` when its id makes no name.
    ///
    /// # Errors
    /// [`Error::InvalidData`] when its token is not a whole number.
    fn list_row(&self, found: &Document) -> Result<Option<LockInfo>> {
        let Some(id) = found.get("_id") else {
            return Ok(None);
        };
        let Ok(name) = id::name(id) else {
            return Ok(None);
        };
        let remaining = match found.get("remainingMs") {
            Some(Bson::Int64(ms)) => u64::try_from(*ms).unwrap_or(0),
            Some(Bson::Int32(ms)) => u64::try_from(*ms).unwrap_or(0),
            _ => 0,
        };
        let fencing_token = counter::read(found, &self.fields.token)
            .map_err(|bad| bad.into_error(self.describe(id)))?;
        Ok(Some(LockInfo {
            kind: LockKind::Exclusive,
            permits: None,
            name,
            holder: None,
            fencing_token,
            expires_in: Some(Duration::from_millis(remaining)),
            waiters: Waiters::Unknown,
        }))
    }

    /// Extends the leases of one lease period, one command for all.
    async fn extend_period(
        &self,
        lease: Duration,
        leases: &[(Bson, LeaseId)],
    ) -> Result<Vec<bool>> {
        let fields = &self.fields;
        let updated = self
            .collection
            .update_many(
                update::all_ours(fields, leases),
                update::extend(fields, lease),
            )
            .await
            .map_err(|error| driver("extending entity locks", error))?;
        if usize::try_from(updated.matched_count).unwrap_or(usize::MAX) >= leases.len() {
            return Ok(vec![true; leases.len()]);
        }
        // Some were lost. Those still ours and unexpired now were so when
        // the update ran (only we extend them), so they were extended.
        let live: Vec<String> = self
            .collection
            .find(update::all_ours(fields, leases))
            .max_time(self.operation_timeout)
            .await
            .map_err(|error| driver("checking extended entity locks", error))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(|error| driver("checking extended entity locks", error))?
            .into_iter()
            .filter_map(|found| found.get_str(&fields.lock_id).ok().map(str::to_owned))
            .collect();
        Ok(leases
            .iter()
            .map(|(_, lease)| live.contains(&lock_id(*lease)))
            .collect())
    }

    /// Extends one entity's lock, in one update.
    async fn extend_one(&self, lease: &Lease) -> Result<bool> {
        let id = id::parse(&lease.name)?;
        let updated = self
            .collection
            .update_one(
                update::ours(&self.fields, &id, lease.id),
                update::extend(&self.fields, lease.lease),
            )
            .await
            .map_err(|error| {
                driver(
                    &format!("extending the lock of {}", self.describe(&id)),
                    error,
                )
            })?;
        Ok(updated.matched_count == 1)
    }
}

#[async_trait]
impl Backend for EntityBackend {
    fn store_name(&self) -> &'static str {
        "mongodb"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
    }

    async fn try_acquire(&self, request: &AcquireRequest, _: &mut WaitState) -> Result<Attempt> {
        if request.claim != Claim::Exclusive {
            return Err(Error::Unsupported(format!(
                "entity locks are exclusive; {} is not granted on an entity",
                request.claim
            )));
        }
        let id = id::parse(&request.name)?;
        let sent = Instant::now();
        let found = self
            .collection
            .find_one_and_update(
                update::by_id(&id),
                update::lock(&self.fields, request.lease_id, request.lease),
            )
            .return_document(ReturnDocument::After)
            .max_time(request.operation_timeout)
            .await
            .map_err(|error| driver(&format!("locking {}", self.describe(&id)), error))?;
        match (found, request.payload.get::<InsertValue>()) {
            (Some(document), _) => self.judge(request, &id, document, sent, false),
            (None, Some(InsertValue(value))) => self.insert_locked(request, &id, value).await,
            (None, None) => Err(Error::NotFound {
                what: self.describe(&id),
            }),
        }
    }

    fn extend_many_limit(&self) -> usize {
        // A few commands extend any number of leases.
        usize::MAX
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        if let [lease] = leases {
            return Extended::new(vec![self.extend_one(lease).await], None);
        }
        let mut outcomes: Vec<Option<Result<bool>>> = leases.iter().map(|_| None).collect();
        let mut by_period: HashMap<Duration, Vec<(usize, Bson, LeaseId)>> = HashMap::new();
        for (index, lease) in leases.iter().enumerate() {
            match id::parse(&lease.name) {
                Ok(id) => by_period
                    .entry(lease.lease)
                    .or_default()
                    .push((index, id, lease.id)),
                Err(error) => outcomes[index] = Some(Err(error)),
            }
        }
        for (period, entries) in by_period {
            // Bound each command well below MongoDB's 16 MiB: ids are at
            // most about 1 KiB each.
            for chunk in entries.chunks(4096) {
                let pairs: Vec<(Bson, LeaseId)> = chunk
                    .iter()
                    .map(|(_, id, lease)| (id.clone(), *lease))
                    .collect();
                match self.extend_period(period, &pairs).await {
                    Ok(still_ours) => {
                        for ((index, _, _), ours) in chunk.iter().zip(still_ours) {
                            outcomes[*index] = Some(Ok(ours));
                        }
                    }
                    Err(error) => {
                        for (index, _, _) in chunk {
                            outcomes[*index] = Some(Err(copy_error(&error)));
                        }
                    }
                }
            }
        }
        Extended::new(settle(outcomes), None)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let id = id::parse(&lease.name)?;
        let updated = self
            .collection
            .update_one(
                update::ours(&self.fields, &id, lease.id),
                update::unlock(&self.fields),
            )
            .await
            .map_err(|error| driver(&format!("unlocking {}", self.describe(&id)), error))?;
        Ok(updated.matched_count == 1)
    }

    async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        let found: Vec<Document> = self
            .collection
            .aggregate(update::list(&self.fields))
            .max_time(limit)
            .await
            .map_err(|error| driver("listing entity locks", error))?
            .try_collect()
            .await
            .map_err(|error| driver("listing entity locks", error))?;
        let mut locks = found
            .iter()
            .filter_map(|found| self.list_row(found).transpose())
            .collect::<Result<Vec<LockInfo>>>()?;
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(locks)
    }

    /// One update, which core's timer bounds.
    async fn force_release(&self, name: &LockName, _: Duration) -> Result<bool> {
        let id = id::parse(name)?;
        let updated = self
            .collection
            .update_one(
                update::anybodys(&self.fields, &id),
                update::unlock(&self.fields),
            )
            .await
            .map_err(|error| driver(&format!("force-unlocking {}", self.describe(&id)), error))?;
        Ok(updated.matched_count == 1)
    }

    /// No later release: an entity lock is not kept after its release.
    /// No resume: an entity guard carries the entity's value as its lock
    /// read it, which a guard taken up by identity would not have, and it
    /// gives no handle (see *Restarts* in the module's documentation).
    fn abilities(&self) -> Abilities<'_> {
        let abilities = Abilities::none()
            .without_delayed_release(
                "MongoDB's entity locks cannot keep a lock held after its release (min_hold)",
            )
            .without_resumes(
                "an entity lock is held through its EntityGuard, which carries the entity's \
                 value as the lock read it and gives no resume handle; after a restart, lock \
                 the entity again",
            );
        if self.watcher.is_some() {
            abilities.with_wakeups(self)
        } else {
            abilities
        }
    }
}

impl Wakeups for EntityBackend {
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.watcher.as_ref()?.watch(name)
    }
}

//! Entity locks: pessimistic locks kept on the entity's own document, and
//! optimistic updates as the alternative.
//!
//! An [`EntityLocks`] handle works on a collection of your entities. Locking
//! one sets three fields on its document (by default `lockId`,
//! `lockExpiresAt` and `lockToken`) in one atomic `findOneAndUpdate`, which
//! also returns the entity's value; releasing writes the new value and
//! clears the lock in one update filtered on our lock, so a holder whose
//! lease was lost writes nothing.
//!
//! ```no_run
//! use std::time::Duration;
//! use distlock_core::LockOptions;
//! use distlock_mongodb::entity::EntityLocks;
//! use distlock_mongodb::mongodb::Client;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Serialize, Deserialize)]
//! struct Report {
//!     #[serde(rename = "_id")]
//!     id: String,
//!     title: String,
//!     pages: u32,
//! }
//!
//! # async fn run() -> distlock_core::Result<()> {
//! # let client = Client::with_uri_str("mongodb://db1,db2,db3/?replicaSet=rs0").await.unwrap();
//! let reports = client.database("app").collection::<Report>("reports");
//! let locks = EntityLocks::new(reports, LockOptions::default());
//!
//! let mut report = locks.lock("report-42", Duration::from_secs(10)).await?;
//! report.value_mut().pages += 1;
//! // Writes the modelled fields and unlocks in one update, only if the
//! // lock is still ours.
//! report.commit().await?;
//! # Ok(()) }
//! ```
//!
//! # Fields on the entity
//!
//! | field | value |
//! | --- | --- |
//! | `lockId` | the current lock's 128-bit random identity, as 32 hex digits; absent when unlocked |
//! | `lockExpiresAt` | when the current lock expires unless extended, by the server's clock; absent when unlocked |
//! | `lockToken` | int64, the latest lock's fencing token, `max(previous + 1, server time in ms)`; kept across releases |
//! | `version` | int64, incremented by every write of the value ([`EntityGuard::release`], [`EntityLocks::update_if_unchanged`]); a missing version counts as 0 |
//!
//! The names are set with [`EntityLocksBuilder`].
//!
//! # What is written
//! Locking, extending and unlocking change only the lock fields.
//! [`EntityGuard::release`] and [`EntityGuard::commit`] also write the
//! value: each top-level field of the serialised `T` is set with `$set`
//! (never a whole-document replace), except `_id`, the lock fields and the
//! version, and the version is incremented. A field of the document that
//! `T` does not model is never removed or changed, and a field that `T`
//! models but skips when serialising (`skip_serializing_if`) is left as
//! stored.
//!
//! # Guarantees
//! - **Expiry is judged by the server's clock**: a lock is free when its
//!   `lockId` is absent or its `lockExpiresAt` is not after `$$NOW`. The
//!   holder gives the lease up on its own monotonic clock a safety margin
//!   early, as for named locks.
//! - **Waiting, extension and loss detection** are the lock client's: the
//!   [`LockOptions`] lease, extension cadence,
//!   safety margin, operation timeout and backoff apply as they do to named
//!   locks, and one keeper per handle extends every held entity in bulk
//!   (one `updateMany` per cadence). Tasks of one handle that lock the same
//!   entity queue locally. Waiters in other processes are woken when the
//!   entity is unlocked or deleted, by one change stream per handle on the
//!   collection, filtered to the entities waited for and to unlocks only
//!   (a write that keeps the lock wakes nobody). The stream opens at the
//!   handle's first wait, or at [`EntityLocks::start_release_wakeups`].
//!   Before it opens, and on a server without change streams, waiters poll
//!   with jittered backoff, never later than the moment the current lease
//!   ends.
//! - **Fencing tokens** strictly increase per entity, across releases and
//!   across the entity's deletion and re-insertion, as long as the server's
//!   clock does not go back and, for a re-insertion, has passed the last
//!   token (tokens run ahead of the clock only when an entity is locked
//!   more than once per millisecond).
//! - **Caller-supplied values** inside update pipelines (the lock identity,
//!   the default value of [`EntityLocks::lock_or_insert`]) are wrapped in
//!   `$literal`; values written back use the plain `$set` operator, so a
//!   value such as `"$$NOW"` is stored as written.
//! - **Durability** follows the collection's write concern: use `majority`
//!   (a collection obtained with
//!   [`collection_with_options`](mongodb::Database::collection_with_options))
//!   so that a failover never hands a held entity to someone else.
//! - **Reads and writes go to the primary**, with read concern `local`,
//!   whatever read preference and read concern your collection handle has
//!   (its write concern is kept): a lagging secondary could show a lease
//!   of ours as lost, or someone else's as ours.
//! - **Counters edited by hand**: a `lockToken` or version stored as a
//!   whole double (mongosh's numbers) is read as the integer it holds, and
//!   the next token is written as an int64; any other value is
//!   [`Error::InvalidData`] naming the field, and no lock is built on it.
//!
//! # Restarts
//! An entity lock cannot be resumed by another process, as a named lock
//! can with [`LockGuard::handle`] and [`LockClient::resume`]: an
//! [`EntityGuard`] gives no handle, because it is more than the grant (it
//! carries the entity's value as the lock read it, and its release is the
//! write of that value). A process that restarted while it held an entity
//! locks it again, which waits until the old lease runs out, or ends the
//! old lock with [`EntityLocks::force_unlock`]. See *Limits* in
//! `docs/entity-locks.md`.
//!
//! # Optimistic updates
//! [`EntityLocks::read`] returns the value with its version, and
//! [`EntityLocks::update_if_unchanged`] writes a new value only if the
//! version is still the one read and nobody holds the entity's lock,
//! incrementing the version. Nothing waits and nothing needs releasing; a
//! conflict is reported as `Ok(false)`, to be retried from a fresh read.
//! See `docs/entity-locks.md` for when to prefer which.

mod backend;
mod fields;
mod guard;
pub(crate) mod id;
mod primary;
mod update;
mod value;

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, Error, LockClient, LockGuard, LockOptions, Payload, Result, TryOptions,
};
use mongodb::Collection;
use mongodb::bson::{Bson, Document};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use self::fields::{
    DEFAULT_LOCK_EXPIRES_AT_FIELD, DEFAULT_LOCK_ID_FIELD, DEFAULT_LOCK_TOKEN_FIELD,
    DEFAULT_VERSION_FIELD,
};
pub use self::guard::EntityGuard;

use self::backend::{EntityBackend, InsertValue, LockedDocument};
use self::fields::Fields;
use self::guard::named;
use crate::counter;
use crate::error::driver;

/// Locks on the entities of one collection, kept on the entities' own
/// documents; see the [module documentation](self).
///
/// Cheap to clone; clones share one lock client, so they share its keeper
/// and its local queues.
pub struct EntityLocks<T> {
    client: LockClient,
    backend: Arc<EntityBackend>,
    _value: PhantomData<fn() -> T>,
}

impl<T> Clone for EntityLocks<T> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            backend: self.backend.clone(),
            _value: PhantomData,
        }
    }
}

impl<T> fmt::Debug for EntityLocks<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntityLocks")
            .field("backend", &self.backend)
            .field("options", self.client.options())
            .finish_non_exhaustive()
    }
}

/// An entity's value with its version, as [`EntityLocks::read`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value.
    pub value: T,
    /// The version, 0 when the document has none.
    pub version: u64,
}

/// Builds [`EntityLocks`]; see [`EntityLocks::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct EntityLocksBuilder<T> {
    collection: Collection<Document>,
    options: LockOptions,
    fields: Fields,
    release_wakeups: bool,
    _value: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for EntityLocksBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntityLocksBuilder")
            .field("namespace", &self.collection.namespace().to_string())
            .field("options", &self.options)
            .field("fields", &self.fields)
            .field("release_wakeups", &self.release_wakeups)
            .finish_non_exhaustive()
    }
}

impl<T> EntityLocksBuilder<T> {
    /// The lease, extension and waiting options (default
    /// [`LockOptions::default`]).
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// The field holding the current lock's identity (default
    /// [`DEFAULT_LOCK_ID_FIELD`]).
    pub fn lock_id_field(mut self, name: impl Into<String>) -> Self {
        self.fields.lock_id = name.into();
        self
    }

    /// The field holding when the current lock expires (default
    /// [`DEFAULT_LOCK_EXPIRES_AT_FIELD`]).
    pub fn lock_expires_at_field(mut self, name: impl Into<String>) -> Self {
        self.fields.expires_at = name.into();
        self
    }

    /// The field holding the fencing token (default
    /// [`DEFAULT_LOCK_TOKEN_FIELD`]).
    pub fn lock_token_field(mut self, name: impl Into<String>) -> Self {
        self.fields.token = name.into();
        self
    }

    /// The version field of optimistic updates (default
    /// [`DEFAULT_VERSION_FIELD`]).
    pub fn version_field(mut self, name: impl Into<String>) -> Self {
        self.fields.version = name.into();
        self
    }

    /// Whether waiters hear of releases from a change stream on the
    /// collection (default true). The stream opens at the first wait, once
    /// a probe shows that the server supports change streams (a replica
    /// set); until then, and on a server without them, waiters poll with
    /// jittered backoff.
    pub fn release_wakeups(mut self, watch: bool) -> Self {
        self.release_wakeups = watch;
        self
    }

    /// Checks the field names and makes the handle. Nothing is sent to the
    /// server: no index is created, and the collection may not exist yet.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the option whose field name is empty,
    /// is `_id`, starts with `$`, contains `.` or NUL, or is the same as
    /// another's.
    pub fn build(self) -> Result<EntityLocks<T>> {
        self.fields.check()?;
        let backend = Arc::new(EntityBackend::new(
            self.collection,
            self.fields,
            self.options.operation_timeout(),
            self.release_wakeups,
        ));
        Ok(EntityLocks {
            client: LockClient::new(backend.clone(), self.options),
            backend,
            _value: PhantomData,
        })
    }
}

/// Forgets a `lock_or_insert` call's default value when the call ends,
/// however it ends.
impl<T> EntityLocks<T>
where
    T: Serialize + DeserializeOwned + Send + Sync,
{
    /// A handle on `collection` with `options` and the default field names.
    /// Nothing is sent to the server.
    pub fn new(collection: Collection<T>, options: LockOptions) -> Self {
        Self::builder(collection)
            .options(options)
            .build()
            .expect("the default field names are valid")
    }

    /// A builder for a handle on `collection`, to name the fields.
    pub fn builder(collection: Collection<T>) -> EntityLocksBuilder<T> {
        EntityLocksBuilder {
            collection: collection.clone_with_type(),
            options: LockOptions::default(),
            fields: Fields::default(),
            release_wakeups: true,
            _value: PhantomData,
        }
    }

    /// The options of the lock client.
    pub fn options(&self) -> &LockOptions {
        self.client.options()
    }

    /// Opens the change stream that wakes this handle's waiters when an
    /// entity is unlocked, unless it is open; returns whether waiters are
    /// woken. Without this call the stream opens at the first wait, which
    /// itself polls.
    ///
    /// Returns false when wake-ups were turned off
    /// ([`EntityLocksBuilder::release_wakeups`]) or the server has no
    /// change streams (not a replica set); waiters then poll. Also false
    /// when the stream could not be opened for another reason (a timeout,
    /// missing privileges): that may pass, so the next call tries again,
    /// and so does a wait 30 s later. Call it at
    /// startup to have even the first waiter woken, and to log which it
    /// will be.
    ///
    /// # Cancel safety
    /// Cancel safe: a cancelled call leaves the stream unopened, and the
    /// next call or wait opens it.
    pub async fn start_release_wakeups(&self) -> bool {
        self.backend.start_release_wakeups().await
    }

    /// Waits for the lock of the entity `id` for at most `timeout`, as
    /// [`LockClient::acquire`] waits, and returns a guard holding the
    /// entity's value. The id is any value that serialises to BSON: an
    /// `ObjectId`, a `Uuid`, a string, an integer, an embedded document.
    ///
    /// # Errors
    /// [`Error::NotFound`] at once when no entity has that id;
    /// [`Error::InvalidData`], naming the field, when the document cannot
    /// be read as a `T` (the entity is unlocked again);
    /// [`Error::Timeout`] after the deadline; [`Error::InvalidName`] for an
    /// id that cannot be an `_id`; a backend error.
    ///
    /// # Cancel safety
    /// Cancel safe: a lock granted after the future was dropped is released
    /// in the background.
    pub async fn lock<I>(&self, id: &I, timeout: Duration) -> Result<EntityGuard<T>>
    where
        I: Serialize + ?Sized,
    {
        let id = id::to_bson(id)?;
        let name = id::name(&id)?;
        let guard = self
            .client
            .acquire_with(&name, timeout)
            .await
            .map_err(|error| named(&self.backend, &id, error))?;
        self.open(guard, id).await
    }

    /// Tries once to lock the entity `id`; `Ok(None)` when somebody holds
    /// it, including another task of this handle.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), without the timeout.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`lock`](Self::lock).
    pub async fn try_lock<I>(&self, id: &I) -> Result<Option<EntityGuard<T>>>
    where
        I: Serialize + ?Sized,
    {
        let id = id::to_bson(id)?;
        let name = id::name(&id)?;
        let guard = self
            .client
            .try_acquire(&name)
            .await
            .map_err(|error| named(&self.backend, &id, error))?;
        match guard {
            Some(guard) => self.open(guard, id).await.map(Some),
            None => Ok(None),
        }
    }

    /// As [`lock`](Self::lock), but when no entity has the id, inserts one
    /// with the fields of `default` (its `_id`, if any, is replaced by `id`),
    /// already locked by us, in the same atomic step: nobody can lock or
    /// change it between its insertion and our lock.
    /// [`EntityGuard::inserted`] tells whether this call inserted it.
    ///
    /// When several processes race to insert the same id, one inserts it
    /// and the others wait for its lock, as for an existing entity.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), without [`Error::NotFound`];
    /// [`Error::InvalidData`] when `default` cannot be written as a
    /// document.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`lock`](Self::lock); an entity inserted by an
    /// attempt whose caller went away stays, unlocked.
    pub async fn lock_or_insert<I>(
        &self,
        id: &I,
        default: &T,
        timeout: Duration,
    ) -> Result<EntityGuard<T>>
    where
        I: Serialize + ?Sized,
    {
        let id = id::to_bson(id)?;
        let insert = self.insert_payload(&id, default)?;
        let name = id::name(&id)?;
        let guard = self
            .client
            .acquire_with(
                &name,
                AcquireOptions::new().timeout(timeout).payload(insert),
            )
            .await
            .map_err(|error| named(&self.backend, &id, error))?;
        self.open(guard, id).await
    }

    /// As [`lock_or_insert`](Self::lock_or_insert), trying once:
    /// `Ok(None)` when somebody holds the entity, or inserted it first.
    ///
    /// # Errors
    /// As [`lock_or_insert`](Self::lock_or_insert), without the timeout.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`lock`](Self::lock).
    pub async fn try_lock_or_insert<I>(&self, id: &I, default: &T) -> Result<Option<EntityGuard<T>>>
    where
        I: Serialize + ?Sized,
    {
        let id = id::to_bson(id)?;
        let insert = self.insert_payload(&id, default)?;
        let name = id::name(&id)?;
        let guard = self
            .client
            .try_acquire_with(&name, TryOptions::new().payload(insert))
            .await
            .map_err(|error| named(&self.backend, &id, error))?;
        match guard {
            Some(guard) => self.open(guard, id).await.map(Some),
            None => Ok(None),
        }
    }

    /// Reads the entity `id` with its version, for
    /// [`update_if_unchanged`](Self::update_if_unchanged). It does not
    /// lock, and does not wait for a lock.
    ///
    /// # Errors
    /// [`Error::NotFound`]; [`Error::InvalidData`], naming the field, when
    /// the document cannot be read as a `T` or its version is not a whole
    /// number from 0 to 2^63 - 1 (an int32, an int64 or a whole double); a
    /// backend error.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn read<I>(&self, id: &I) -> Result<Versioned<T>>
    where
        I: Serialize + ?Sized,
    {
        let id = id::to_bson(id)?;
        let what = self.backend.describe(&id);
        let found = self
            .backend
            .collection()
            .find_one(update::by_id(&id))
            .max_time(self.client.options().operation_timeout())
            .await
            .map_err(|error| driver(&format!("reading {what}"), error))?
            .ok_or_else(|| Error::NotFound { what: what.clone() })?;
        let fields = self.backend.fields();
        let version = counter::read(&found, &fields.version)
            .map_err(|bad| bad.into_error(what.clone()))?
            .unwrap_or(0);
        let value = value::decode(found, fields, &what)?;
        Ok(Versioned { value, version })
    }

    /// Writes `new_value` to the entity `id` only if its version is still
    /// `expected_version` and nobody holds its lock, and increments the
    /// version; returns whether it applied. Fields are written as
    /// [`EntityGuard::release`] writes them. One atomic update: of several
    /// concurrent updates from the same version, exactly one applies.
    ///
    /// # Errors
    /// [`Error::NotFound`] when no entity has the id; [`Error::InvalidData`]
    /// when `new_value` cannot be written as a document; a backend error.
    ///
    /// # Cancel safety
    /// If the future is dropped after the update was sent, the update may
    /// or may not have applied; [`read`](Self::read) tells.
    pub async fn update_if_unchanged<I>(
        &self,
        id: &I,
        expected_version: u64,
        new_value: &T,
    ) -> Result<bool>
    where
        I: Serialize + ?Sized,
    {
        let id = id::to_bson(id)?;
        let what = self.backend.describe(&id);
        let fields = self.backend.fields();
        let set = value::modelled_fields(value::encode(new_value, &what)?, fields, &what)?;
        let collection = self.backend.collection();
        let updated = collection
            .update_one(
                update::at_version(fields, &id, expected_version),
                update::write_version(fields, set, expected_version),
            )
            .await
            .map_err(|error| driver(&format!("updating {what}"), error))?;
        if updated.matched_count == 1 {
            return Ok(true);
        }
        let exists = collection
            .find_one(update::by_id(&id))
            .projection(mongodb::bson::doc! { "_id": 1 })
            .max_time(self.client.options().operation_timeout())
            .await
            .map_err(|error| driver(&format!("updating {what}"), error))?
            .is_some();
        if exists {
            Ok(false)
        } else {
            Err(Error::NotFound { what })
        }
    }

    /// Unlocks the entity `id` whoever holds it: an administrator's tool.
    /// The holder's next extension is refused and its guard reports the
    /// loss; its [`EntityGuard::release`] writes nothing. Returns whether
    /// the entity was locked.
    ///
    /// # Errors
    /// A backend error.
    ///
    /// # Cancel safety
    /// One update: if the future is dropped after it was sent, the entity
    /// may or may not have been unlocked.
    pub async fn force_unlock<I>(&self, id: &I) -> Result<bool>
    where
        I: Serialize + ?Sized,
    {
        let id = id::to_bson(id)?;
        self.client.force_release(&id::name(&id)?).await
    }

    /// The fields of `default` to insert as the entity `id` when it is
    /// missing, as the payload of a lock's attempts.
    fn insert_payload(&self, id: &Bson, default: &T) -> Result<Payload> {
        let what = self.backend.describe(id);
        let lock_fields = self.backend.fields();
        let fields: Document = value::encode(default, &what)?
            .into_iter()
            .filter(|(name, _)| name != "_id" && !lock_fields.is_lock_field(name))
            .collect();
        let fields = check_insertable(fields, &what)?;
        Ok(Payload::new(InsertValue(fields)))
    }

    /// Turns a lock client guard into an entity guard with the value the
    /// lock read; unlocks again if the value cannot be read.
    async fn open(&self, guard: LockGuard, id: Bson) -> Result<EntityGuard<T>> {
        let grant = guard
            .grant_state()
            .get::<LockedDocument>()
            .and_then(LockedDocument::take);
        let Some(grant) = grant else {
            let _ = guard.release().await;
            return Err(Error::Backend {
                backend: crate::error::BACKEND,
                message: format!(
                    "locking {}: the locked document was not kept for the caller",
                    self.backend.describe(&id)
                ),
                source: None,
            });
        };
        let what = self.backend.describe(&id);
        match value::decode(grant.document, self.backend.fields(), &what) {
            Ok(value) => Ok(EntityGuard::new(
                guard,
                id,
                value,
                grant.inserted,
                self.backend.clone(),
            )),
            Err(error) => {
                let _ = guard.release().await;
                Err(error)
            }
        }
    }
}

/// Checks that every top-level field of an inserted value can be set by
/// name in a pipeline.
fn check_insertable(fields: Document, what: &str) -> Result<Document> {
    for name in fields.keys() {
        if let Err(reason) = fields::check_name(name) {
            return Err(Error::InvalidData {
                what: what.to_owned(),
                field: name.clone(),
                reason: format!("cannot be written: a top-level field name {reason}"),
            });
        }
    }
    Ok(fields)
}

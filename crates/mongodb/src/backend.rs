//! The backend: each operation is one command on one lock document.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use distlock_core::{
    AcquireRequest, Attempt, Backend, Capabilities, Claim, Error, GrantState, HandOver, Lease,
    LockInfo, LockKind, LockName, ReleaseHub, ReleaseWatch, Result, WaitState,
};
use futures::{StreamExt, TryStreamExt};
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::ReturnDocument;
use mongodb::{Client, Collection, Database};

use crate::builder::{Connection, MongoBackendBuilder};
use crate::clock::ServerClock;
use crate::document::{self, ACQUIRED_AT, EXPIRES_AT, ID, LOCK_ID, lock_id};
use crate::error::{BACKEND, driver, is_duplicate_key};
use crate::watch::Watcher;

/// At most this many leases go into one bulk extension command.
const MAX_BATCH_LEASES: usize = 10_000;
/// At most this many bytes of names go into one bulk extension command,
/// well below MongoDB's 16 MiB command limit.
const MAX_BATCH_BYTES: usize = 4 << 20;
/// How many bulk extension commands run at once.
const BATCH_CONCURRENCY: usize = 4;

/// Locks kept as documents in one MongoDB collection, judged by the
/// server's clock.
///
/// Build one with [`MongoBackend::builder`]; see the [crate
/// documentation](crate) for the document shape and the guarantees.
///
/// Dropping the backend stops its release watcher.
pub struct MongoBackend {
    collection: Collection<Document>,
    hub: ReleaseHub,
    watcher: Option<Watcher>,
    clock: ServerClock,
    operation_timeout: Duration,
}

impl fmt::Debug for MongoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoBackend")
            .field("database", &self.collection.namespace().db)
            .field("collection", &self.collection.name())
            .field("write_concern", &self.collection.write_concern())
            .field("release_wakeups", &self.watcher.is_some())
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl MongoBackend {
    /// A builder for a backend reached through `connection`: a
    /// `mongodb://` or `mongodb+srv://` URL, a [`Client`] or a
    /// [`Database`].
    ///
    /// ```no_run
    /// # async fn run() -> distlock_core::Result<()> {
    /// use distlock_mongodb::MongoBackend;
    ///
    /// let backend = MongoBackend::builder("mongodb://db1,db2,db3/?replicaSet=rs0")
    ///     .database("app")
    ///     .collection("locks")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(connection: impl Into<Connection>) -> MongoBackendBuilder {
        MongoBackendBuilder::new(connection.into())
    }

    /// A builder for a backend in `database`, using its client as it is.
    pub fn from_database(database: Database) -> MongoBackendBuilder {
        Self::builder(database)
    }

    /// A builder for a backend in `client`'s database `database`.
    pub fn from_client(client: Client, database: impl Into<String>) -> MongoBackendBuilder {
        Self::builder(client).database(database)
    }

    /// A builder from a distlock URL: a MongoDB connection string whose path
    /// names the database (default `distlock`) and whose distlock-only
    /// `collection` option names the collection (default
    /// `distributed_locks`); every other option goes to the driver.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the `collection` option is malformed.
    pub fn from_url(url: &str) -> Result<MongoBackendBuilder> {
        let (driver_url, collection) = crate::builder::split_collection_option(url)?;
        let builder = Self::builder(driver_url);
        Ok(match collection {
            Some(collection) => builder.collection(collection),
            None => builder,
        })
    }

    pub(crate) fn new(
        collection: Collection<Document>,
        hub: ReleaseHub,
        watcher: Option<Watcher>,
        clock: ServerClock,
        operation_timeout: Duration,
    ) -> Self {
        Self {
            collection,
            hub,
            watcher,
            clock,
            operation_timeout,
        }
    }

    /// The lock collection, for inspection and administration.
    pub fn collection(&self) -> &Collection<Document> {
        &self.collection
    }

    /// Finds out whether an acquisition whose reply carried no document
    /// granted the lock: the grant is ours exactly when the stored identity
    /// is ours, since nobody else can replace a grant before it expires.
    async fn read_back(&self, request: &AcquireRequest) -> Result<Attempt> {
        tracing::debug!(name = %request.name, "the acquire reply had no document; reading it back");
        let found = self
            .collection
            .find_one(document::by_name(&request.name))
            .max_time(self.operation_timeout)
            .await
            .map_err(|error| driver(&format!("acquiring {}", request.name), error))?;
        match found {
            Some(found)
                if found.get_str(LOCK_ID).ok() == Some(lock_id(request.lease_id).as_str()) =>
            {
                let fencing_token =
                    document::read_token(&found).ok_or_else(|| no_token(request))?;
                Ok(Attempt::Acquired {
                    fencing_token,
                    state: GrantState::none(),
                })
            }
            _ => Ok(Attempt::Held {
                retry_after: Some(Duration::ZERO),
            }),
        }
    }

    /// Extends the leases of one chunk, all with the same lease period.
    /// Returns, per lease, whether it is still ours.
    async fn extend_chunk(&self, lease: Duration, chunk: &[&Lease]) -> Result<Vec<bool>> {
        let filter = || document::live_grants(chunk.iter().map(|lease| (&lease.name, lease.id)));
        let updated = self
            .collection
            .update_many(filter(), document::extend(lease))
            .await
            .map_err(|error| driver("extending leases", error))?;
        if usize::try_from(updated.matched_count).unwrap_or(usize::MAX) >= chunk.len() {
            return Ok(vec![true; chunk.len()]);
        }
        // Some were not ours any more. A lease that is ours and unexpired now
        // was so when the update ran (nobody else extends it), so it was
        // extended; the others are lost.
        let live: HashSet<String> = self
            .collection
            .find(filter())
            .projection(doc! { ID: 0, LOCK_ID: 1 })
            .max_time(self.operation_timeout)
            .await
            .map_err(|error| driver("checking extended leases", error))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(|error| driver("checking extended leases", error))?
            .into_iter()
            .filter_map(|found| found.get_str(LOCK_ID).ok().map(str::to_owned))
            .collect();
        Ok(chunk
            .iter()
            .map(|lease| live.contains(&lock_id(lease.id)))
            .collect())
    }
}

/// Splits leases into bulk commands: by lease period, then by size.
fn chunks(leases: &[Lease]) -> Vec<(Duration, Vec<usize>)> {
    let mut by_period: BTreeMap<Duration, Vec<usize>> = BTreeMap::new();
    for (index, lease) in leases.iter().enumerate() {
        by_period.entry(lease.lease).or_default().push(index);
    }
    let mut chunks = Vec::new();
    for (period, indices) in by_period {
        let mut chunk = Vec::new();
        let mut bytes = 0;
        for index in indices {
            let size = leases[index].name.as_str().len() + 64;
            if !chunk.is_empty()
                && (chunk.len() >= MAX_BATCH_LEASES || bytes + size > MAX_BATCH_BYTES)
            {
                chunks.push((period, std::mem::take(&mut chunk)));
                bytes = 0;
            }
            chunk.push(index);
            bytes += size;
        }
        if !chunk.is_empty() {
            chunks.push((period, chunk));
        }
    }
    chunks
}

fn no_token(request: &AcquireRequest) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: format!(
            "acquiring {}: the granted document has no fencing token",
            request.name
        ),
        source: None,
    }
}

/// `error` again, for each lease of a bulk command that failed as a whole
/// (errors cannot be cloned, and the driver's source stays with the first).
pub(crate) fn copy_error(error: &Error) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: error.to_string(),
        source: None,
    }
}

/// The per-lease outcomes of a bulk extension, in order; a lease that no
/// command covered is an error, never silently "extended".
pub(crate) fn settle(outcomes: Vec<Option<Result<bool>>>) -> Vec<Result<bool>> {
    outcomes
        .into_iter()
        .map(|outcome| {
            outcome.unwrap_or_else(|| {
                Err(Error::Backend {
                    backend: BACKEND,
                    message: "a lease was left out of the bulk extension".into(),
                    source: None,
                })
            })
        })
        .collect()
}

#[async_trait]
impl Backend for MongoBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
            .with_release_wakeups(self.watcher.is_some())
            .with_hand_over(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest, _: &mut WaitState) -> Result<Attempt> {
        if request.claim != Claim::Exclusive {
            return Err(Error::Unsupported(format!(
                "the MongoDB backend does not grant {} yet; the memory backend does",
                request.claim
            )));
        }
        let sent = Instant::now();
        let outcome = self
            .collection
            .find_one_and_update(document::by_name(&request.name), document::acquire(request))
            .upsert(true)
            .return_document(ReturnDocument::After)
            .max_time(self.operation_timeout)
            .await;
        let received = Instant::now();
        let found = match outcome {
            Ok(Some(found)) => found,
            // MongoDB always returns the document of an upsert asked for the
            // new document; a server that does not (see docs/mongodb.md)
            // leaves the outcome to be read back.
            Ok(None) => return self.read_back(request).await,
            // Two first upserts of this name raced and the other inserted
            // the document: not ours this time, but worth trying again now.
            Err(error) if is_duplicate_key(&error) => {
                tracing::debug!(name = %request.name, "lost a race to create the lock document");
                return Ok(Attempt::Held {
                    retry_after: Some(Duration::ZERO),
                });
            }
            Err(error) => return Err(driver(&format!("acquiring {}", request.name), error)),
        };
        if found.get_str(LOCK_ID).ok() == Some(lock_id(request.lease_id).as_str()) {
            let fencing_token = document::read_token(&found).ok_or_else(|| no_token(request))?;
            if let Ok(acquired_at) = found.get_datetime(ACQUIRED_AT) {
                self.clock
                    .observe(acquired_at.timestamp_millis(), sent, received);
            }
            return Ok(Attempt::Acquired {
                fencing_token,
                state: GrantState::none(),
            });
        }
        let retry_after = found
            .get_datetime(EXPIRES_AT)
            .ok()
            .and_then(|expires_at| self.clock.until(expires_at.timestamp_millis()));
        Ok(Attempt::Held { retry_after })
    }

    async fn extend(&self, lease: &Lease) -> Result<bool> {
        let updated = self
            .collection
            .update_one(
                document::live_grant(&lease.name, lease.id),
                document::extend(lease.lease),
            )
            .await
            .map_err(|error| driver(&format!("extending {}", lease.name), error))?;
        Ok(updated.matched_count == 1)
    }

    fn extend_many_limit(&self) -> usize {
        // A few commands extend any number of leases.
        usize::MAX
    }

    async fn extend_many(&self, leases: &[Lease]) -> Vec<Result<bool>> {
        if leases.len() == 1 {
            return vec![self.extend(&leases[0]).await];
        }
        let mut outcomes: Vec<Option<Result<bool>>> = leases.iter().map(|_| None).collect();
        let results: Vec<(Vec<usize>, Result<Vec<bool>>)> = futures::stream::iter(chunks(leases))
            .map(|(period, indices)| async move {
                let chunk: Vec<&Lease> = indices.iter().map(|&i| &leases[i]).collect();
                let outcome = self.extend_chunk(period, &chunk).await;
                (indices, outcome)
            })
            .buffer_unordered(BATCH_CONCURRENCY)
            .collect()
            .await;
        for (indices, outcome) in results {
            match outcome {
                Ok(still_ours) => {
                    for (index, ours) in indices.into_iter().zip(still_ours) {
                        outcomes[index] = Some(Ok(ours));
                    }
                }
                Err(error) => {
                    for index in indices {
                        outcomes[index] = Some(Err(copy_error(&error)));
                    }
                }
            }
        }
        settle(outcomes)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let updated = self
            .collection
            .update_one(
                document::live_grant(&lease.name, lease.id),
                document::release(),
            )
            .await
            .map_err(|error| driver(&format!("releasing {}", lease.name), error))?;
        let released = updated.matched_count == 1;
        if released {
            // Waiters of this process need not wait for the change stream.
            self.hub.notify(&lease.name);
        }
        Ok(released)
    }

    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        let found = self
            .collection
            .find_one_and_update(
                document::live_grant(&lease.name, lease.id),
                document::hand_over(next),
            )
            .return_document(ReturnDocument::After)
            .max_time(self.operation_timeout)
            .await
            .map_err(|error| driver(&format!("handing over {}", lease.name), error))?;
        match found {
            Some(found) if found.get_str(LOCK_ID).ok() == Some(lock_id(next.lease_id).as_str()) => {
                let fencing_token = document::read_token(&found).ok_or_else(|| no_token(next))?;
                Ok(HandOver::Granted {
                    fencing_token,
                    confirmed_at: None,
                    state: GrantState::none(),
                })
            }
            // Nothing matched: the old grant had expired or was taken away.
            _ => Ok(HandOver::NotOurs),
        }
    }

    async fn list(&self) -> Result<Vec<LockInfo>> {
        let found: Vec<Document> = self
            .collection
            .aggregate(document::list())
            .max_time(self.operation_timeout)
            .await
            .map_err(|error| driver("listing locks", error))?
            .try_collect()
            .await
            .map_err(|error| driver("listing locks", error))?;
        let mut locks: Vec<LockInfo> = found
            .iter()
            .filter_map(|found| {
                let name = LockName::new(found.get_str(ID).ok()?).ok()?;
                let remaining = match found.get("remainingMs") {
                    Some(Bson::Int64(ms)) => u64::try_from(*ms).unwrap_or(0),
                    Some(Bson::Int32(ms)) => u64::try_from(*ms).unwrap_or(0),
                    _ => 0,
                };
                Some(LockInfo {
                    name,
                    kind: LockKind::Exclusive,
                    permits: None,
                    holder: document::read_holder(found),
                    fencing_token: document::read_token(found),
                    expires_in: Some(Duration::from_millis(remaining)),
                })
            })
            .collect();
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(locks)
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        let updated = self
            .collection
            .update_one(document::any_live_grant(name), document::release())
            .await
            .map_err(|error| driver(&format!("force-releasing {name}"), error))?;
        let released = updated.matched_count == 1;
        if released {
            self.hub.notify(name);
        }
        Ok(released)
    }

    fn watch_releases(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.watcher.as_ref().map(|_| self.hub.watch(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::LeaseId;

    fn lease(name: &str, secs: u64) -> Lease {
        Lease {
            name: LockName::new(name).unwrap(),
            claim: Claim::Exclusive,
            id: LeaseId::random(),
            fencing_token: 1,
            lease: Duration::from_secs(secs),
            state: GrantState::none(),
        }
    }

    #[test]
    fn chunks_group_by_lease_period_and_keep_every_lease() {
        let leases = vec![lease("a", 30), lease("b", 10), lease("c", 30)];
        let chunks = chunks(&leases);
        assert_eq!(chunks.len(), 2);
        let mut all: Vec<usize> = chunks.iter().flat_map(|(_, i)| i.clone()).collect();
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2]);
        for (period, indices) in &chunks {
            assert!(indices.iter().all(|&i| leases[i].lease == *period));
        }
    }

    #[test]
    fn chunks_respect_the_size_bound() {
        let name = "x".repeat(1000);
        let leases: Vec<Lease> = (0..5000)
            .map(|i| lease(&format!("{name}{i}"), 30))
            .collect();
        let chunks = chunks(&leases);
        assert!(chunks.len() >= 2);
        for (_, indices) in &chunks {
            let bytes: usize = indices
                .iter()
                .map(|&i| leases[i].name.as_str().len() + 64)
                .sum();
            assert!(bytes <= MAX_BATCH_BYTES);
        }
    }
}

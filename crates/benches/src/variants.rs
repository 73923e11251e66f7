//! Where a MongoDB cycle's time goes, beside distributed-lock-mongo's:
//! the same acquire and release with write concern `w: 1` instead of
//! `majority`; with a release that deletes the document (as the peer's
//! does) instead of keeping it with its fencing token; on a collection
//! without the TTL index on `expiresAt` (the peer's collection has none);
//! and the peer's own two commands, sent without its client. Measured
//! only: none of them is what the backend does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::backend::{Backend, LeaseId};
use distlock::mongodb::mongodb::Collection;
use distlock::mongodb::mongodb::bson::{Bson, DateTime, Document, doc};
use distlock::mongodb::mongodb::options::{Acknowledgment, ReturnDocument, WriteConcern};
use distlock::mongodb::{MongoBackend, MongoConfig};
use distlock::{LockName, LockOptions};

use crate::cycles::{backend_cycles, cycles_with};
use crate::outcome::Outcome;
use crate::target::{Server, Target};

/// The MongoDB backends and collections the variants use.
pub(crate) struct MongoVariants {
    write_one: Arc<MongoBackend>,
    collection: Collection<Document>,
    /// The backend on a collection of its own with no TTL index.
    unindexed: Arc<MongoBackend>,
    unindexed_collection: Collection<Document>,
    /// A collection of its own, with no index, for the peer's commands.
    peer_shaped: Collection<Document>,
}

impl MongoVariants {
    /// Opens the variants on `target`'s database and lock collection;
    /// `None` for other backends.
    pub(crate) async fn open(target: &Target) -> Outcome<Option<Self>> {
        let Server::Mongo {
            database,
            collection,
            ..
        } = &target.server
        else {
            return Ok(None);
        };
        let write_one = MongoConfig::new(database.clone())
            .collection(collection.clone())
            .write_concern(WriteConcern::builder().w(Acknowledgment::Nodes(1)).build());
        let write_one = MongoBackend::connect(write_one)
            .await
            .map_err(|e| format!("the w: 1 variant: {e}"))?;
        let unindexed_name = format!("{collection}_without_ttl_index");
        let unindexed = MongoConfig::new(database.clone())
            .collection(unindexed_name.clone())
            .ttl_index(false);
        let unindexed = MongoBackend::connect(unindexed)
            .await
            .map_err(|e| format!("the variant without a TTL index: {e}"))?;
        Ok(Some(Self {
            write_one: Arc::new(write_one),
            collection: database.collection(collection),
            unindexed: Arc::new(unindexed),
            unindexed_collection: database.collection(&unindexed_name),
            peer_shaped: database.collection(&format!("{collection}_peer_commands")),
        }))
    }

    /// Cycles of the backend's own calls on a collection without the TTL
    /// index; with `deleting`, each released by deleting the document.
    pub(crate) async fn unindexed_cycles(
        &self,
        name: &LockName,
        seconds: Duration,
        deleting: bool,
    ) -> Outcome<u64> {
        if deleting {
            deleting_cycles(&*self.unindexed, &self.unindexed_collection, name, seconds).await
        } else {
            backend_cycles(&*self.unindexed, name, seconds).await
        }
    }

    /// Cycles of distributed-lock-mongo 0.2.0's two commands, sent directly
    /// on a collection without indexes: a `findAndModify` upsert whose
    /// one-stage pipeline takes the lock when its expiry has passed by
    /// `$$NOW`, and a `deleteOne` by name and lock id. It keeps no fencing
    /// token and no holder record; `with_token` adds a fencing token to the
    /// grant, built and checked by the server as the backend's is.
    pub(crate) async fn peer_command_cycles(
        &self,
        name: &LockName,
        seconds: Duration,
        with_token: bool,
    ) -> Outcome<u64> {
        let lease_ms = LockOptions::DEFAULT_LEASE.as_millis() as i64;
        let started = Instant::now();
        let mut cycles = 0u64;
        while started.elapsed() < seconds {
            let lock_id = format!("{:032x}", LeaseId::random().as_u128());
            let free = doc! {
                "$lte": [{ "$ifNull": ["$expiresAt", DateTime::from_millis(0)] }, "$$NOW"]
            };
            let take = |value: Bson, kept: &str| doc! { "$cond": [free.clone(), value, kept] };
            let expires = doc! {
                "$dateAdd": { "startDate": "$$NOW", "unit": "millisecond", "amount": lease_ms }
            };
            let mut grant = doc! {
                "lockId": take(Bson::String(lock_id.clone()), "$lockId"),
                "expiresAt": take(Bson::Document(expires), "$expiresAt"),
                "acquiredAt": take(Bson::String("$$NOW".into()), "$acquiredAt"),
            };
            if with_token {
                grant.insert("fencingToken", take(server_token().into(), "$fencingToken"));
            }
            let pipeline = vec![doc! { "$set": grant }];
            let after = self
                .peer_shaped
                .find_one_and_update(doc! { "_id": name.as_str() }, pipeline)
                .upsert(true)
                .return_document(ReturnDocument::After)
                .await
                .map_err(|e| e.to_string())?;
            if after.as_ref().and_then(|d| d.get_str("lockId").ok()) != Some(lock_id.as_str()) {
                return Err("the peer's acquire found an uncontended lock held".into());
            }
            let deleted = self
                .peer_shaped
                .delete_one(doc! { "_id": name.as_str(), "lockId": &lock_id })
                .await
                .map_err(|e| e.to_string())?;
            if deleted.deleted_count != 1 {
                return Err("the peer's release found nothing of its own".into());
            }
            cycles += 1;
        }
        Ok(cycles)
    }

    /// Cycles of the backend's own calls with write concern `w: 1`.
    pub(crate) async fn write_one_cycles(
        &self,
        name: &LockName,
        seconds: Duration,
    ) -> Outcome<u64> {
        backend_cycles(&*self.write_one, name, seconds).await
    }

    /// Cycles of the backend's acquire, each released by deleting the
    /// document (ours, by its lock id) instead of updating it.
    pub(crate) async fn deleting_cycles(
        &self,
        backend: &dyn Backend,
        name: &LockName,
        seconds: Duration,
    ) -> Outcome<u64> {
        deleting_cycles(backend, &self.collection, name, seconds).await
    }
}

/// The next fencing token as the backend builds it, `max(previous + 1,
/// now in ms)`, or the previous value when that is not a whole number an
/// int64 holds (the backend then refuses to grant).
fn server_token() -> Document {
    let previous = doc! { "$ifNull": ["$fencingToken", 0_i64] };
    let valid = doc! { "$and": [
        { "$in": [{ "$type": previous.clone() }, ["int", "long", "double"]] },
        { "$gte": [previous.clone(), 0_i64] },
        { "$lt": [previous.clone(), 9_223_372_036_854_775_808.0_f64] },
        { "$eq": [{ "$trunc": previous.clone() }, previous.clone()] },
    ] };
    let next = doc! { "$max": [
        { "$add": [{ "$convert": { "input": previous, "to": "long", "onError": Bson::Null } }, 1_i64] },
        { "$toLong": "$$NOW" },
    ] };
    doc! { "$cond": [valid, next, "$fencingToken"] }
}

/// Cycles of `backend`'s acquire, each released by deleting the document
/// in `collection` (ours, by its lock id) instead of updating it.
async fn deleting_cycles(
    backend: &dyn Backend,
    collection: &Collection<Document>,
    name: &LockName,
    seconds: Duration,
) -> Outcome<u64> {
    cycles_with(backend, name, seconds, |lease| async move {
        let ours = doc! {
            "_id": lease.name.as_str(),
            "lockId": format!("{:032x}", lease.id.as_u128()),
        };
        let deleted = collection
            .delete_one(ours)
            .await
            .map_err(|e| e.to_string())?;
        match deleted.deleted_count {
            1 => Ok(()),
            _ => Err("the deleting release found nothing of ours".to_owned()),
        }
    })
    .await
}

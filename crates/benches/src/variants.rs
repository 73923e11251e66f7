//! What two of a MongoDB cycle's guarantees cost: the same acquire and
//! release with write concern `w: 1` instead of `majority`, and with a
//! release that deletes the document (as distributed-lock-mongo's does)
//! instead of keeping it with its fencing token. Measured only: neither is
//! what the backend does.

use std::sync::Arc;
use std::time::Duration;

use distlock::mongodb::MongoBackend;
use distlock::mongodb::mongodb::Collection;
use distlock::mongodb::mongodb::bson::{Document, doc};
use distlock::mongodb::mongodb::options::{Acknowledgment, WriteConcern};
use distlock::{Backend, LockName};

use crate::scenarios::{Outcome, backend_cycles, cycles_with};
use crate::target::{Server, Target};

/// The MongoDB backends and collection the variants use.
pub(crate) struct MongoVariants {
    write_one: Arc<MongoBackend>,
    collection: Collection<Document>,
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
        let write_one = MongoBackend::from_database(database.clone())
            .collection(collection.clone())
            .write_concern(WriteConcern::builder().w(Acknowledgment::Nodes(1)).build())
            .build()
            .await
            .map_err(|e| format!("the w: 1 variant: {e}"))?;
        Ok(Some(Self {
            write_one: Arc::new(write_one),
            collection: database.collection(collection),
        }))
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
        let collection = &self.collection;
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
}

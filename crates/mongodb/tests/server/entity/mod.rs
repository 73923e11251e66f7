//! Entity locks against a real server: locks kept on the entity's own
//! document, and optimistic updates.

mod counters;
mod insert;
mod locking;
mod optimistic;
mod preferences;
mod process;
mod values;
mod wakeups;

use std::time::Duration;

use distlock_core::LockOptions;
use distlock_mongodb::EntityLocks;
use distlock_mongodb::mongodb::Collection;
use distlock_mongodb::mongodb::bson::{Bson, Document, doc};
use serde::{Deserialize, Serialize};

use crate::common::*;

/// The entity of most tests. It models only some of the stored fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Report {
    pub(crate) title: String,
    pub(crate) count: i64,
}

impl Report {
    pub(crate) fn new(title: &str, count: i64) -> Self {
        Self {
            title: title.to_owned(),
            count,
        }
    }
}

/// A fresh collection of the test database, typed and raw.
pub(crate) async fn collections<T: Send + Sync>(
    prefix: &str,
) -> (Collection<T>, Collection<Document>) {
    let url = shared_url();
    let client = inspector(&url).await;
    let name = unique(prefix);
    let database = client.database("distlock_test");
    (database.collection(&name), database.collection(&name))
}

/// Lock options with a generous lease and quick retries.
pub(crate) fn options() -> LockOptions {
    short_lease(Duration::from_secs(30))
}

/// A handle of its own (its own lock client, as another instance would
/// have) on `collection`.
pub(crate) fn handle<T>(collection: &Collection<T>, options: LockOptions) -> EntityLocks<T>
where
    T: Serialize + serde::de::DeserializeOwned + Send + Sync,
{
    EntityLocks::new(collection.clone(), options)
}

/// The stored document of `id`.
pub(crate) async fn stored(raw: &Collection<Document>, id: impl Into<Bson>) -> Document {
    let id = id.into();
    raw.find_one(doc! { "_id": id.clone() })
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no document with _id {id}"))
}

/// Inserts `document` as it is.
pub(crate) async fn insert_raw(raw: &Collection<Document>, document: Document) {
    raw.insert_one(document).await.unwrap();
}

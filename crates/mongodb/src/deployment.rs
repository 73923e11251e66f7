//! What `distlock check` says of a MongoDB deployment: whether writes wait
//! for a majority, and whether the TTL index is in place. (Change streams
//! are the watcher's to probe: see `watch`.)

use std::time::Duration;

use distlock_core::Feature;
use futures::TryStreamExt;
use mongodb::Collection;
use mongodb::bson::{Bson, Document};
use mongodb::options::{Acknowledgment, WriteConcern};

use crate::document::EXPIRES_AT;
use crate::error::{code, driver};

/// The server's code for a collection that does not exist.
const NAMESPACE_NOT_FOUND: i32 = 26;

/// Whether an acknowledged write survives a failover: the topology from
/// the server's `hello`, and the write concern the backend writes with.
pub(crate) fn majority(hello: &Document, write_concern: Option<&WriteConcern>) -> Feature {
    const NAME: &str = "majority";
    let waits_for_majority = matches!(
        write_concern.and_then(|concern| concern.w.as_ref()),
        Some(Acknowledgment::Majority)
    );
    let topology = if let Ok(set) = hello.get_str("setName") {
        let members = hello.get_array("hosts").map_or(0, Vec::len);
        format!(
            "replica set {set} of {members} member{}",
            if members == 1 { "" } else { "s" }
        )
    } else if hello.get_str("msg") == Ok("isdbgrid") {
        "a sharded cluster (mongos)".to_owned()
    } else {
        "a standalone server, with no failover".to_owned()
    };
    if waits_for_majority {
        Feature::present(
            NAME,
            format!("{topology}: every write waits for a majority (w: majority)"),
        )
    } else {
        Feature::degraded(
            NAME,
            format!(
                "{topology}: writes do not wait for a majority ({}), so a failover can undo \
                 a grant and give the lock to a second holder; leave the backend's write \
                 concern at its default, majority",
                write_concern.map_or_else(
                    || "the server's default".to_owned(),
                    |concern| format!("{:?}", concern.w)
                )
            ),
        )
    }
}

/// Whether the collection has the TTL index on `expiresAt`, which lets
/// the server remove idle lock documents.
pub(crate) async fn ttl_index(collection: &Collection<Document>, timeout: Duration) -> Feature {
    const NAME: &str = "TTL index";
    let look = async {
        let indexes: Vec<_> = collection.list_indexes().await?.try_collect().await?;
        Ok::<_, mongodb::error::Error>(indexes.into_iter().any(|index| {
            let on_expiry = index.keys.len() == 1
                && matches!(
                    index.keys.get(EXPIRES_AT),
                    Some(Bson::Int32(1) | Bson::Int64(1))
                );
            on_expiry
                && index
                    .options
                    .as_ref()
                    .is_some_and(|options| options.expire_after.is_some())
        }))
    };
    match tokio::time::timeout(timeout, look).await {
        Ok(Ok(true)) => Feature::present(NAME, "the server removes idle lock documents"),
        Ok(Ok(false)) => Feature::degraded(
            NAME,
            format!(
                "no TTL index on {EXPIRES_AT}: idle lock documents stay (locks work, the \
                 collection grows); the backend creates it when it opens, unless built with \
                 ttl_index(false), given the createIndex action on the collection"
            ),
        ),
        Ok(Err(error)) if code(&error) == Some(NAMESPACE_NOT_FOUND) => Feature::degraded(
            NAME,
            "the collection does not exist yet, so neither does its TTL index: the backend \
             creates both when it opens, given the createCollection and createIndex actions",
        ),
        Ok(Err(error)) => Feature::degraded(
            NAME,
            format!(
                "{}: the user may lack the listIndexes action",
                driver("listing the collection's indexes", error)
            ),
        ),
        Err(_) => Feature::degraded(
            NAME,
            format!("listing the collection's indexes took over {timeout:?}"),
        ),
    }
}

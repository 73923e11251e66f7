//! What `distlock check` says of a MongoDB deployment: whether writes wait
//! for a majority, and whether the TTL index is in place. (Change streams
//! are the watcher's to probe: see `watch`.)

use std::time::Duration;

use distlock_core::backend::Feature;
use futures::TryStreamExt;
use mongodb::Collection;
use mongodb::bson::{Bson, Document};
use mongodb::options::{Acknowledgment, WriteConcern};

use crate::document::EXPIRES_AT;
use crate::error::{NAMESPACE_NOT_FOUND, code, driver};
use crate::ttl::is_earlier_index;

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
/// the server remove idle lock documents; in fair mode, also whether it
/// leaves documents with a line alone (see [`index_model`]).
///
/// [`index_model`]: crate::ttl::index_model
pub(crate) async fn ttl_index(
    collection: &Collection<Document>,
    timeout: Duration,
    fair: bool,
) -> Feature {
    const NAME: &str = "TTL index";
    let look = async {
        let indexes: Vec<_> = collection.list_indexes().await?.try_collect().await?;
        let ttl: Vec<_> = indexes
            .into_iter()
            .filter(|index| {
                index.keys.len() == 1
                    && matches!(
                        index.keys.get(EXPIRES_AT),
                        Some(Bson::Int32(1) | Bson::Int64(1))
                    )
                    && index
                        .options
                        .as_ref()
                        .is_some_and(|options| options.expire_after.is_some())
            })
            .collect();
        Ok::<_, mongodb::error::Error>((!ttl.is_empty(), ttl.iter().any(is_earlier_index)))
    };
    match tokio::time::timeout(timeout, look).await {
        Ok(Ok((true, true))) if fair => Feature::degraded(
            NAME,
            format!(
                "the TTL index on {EXPIRES_AT} is the one earlier versions created, over every \
                 document: it can delete a fair lock's line, with its fencing token, once the \
                 grant in front of the line expires; a fair backend replaces it when it opens, \
                 given the dropIndex action on the collection, or drop it by hand"
            ),
        ),
        Ok(Ok((true, _))) => Feature::present(NAME, "the server removes idle lock documents"),
        Ok(Ok((false, _))) => Feature::degraded(
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

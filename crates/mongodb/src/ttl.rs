//! The TTL index on `expiresAt`, which lets the server delete idle lock
//! documents, and the replacement of the one that earlier versions made.

use std::time::Duration;

use futures::TryStreamExt;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::IndexOptions;
use mongodb::{Collection, IndexModel};

use crate::document::{EXPIRES_AT, QUEUE};
use crate::error::{
    INDEX_KEY_SPECS_CONFLICT, INDEX_OPTIONS_CONFLICT, NAMESPACE_NOT_FOUND, code, driver,
};

/// The TTL index: `{expiresAt: 1}` with `expireAfterSeconds: 0`, over the
/// documents with no fair line (`queue: null` matches a missing field, and
/// never an array of places). A document with a line is outside the index,
/// so the TTL monitor never deletes it, even once the grant in it has
/// expired: the line, the fencing token and the record of terms stay until
/// a fair write serves the line or drops its dead places (the last write
/// that empties the line removes `queue`, and the document is back in the
/// index). TTL deletion needs a date in the indexed field of a document the
/// index covers; a partial filter of equality with null is within what
/// MongoDB documents for partial indexes (`field: value`), and TTL indexes
/// may be partial.
pub(crate) fn index_model() -> IndexModel {
    IndexModel::builder()
        .keys(doc! { EXPIRES_AT: 1 })
        .options(
            IndexOptions::builder()
                .expire_after(Duration::ZERO)
                .partial_filter_expression(index_filter())
                .build(),
        )
        .build()
}

/// The TTL index's partial filter: documents without a fair line.
pub(crate) fn index_filter() -> Document {
    doc! { QUEUE: null }
}

/// Whether `index` is the TTL index that versions before fair mode kept
/// safe created: `{expiresAt: 1}`, `expireAfterSeconds: 0`, over every
/// document, a fair one whose grant expired with its line alive included.
pub(crate) fn is_earlier_index(index: &IndexModel) -> bool {
    let on_expiry = index.keys.len() == 1
        && matches!(
            index.keys.get(EXPIRES_AT),
            Some(Bson::Int32(1) | Bson::Int64(1) | Bson::Double(1.0))
        );
    on_expiry
        && index.options.as_ref().is_some_and(|options| {
            options.expire_after == Some(Duration::ZERO)
                && options.partial_filter_expression.is_none()
        })
}

/// Creates the TTL index on `expiresAt`, once per backend; logs a failure.
/// A fair backend first drops the earlier TTL index (see
/// [`is_earlier_index`]), which could delete a live line; a backend
/// not in fair mode leaves it, since it deletes what the new one would
/// among documents without a line, and those are all such a backend
/// writes.
pub(crate) async fn create(collection: &Collection<Document>, timeout: Duration, fair: bool) {
    let work = async {
        if fair {
            replace_earlier_ttl_index(collection).await;
        }
        collection.create_index(index_model()).await
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(_)) => tracing::debug!(collection = collection.name(), "TTL index in place"),
        Ok(Err(error))
            if !fair
                && matches!(
                    code(&error),
                    Some(INDEX_OPTIONS_CONFLICT | INDEX_KEY_SPECS_CONFLICT)
                ) =>
        {
            tracing::debug!(
                collection = collection.name(),
                error = %driver("creating the TTL index", error),
                "an earlier TTL index on expiresAt is in place, and serves a backend not in fair mode"
            );
        }
        Ok(Err(error)) => tracing::warn!(
            collection = collection.name(),
            error = %driver("creating the TTL index", error),
            "cannot create the TTL index on expiresAt; idle lock documents will stay until removed by hand"
        ),
        Err(_) => tracing::warn!(
            collection = collection.name(),
            "creating the TTL index on expiresAt timed out; idle lock documents may stay"
        ),
    }
}

/// Drops the earlier TTL index, if the collection has it; logs a failure
/// (the backend works on: fair lines are then at the TTL monitor's mercy
/// while a grant in front of them has expired, until someone drops it).
async fn replace_earlier_ttl_index(collection: &Collection<Document>) {
    let earlier = async {
        let indexes: Vec<IndexModel> = collection.list_indexes().await?.try_collect().await?;
        Ok::<_, mongodb::error::Error>(
            indexes
                .into_iter()
                .filter(is_earlier_index)
                .filter_map(|index| index.options.and_then(|options| options.name))
                .collect::<Vec<_>>(),
        )
    };
    let names = match earlier.await {
        Ok(names) => names,
        // No collection yet: no index either.
        Err(error) if code(&error) == Some(NAMESPACE_NOT_FOUND) => return,
        Err(error) => {
            tracing::warn!(
                collection = collection.name(),
                error = %driver("listing the collection's indexes", error),
                "cannot check for the earlier TTL index on expiresAt, which can delete a fair lock's line"
            );
            return;
        }
    };
    for name in names {
        match collection.drop_index(&name).await {
            Ok(()) => tracing::info!(
                collection = collection.name(),
                index = name,
                "dropped the earlier TTL index on expiresAt, which could delete a fair lock's line; \
                 its replacement leaves documents with a line alone"
            ),
            Err(error) => tracing::warn!(
                collection = collection.name(),
                index = name,
                error = %driver("dropping the earlier TTL index", error),
                "the earlier TTL index on expiresAt stays, and can delete a fair lock's line once \
                 the grant in front of it expires: drop it by hand (dropIndex) so the backend can \
                 replace it"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_earlier_ttl_index_is_replaced() {
        let earlier = IndexModel::builder()
            .keys(doc! { EXPIRES_AT: 1 })
            .options(IndexOptions::builder().expire_after(Duration::ZERO).build())
            .build();
        assert!(is_earlier_index(&earlier));
        assert!(!is_earlier_index(&index_model()));
        let own = IndexModel::builder()
            .keys(doc! { EXPIRES_AT: 1 })
            .options(
                IndexOptions::builder()
                    .expire_after(Duration::from_secs(60))
                    .build(),
            )
            .build();
        assert!(!is_earlier_index(&own), "an index of the user's own");
        let plain = IndexModel::builder().keys(doc! { EXPIRES_AT: 1 }).build();
        assert!(!is_earlier_index(&plain));
    }
}

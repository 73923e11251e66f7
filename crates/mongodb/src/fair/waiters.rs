//! Who waits in fair mode: the live places of each lock document's
//! `queue`, first come first, each with the holder its waiter recorded.
//! Places record no time of their first attempt, so how long each has
//! waited is not known.

use distlock_core::{LockKind, LockName, Waiter};
use mongodb::bson::{Bson, Document, doc};

use super::live_places;
use crate::document::{ID, QUEUE, read_holder};

/// The aggregation: every document with a place in line, with its live
/// places in order.
pub(crate) fn pipeline() -> Vec<Document> {
    vec![
        doc! { "$match": { QUEUE: { "$type": "array", "$ne": [] } } },
        doc! { "$project": { ID: 1, QUEUE: live_places() } },
        doc! { "$match": { QUEUE: { "$ne": [] } } },
    ]
}

/// The waiters of one row of [`pipeline`]'s result, in line order; none
/// for a row that names no valid lock.
pub(crate) fn read(row: &Document) -> Vec<(LockName, Waiter)> {
    let Some(name) = row
        .get_str(ID)
        .ok()
        .and_then(|name| LockName::new(name).ok())
    else {
        return Vec::new();
    };
    let Ok(places) = row.get_array(QUEUE) else {
        return Vec::new();
    };
    places
        .iter()
        .filter_map(|place| match place {
            Bson::Document(place) => Some(place),
            _ => None,
        })
        .map(|place| {
            let waiter = Waiter {
                // Only a whole lock is waited for in line.
                kind: LockKind::Exclusive,
                holder: read_holder(place),
                waiting_for: None,
            };
            (name.clone(), waiter)
        })
        .collect()
}

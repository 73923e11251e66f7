//! The filters and updates of entity locks.
//!
//! Every time is the server's `$$NOW`. Locking and extending are update
//! pipelines that set only the lock fields; caller-supplied values inside
//! a pipeline (the lock identity, a default value to insert) are wrapped in
//! `$literal`, so no value is ever read as an expression or a field path.
//! Writing a value back uses the plain `$set` operator, which never reads
//! values as expressions.

use std::time::Duration;

use distlock_core::backend::LeaseId;
use mongodb::bson::{Bson, Document, doc};

use super::fields::Fields;
use crate::counter;
use crate::document::lock_id;

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis())
        .unwrap_or(i64::MAX)
        .max(1)
}

fn path(field: &str) -> String {
    format!("${field}")
}

/// `$$NOW + lease` as an expression.
fn now_plus(lease: Duration) -> Document {
    doc! {
        "$dateAdd": { "startDate": "$$NOW", "unit": "millisecond", "amount": millis(lease) }
    }
}

/// True while the lock has not expired by the server's clock; false when
/// the expiry is missing.
fn unexpired(fields: &Fields) -> Document {
    doc! { "$gt": [path(&fields.expires_at), "$$NOW"] }
}

/// True while somebody holds the entity: a lock identity is present and
/// the lock has not expired.
fn held(fields: &Fields) -> Document {
    doc! {
        "$and": [
            { "$ne": [{ "$type": path(&fields.lock_id) }, "missing"] },
            unexpired(fields),
        ]
    }
}

/// The next fencing token, an int64: `max(previous + 1, server time in
/// ms)`, for an entity whose token may be built on (see
/// [`counter::is_valid`]). A whole double stored by hand counts as the
/// integer it holds.
fn next_token(fields: &Fields) -> Document {
    doc! {
        "$max": [
            { "$add": [counter::as_long(&path(&fields.token)), 1_i64] },
            { "$toLong": "$$NOW" },
        ]
    }
}

/// The filter for one entity.
pub(crate) fn by_id(id: &Bson) -> Document {
    doc! { "_id": id.clone() }
}

/// The filter for one entity while we hold it: our identity, unexpired.
pub(crate) fn ours(fields: &Fields, id: &Bson, lease: LeaseId) -> Document {
    doc! {
        "_id": id.clone(),
        fields.lock_id.as_str(): lock_id(lease),
        "$expr": unexpired(fields),
    }
}

/// The filter for several entities while we hold them.
pub(crate) fn all_ours(fields: &Fields, leases: &[(Bson, LeaseId)]) -> Document {
    let (ids, lock_ids): (Vec<Bson>, Vec<Bson>) = leases
        .iter()
        .map(|(id, lease)| (id.clone(), Bson::String(lock_id(*lease))))
        .unzip();
    doc! {
        "_id": { "$in": ids },
        fields.lock_id.as_str(): { "$in": lock_ids },
        "$expr": unexpired(fields),
    }
}

/// The filter for one entity while anybody holds it.
pub(crate) fn anybodys(fields: &Fields, id: &Bson) -> Document {
    doc! {
        "_id": id.clone(),
        fields.lock_id.as_str(): { "$exists": true },
        "$expr": unexpired(fields),
    }
}

/// The lock pipeline: when nobody holds the entity by the server's clock,
/// set our identity, the expiry and the next token; otherwise, or when the
/// stored token cannot be built on (the reply shows it, and it is reported),
/// set each lock field to what it was. No other field is touched.
pub(crate) fn lock(fields: &Fields, lease_id: LeaseId, lease: Duration) -> Vec<Document> {
    let keep = doc! {
        "$or": [held(fields), { "$not": [counter::is_valid(&path(&fields.token))] }]
    };
    let keep_or = |field: &str, value: Bson| -> Bson {
        Bson::Document(doc! { "$cond": [keep.clone(), path(field), value] })
    };
    vec![doc! {
        "$set": {
            fields.lock_id.as_str(): keep_or(
                &fields.lock_id,
                Bson::Document(doc! { "$literal": lock_id(lease_id) }),
            ),
            fields.expires_at.as_str(): keep_or(&fields.expires_at, Bson::Document(now_plus(lease))),
            fields.token.as_str(): keep_or(&fields.token, Bson::Document(next_token(fields))),
        }
    }]
}

/// The filter of an insert that must never match an existing entity: no
/// stored lock identity can be the one just drawn at random for this
/// attempt, so the upsert inserts `{_id, lockId}` or fails on the id.
pub(crate) fn insert_filter(fields: &Fields, id: &Bson, lease_id: LeaseId) -> Document {
    doc! { "_id": id.clone(), fields.lock_id.as_str(): lock_id(lease_id) }
}

/// The insert pipeline, applied to the new `{_id, lockId}`: the default
/// value's fields (`value` holds no `_id` and no lock field), each as a
/// literal, then the expiry and the first token.
pub(crate) fn insert(fields: &Fields, value: &Document, lease: Duration) -> Vec<Document> {
    let mut stages = Vec::with_capacity(2);
    if !value.is_empty() {
        let literals: Document = value
            .iter()
            .map(|(name, value)| {
                (
                    name.clone(),
                    Bson::Document(doc! { "$literal": value.clone() }),
                )
            })
            .collect();
        stages.push(doc! { "$set": literals });
    }
    stages.push(doc! {
        "$set": {
            fields.expires_at.as_str(): now_plus(lease),
            fields.token.as_str(): next_token(fields),
        }
    });
    stages
}

/// The extension pipeline: the lock now runs `lease` from the server's now.
pub(crate) fn extend(fields: &Fields, lease: Duration) -> Vec<Document> {
    vec![doc! { "$set": { fields.expires_at.as_str(): now_plus(lease) } }]
}

/// The update that clears the lock, keeping the token.
pub(crate) fn unlock(fields: &Fields) -> Document {
    doc! { "$unset": { fields.lock_id.as_str(): "", fields.expires_at.as_str(): "" } }
}

/// The update that writes the modelled fields `set`, clears the lock and
/// increments the version.
pub(crate) fn write_and_unlock(fields: &Fields, set: Document) -> Document {
    let mut update = unlock(fields);
    if !set.is_empty() {
        update.insert("$set", set);
    }
    update.insert("$inc", doc! { fields.version.as_str(): 1_i64 });
    update
}

/// The filter of an optimistic update: the entity at `expected` (a missing
/// version counts as 0), and nobody holding its lock.
pub(crate) fn at_version(fields: &Fields, id: &Bson, expected: u64) -> Document {
    let expected = i64::try_from(expected).unwrap_or(i64::MAX);
    doc! {
        "_id": id.clone(),
        "$expr": {
            "$and": [
                { "$eq": [{ "$ifNull": [path(&fields.version), 0_i64] }, expected] },
                { "$not": [held(fields)] },
            ]
        },
    }
}

/// The optimistic update: the modelled fields `set` and the next version.
pub(crate) fn write_version(fields: &Fields, mut set: Document, expected: u64) -> Document {
    let next = i64::try_from(expected.saturating_add(1)).unwrap_or(i64::MAX);
    set.insert(fields.version.as_str(), next);
    doc! { "$set": set }
}

/// The pipeline that lists held entities with the milliseconds left.
pub(crate) fn list(fields: &Fields) -> Vec<Document> {
    vec![
        doc! {
            "$match": {
                fields.lock_id.as_str(): { "$exists": true },
                "$expr": unexpired(fields),
            }
        },
        doc! {
            "$project": {
                "_id": 1,
                fields.token.as_str(): 1,
                "remainingMs": {
                    "$subtract": [{ "$toLong": path(&fields.expires_at) }, { "$toLong": "$$NOW" }]
                },
            }
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_pipeline_sets_only_the_lock_fields_with_a_literal_identity() {
        let fields = Fields::default();
        let pipeline = lock(&fields, LeaseId::from_u128(0xabc), Duration::from_secs(1));
        assert_eq!(pipeline.len(), 1);
        let set = pipeline[0].get_document("$set").unwrap();
        let names: Vec<&str> = set.keys().map(String::as_str).collect();
        assert_eq!(names, ["lockId", "lockExpiresAt", "lockToken"]);
        let otherwise = &set
            .get_document("lockId")
            .unwrap()
            .get_array("$cond")
            .unwrap()[2];
        assert_eq!(
            otherwise,
            &Bson::Document(doc! { "$literal": "00000000000000000000000000000abc" })
        );
    }

    #[test]
    fn inserted_values_are_literals() {
        let fields = Fields::default();
        let value = doc! { "title": "$$NOW", "nested": { "a": "$x" } };
        let pipeline = insert(&fields, &value, Duration::from_secs(1));
        assert_eq!(
            pipeline[0],
            doc! { "$set": {
                "title": { "$literal": "$$NOW" },
                "nested": { "$literal": { "a": "$x" } },
            } }
        );
    }

    #[test]
    fn a_write_clears_the_lock_and_bumps_the_version() {
        let fields = Fields::default();
        let update = write_and_unlock(&fields, doc! { "count": 2 });
        assert_eq!(
            update,
            doc! {
                "$unset": { "lockId": "", "lockExpiresAt": "" },
                "$set": { "count": 2 },
                "$inc": { "version": 1_i64 },
            }
        );
    }
}

//! Entity ids as lock names, for the lock client.
//!
//! The lock client keys everything (local queues, leases, errors) by
//! [`LockName`]. An entity's id, any BSON value, becomes a name as its
//! canonical extended JSON, which keeps the BSON type (`{"$numberInt":"7"}`
//! and `{"$numberLong":"7"}` differ), the order of an embedded document's
//! fields (the `bson` crate builds `serde_json` with `preserve_order`), and
//! every byte of a string. A lock taken with the right to insert the entity
//! (`lock_or_insert`) has the same name: the value to insert travels with
//! its attempts as their payload, so both kinds of call queue together.

use distlock_core::{Error, LockName, Result};
use mongodb::bson::Bson;
use serde::Serialize;

/// The `_id` of the entity that `name` (a lock name of entity locks)
/// locks; `None` for any other name.
pub(crate) fn entity_id(name: &LockName) -> Option<Bson> {
    parse(name).ok()
}

/// Turns a caller's id into the BSON value of `_id`.
pub(crate) fn to_bson<I: Serialize + ?Sized>(id: &I) -> Result<Bson> {
    let bson = mongodb::bson::to_bson(id).map_err(|error| Error::InvalidName {
        reason: format!("the entity id cannot be written as BSON: {error}"),
    })?;
    let refused = match &bson {
        Bson::Array(_) => Some("an array"),
        Bson::RegularExpression(_) => Some("a regular expression"),
        Bson::Undefined => Some("undefined"),
        // In a filter, `{_id: {$gt: ""}}` is a query, not an id: it would
        // lock whichever entity matched. MongoDB stores no such `_id`.
        _ if has_operator_key(&bson) => Some("a document with a field name starting with `$`"),
        _ => None,
    };
    match refused {
        Some(kind) => Err(Error::InvalidName {
            reason: format!("an entity id cannot be {kind}: MongoDB refuses it as `_id`"),
        }),
        None => Ok(bson),
    }
}

/// Whether `value` holds, at any depth, a document with a field name that
/// starts with `$`.
fn has_operator_key(value: &Bson) -> bool {
    match value {
        Bson::Document(document) => document
            .iter()
            .any(|(key, value)| key.starts_with('$') || has_operator_key(value)),
        Bson::Array(items) => items.iter().any(has_operator_key),
        _ => false,
    }
}

/// The longest extended JSON form of an id: a lock name's.
const MAX_ID_JSON: usize = distlock_core::MAX_NAME_LEN;

/// The lock name of `id`.
pub(crate) fn name(id: &Bson) -> Result<LockName> {
    let text = id.clone().into_canonical_extjson().to_string();
    if text.len() > MAX_ID_JSON {
        return Err(Error::InvalidName {
            reason: format!(
                "an entity id must be at most {MAX_ID_JSON} bytes as canonical extended JSON; \
                 this one has {}",
                text.len()
            ),
        });
    }
    LockName::new(text)
}

/// The id that `name` was made from.
pub(crate) fn parse(name: &LockName) -> Result<Bson> {
    let invalid = || Error::InvalidName {
        reason: format!("{name} is not an entity lock name"),
    };
    let value: serde_json::Value = serde_json::from_str(name.as_str()).map_err(|_| invalid())?;
    Bson::try_from(value).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::oid::ObjectId;
    use mongodb::bson::{Uuid, doc};

    #[test]
    fn ids_of_every_kind_round_trip_with_their_type() {
        let ids = [
            Bson::ObjectId(ObjectId::new()),
            Bson::Binary(mongodb::bson::Binary::from_uuid(Uuid::new())),
            Bson::String("$$NOW".into()),
            Bson::String("nul\0 and \r\n and 🦀".into()),
            Bson::Int32(7),
            Bson::Int64(7),
            Bson::Double(7.5),
            Bson::Document(doc! { "b": 1, "a": "x" }),
        ];
        for id in ids {
            let name = name(&id).unwrap();
            assert_eq!(parse(&name).unwrap(), id, "{name:?}");
        }
    }

    #[test]
    fn different_types_make_different_names() {
        assert_ne!(
            name(&Bson::Int32(7)).unwrap(),
            name(&Bson::Int64(7)).unwrap()
        );
        assert_ne!(
            name(&Bson::String("7".into())).unwrap(),
            name(&Bson::Int32(7)).unwrap()
        );
    }

    #[test]
    fn ids_come_from_any_serialisable_value() {
        assert_eq!(to_bson("r-1").unwrap(), Bson::String("r-1".into()));
        assert_eq!(to_bson(&7_i64).unwrap(), Bson::Int64(7));
        let uuid = Uuid::new();
        assert_eq!(
            to_bson(&uuid).unwrap(),
            Bson::Binary(mongodb::bson::Binary::from_uuid(uuid))
        );
        assert!(matches!(
            to_bson(&vec![1, 2]),
            Err(Error::InvalidName { .. })
        ));
    }

    #[test]
    fn ids_that_a_filter_would_read_as_operators_are_refused() {
        for id in [
            doc! { "$gt": "" },
            doc! { "$ne": Bson::Null },
            doc! { "$regex": ".*" },
            doc! { "a": 1, "b": { "$exists": true } },
            doc! { "a": [{ "$in": [1] }] },
        ] {
            match to_bson(&id) {
                Err(Error::InvalidName { reason }) => assert!(reason.contains('$'), "{reason}"),
                other => panic!("{id}: expected InvalidName, got {other:?}"),
            }
        }
        // Plain documents and strings that merely hold a `$` are ids.
        assert!(to_bson(&doc! { "tenant": "a", "n": 1 }).is_ok());
        assert!(to_bson(&doc! { "price": "$5" }).is_ok());
        assert!(to_bson("$gt").is_ok());
    }

    #[test]
    fn overlong_ids_are_refused() {
        let long = Bson::String("x".repeat(2000));
        assert!(matches!(name(&long), Err(Error::InvalidName { .. })));
    }
}

//! The caller's type and the entity's document, each way.

use distlock_core::{Error, Result};
use mongodb::bson::{Bson, Document};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::fields::{Fields, check_name};

/// Reads `document` as a `T`, leaving out the lock fields. A failure names
/// the path of the field at fault.
pub(crate) fn decode<T: DeserializeOwned>(
    mut document: Document,
    fields: &Fields,
    what: &str,
) -> Result<T> {
    for field in [&fields.lock_id, &fields.expires_at, &fields.token] {
        document.remove(field);
    }
    let deserializer = mongodb::bson::Deserializer::new(Bson::Document(document));
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let path = error.path().to_string();
        let reason = error.inner().to_string();
        Error::InvalidData {
            what: what.to_owned(),
            field: field_of(&path, &reason),
            reason,
        }
    })
}

/// The field an error is about: its path, or for a missing field, the path
/// of the missing field itself rather than of the value that lacks it.
fn field_of(path: &str, reason: &str) -> String {
    let missing = reason
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    match missing {
        Some(name) if path == "." => name.to_owned(),
        Some(name) => format!("{path}.{name}"),
        None => path.to_owned(),
    }
}

/// Writes `value` as a document. A failure names the field at fault.
pub(crate) fn encode<T: Serialize + ?Sized>(value: &T, what: &str) -> Result<Document> {
    let serializer = mongodb::bson::Serializer::new();
    let bson =
        serde_path_to_error::serialize(value, serializer).map_err(|error| Error::InvalidData {
            what: what.to_owned(),
            field: error.path().to_string(),
            reason: error.inner().to_string(),
        })?;
    match bson {
        Bson::Document(document) => Ok(document),
        other => Err(Error::InvalidData {
            what: what.to_owned(),
            field: ".".to_owned(),
            reason: format!(
                "the value must be written as a document (a struct or a map), not as {:?}",
                other.element_type()
            ),
        }),
    }
}

/// The fields of `document` that a write of the value sets: every
/// top-level field but `_id`, the lock fields and the version, which are
/// the lock's and the version's to manage.
pub(crate) fn modelled_fields(document: Document, fields: &Fields, what: &str) -> Result<Document> {
    let mut set = Document::new();
    for (name, value) in document {
        if name == "_id" || fields.managed().contains(&name.as_str()) {
            continue;
        }
        if let Err(reason) = check_name(&name) {
            return Err(Error::InvalidData {
                what: what.to_owned(),
                field: name.clone(),
                reason: format!("cannot be written: a top-level field name {reason}"),
            });
        }
        set.insert(name, value);
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Report {
        title: String,
        count: i64,
        author: Author,
    }

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Author {
        name: String,
    }

    #[test]
    fn lock_fields_are_left_out_and_unknown_fields_ignored() {
        let document = doc! {
            "_id": 1, "title": "t", "count": 2_i64, "author": { "name": "n" },
            "lockId": "x", "lockExpiresAt": 3, "lockToken": 4_i64, "extra": true,
        };
        let report: Report = decode(document, &Fields::default(), "r").unwrap();
        assert_eq!(report.count, 2);
    }

    #[test]
    fn decoding_errors_name_the_field() {
        let wrong_type = doc! { "title": "t", "count": "many", "author": { "name": "n" } };
        match decode::<Report>(wrong_type, &Fields::default(), "r") {
            Err(Error::InvalidData { field, .. }) => assert_eq!(field, "count"),
            other => panic!("{other:?}"),
        }
        let missing = doc! { "count": 1_i64, "author": { "name": "n" } };
        match decode::<Report>(missing, &Fields::default(), "r") {
            Err(Error::InvalidData { field, .. }) => assert_eq!(field, "title"),
            other => panic!("{other:?}"),
        }
        let nested = doc! { "title": "t", "count": 1_i64, "author": {} };
        match decode::<Report>(nested, &Fields::default(), "r") {
            Err(Error::InvalidData { field, .. }) => assert_eq!(field, "author.name"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn writes_set_modelled_fields_only() {
        let document = doc! { "_id": 1, "title": "t", "lockId": "x", "version": 3, "count": 2 };
        let set = modelled_fields(document, &Fields::default(), "r").unwrap();
        assert_eq!(set, doc! { "title": "t", "count": 2 });
        let dotted = doc! { "a.b": 1 };
        match modelled_fields(dotted, &Fields::default(), "r") {
            Err(Error::InvalidData { field, .. }) => assert_eq!(field, "a.b"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_documents_can_be_written() {
        assert!(matches!(
            encode(&7, "r"),
            Err(Error::InvalidData { field, .. }) if field == "."
        ));
        assert_eq!(
            encode(&Author { name: "n".into() }, "r").unwrap(),
            doc! { "name": "n" }
        );
    }
}

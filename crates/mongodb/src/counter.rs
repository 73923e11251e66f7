//! Counters kept in documents (fencing tokens, a semaphore's limit, an
//! entity's version): reading them back, and the pipeline expressions that
//! build on a stored one.
//!
//! We write counters as int64, but a document edited by hand may hold a
//! double: mongosh's default number type (`{$set: {fencingToken: 5}}`
//! stores 5.0), and what JavaScript drivers write. A whole double is as
//! good as an integer: it is read back as one, and the pipelines convert it
//! with `$toLong`, so what they write is an int64 again (`$add` on a double
//! would keep a double, and past 2^53 a double cannot even tell `n` from
//! `n + 1`). Any other value (a fraction, a negative number, a value beyond
//! int64, a string) is refused with an error that names the field, rather
//! than guessed at: no grant is built on it.

use distlock_core::Error;
use mongodb::bson::{Bson, Document, doc};

/// 2^63: the first whole number an int64 cannot hold, exactly a double.
const BEYOND_INT64: f64 = 9_223_372_036_854_775_808.0;

/// A stored counter that is not a whole number from 0 to 2^63 - 1.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BadCounter {
    field: String,
    /// Boxed: errors stay small on the paths that never fail.
    value: Box<Bson>,
}

impl BadCounter {
    /// The error for this counter of `what` (the document, as shown to
    /// people), with how to fix it.
    pub(crate) fn into_error(self, what: impl Into<String>) -> Error {
        let example = match *self.value {
            // The whole number just above keeps a counter from going back.
            Bson::Double(value) if value.is_finite() && value > 0.0 && value < BEYOND_INT64 => {
                format!("{}", value.ceil())
            }
            _ => "0".to_owned(),
        };
        Error::InvalidData {
            what: what.into(),
            reason: format!(
                "holds {value} ({kind:?}), but a counter must be a whole number from 0 to \
                 2^63 - 1 (an int32, an int64 or a whole double); store one, for example in \
                 mongosh {{$set: {{{field}: NumberLong(\"{example}\")}}}}, no lower than any \
                 value the field held before",
                value = self.value,
                kind = self.value.element_type(),
                field = self.field,
            ),
            field: self.field,
        }
    }
}

/// The counter `field` of `document`: `None` when it is missing or null.
///
/// # Errors
/// [`BadCounter`] for any value but a whole number from 0 to 2^63 - 1
/// stored as an int32, an int64 or a double.
pub(crate) fn read(document: &Document, field: &str) -> Result<Option<u64>, BadCounter> {
    match document.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(value) => whole(value).map(Some).ok_or_else(|| BadCounter {
            field: field.to_owned(),
            value: Box::new(value.clone()),
        }),
    }
}

/// `value` as a whole number from 0 to 2^63 - 1, if it is one.
fn whole(value: &Bson) -> Option<u64> {
    match *value {
        Bson::Int32(value) => u64::try_from(value).ok(),
        Bson::Int64(value) => u64::try_from(value).ok(),
        // Exact: a whole double below 2^63 converts without loss.
        Bson::Double(value) if value.fract() == 0.0 && (0.0..BEYOND_INT64).contains(&value) => {
            Some(value as u64)
        }
        _ => None,
    }
}

/// True when the stored counter at `path` (a `$field` path) may be built
/// on: missing, null, or a whole number from 0 to 2^63 - 1 of any numeric
/// type, as [`read`] accepts.
pub(crate) fn is_valid(path: &str) -> Document {
    doc! {
        "$let": {
            "vars": { "value": { "$ifNull": [path, 0_i64] } },
            // `$and` stops at the first false, so `$trunc` only sees numbers.
            "in": { "$and": [
                { "$in": [{ "$type": "$$value" }, ["int", "long", "double"]] },
                { "$gte": ["$$value", 0_i64] },
                { "$lt": ["$$value", BEYOND_INT64] },
                { "$eq": [{ "$trunc": "$$value" }, "$$value"] },
            ] },
        }
    }
}

/// The stored counter at `path` as an int64, 0 when missing or null. Never
/// an error: a value [`is_valid`] refuses gives null, which `$add` passes
/// on and `$max` ignores, so a pipeline must test [`is_valid`] before it
/// writes what it builds from this.
pub(crate) fn as_long(path: &str) -> Document {
    doc! {
        "$convert": { "input": { "$ifNull": [path, 0_i64] }, "to": "long", "onError": Bson::Null }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(value: impl Into<Bson>) -> Document {
        doc! { "n": value.into() }
    }

    #[test]
    fn whole_numbers_of_every_numeric_type_are_read() {
        assert_eq!(read(&stored(5_i32), "n"), Ok(Some(5)));
        assert_eq!(read(&stored(5_i64), "n"), Ok(Some(5)));
        assert_eq!(read(&stored(5.0), "n"), Ok(Some(5)));
        assert_eq!(read(&stored(-0.0), "n"), Ok(Some(0)));
        let large = 9_007_199_254_740_993_f64; // 2^53 + 2, as a double holds it
        assert_eq!(read(&stored(large), "n"), Ok(Some(large as u64)));
        assert_eq!(read(&stored(Bson::Null), "n"), Ok(None));
        assert_eq!(read(&doc! {}, "n"), Ok(None));
    }

    #[test]
    fn anything_else_is_refused_naming_the_field() {
        for value in [
            Bson::Double(5.5),
            Bson::Double(-1.0),
            Bson::Int64(-1),
            Bson::Int32(-1),
            Bson::Double(BEYOND_INT64),
            Bson::Double(f64::NAN),
            Bson::Double(f64::INFINITY),
            Bson::String("5".into()),
        ] {
            let bad = read(&stored(value.clone()), "n").expect_err("refused");
            match bad.into_error("lock x in db.locks") {
                Error::InvalidData {
                    what,
                    field,
                    reason,
                } => {
                    assert_eq!((what.as_str(), field.as_str()), ("lock x in db.locks", "n"));
                    assert!(reason.contains("NumberLong"), "{reason}");
                }
                other => panic!("{value}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_example_fix_never_goes_below_the_stored_value() {
        let bad = read(&doc! { "fencingToken": 5.5 }, "fencingToken").unwrap_err();
        let error = bad.into_error("lock x").to_string();
        assert!(error.contains("NumberLong(\"6\")"), "{error}");
    }
}

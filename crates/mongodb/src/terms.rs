//! The record of an election's terms, kept in the lock's own document as
//! the array `terms`: `{term, previous, holder}` per term, oldest first,
//! the last [`TERMS_KEPT`] of them.
//!
//! A campaign's grant appends its term in the same pipeline that grants
//! it, so the term is in the record exactly when the grant is stored. The
//! new entry's `previous` is read on the server from the entry before it,
//! and every entry keeps its own `previous` when older ones are dropped,
//! so an observer can still tell that it missed some. Other grants carry
//! the record over unchanged, at no cost but a field reference.

use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Lease, TERMS_KEPT, Term};
use distlock_core::{Error, Holder, LockName, Result};
use mongodb::Collection;
use mongodb::bson::{Bson, Document, doc};

use crate::counter;
use crate::document::{
    HOLDER, LOCK_ID, by_name, describe, field, holder, next_token, read_holder, read_token,
};
use crate::error::driver;
use crate::grant::stored_id;

/// The record of terms, in the lock document.
pub(crate) const TERMS: &str = "terms";
/// An entry's term: the grant's fencing token.
const TERM: &str = "term";
/// An entry's previous term; null for the first the record kept.
const PREVIOUS: &str = "previous";

/// The value of `terms` in the document a grant to `request` writes: the
/// record with the grant's term appended, when the request records one;
/// otherwise the record as it is (missing stays missing).
pub(crate) fn after_grant(request: &AcquireRequest) -> Bson {
    if !request.records_term {
        return field(TERMS).into();
    }
    appended(doc! { "$literal": holder(&request.holder) }.into())
}

/// The record with the term of the grant being written appended, held by
/// `holder` (an expression): the pass-on of a fair queue names the place's
/// stored holder here.
pub(crate) fn appended(holder: Bson) -> Bson {
    // A hand-edited `terms` that is not an array counts as no record, so
    // that it cannot make every campaign on the name fail.
    let record = doc! { "$cond": [{ "$isArray": field(TERMS) }, field(TERMS), []] };
    let entry = doc! {
        TERM: next_token(),
        PREVIOUS: { "$ifNull": ["$$last.term", Bson::Null] },
        HOLDER: holder,
    };
    let kept = i64::try_from(TERMS_KEPT).unwrap_or(i64::MAX);
    doc! {
        "$let": {
            "vars": { "record": record },
            "in": { "$let": {
                "vars": { "last": { "$arrayElemAt": ["$$record", -1] } },
                "in": { "$slice": [{ "$concatArrays": ["$$record", [entry]] }, -kept] },
            } },
        }
    }
    .into()
}

/// The filter and the update that withdraw `term`, recorded for
/// `holder`, from `name`'s record (see [`withdrawn`]).
fn withdrawal(name: &LockName, term: u64, holder: &Holder) -> (Document, Vec<Document>) {
    let term = i64::try_from(term).unwrap_or(i64::MAX);
    let filter = doc! {
        "_id": name.as_str(),
        TERMS: { "$elemMatch": { TERM: term, HOLDER: self::holder(holder) } },
    };
    (
        filter,
        vec![doc! { "$set": { TERMS: withdrawn(term.into(), holder) } }],
    )
}

/// The record without the entry of `term` (an expression) recorded for
/// `holder`, and with the entry that named it as its previous term taking
/// its previous instead; the record as it is when it keeps no such entry.
/// The holder is a literal, so that a label such as `$$NOW` stays text.
/// A fair wait's end withdraws the term of a grant passed on to it here,
/// in the write that ends the grant.
pub(crate) fn withdrawn(term: Bson, holder: &Holder) -> Document {
    let is_it = doc! { "$and": [
        { "$eq": ["$$this.term", term] },
        { "$eq": ["$$this.holder", { "$literal": self::holder(holder) }] },
    ] };
    let entries = doc! { "$filter": { "input": field(TERMS), "cond": is_it.clone() } };
    let record = doc! {
        "$let": {
            "vars": { "removed": { "$arrayElemAt": [entries.clone(), 0] } },
            "in": { "$map": {
                "input": { "$filter": { "input": field(TERMS), "cond": { "$not": [is_it] } } },
                "in": { "$cond": [
                    { "$eq": ["$$this.previous", "$$removed.term"] },
                    { "$mergeObjects": ["$$this", { PREVIOUS: "$$removed.previous" }] },
                    "$$this",
                ] },
            } },
        }
    };
    let kept = doc! { "$and": [
        { "$isArray": field(TERMS) },
        { "$gt": [{ "$size": entries }, 0] },
    ] };
    doc! { "$cond": [kept, record, field(TERMS)] }
}

/// The terms of `found`'s record greater than `after`, oldest first.
///
/// # Errors
/// [`Error::InvalidData`], naming the entry, when the record is not an
/// array of `{term, previous, holder}` entries; `what` names the document.
pub(crate) fn read(found: &Document, after: u64, what: &str) -> Result<Vec<Term>> {
    let entries = match found.get(TERMS) {
        None | Some(Bson::Null) => return Ok(Vec::new()),
        Some(Bson::Array(entries)) => entries,
        Some(other) => return Err(malformed(what, TERMS, other)),
    };
    let mut terms = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let path = format!("{TERMS}.{index}");
        let Some(entry) = entry.as_document() else {
            return Err(malformed(what, &path, entry));
        };
        let (Ok(Some(term)), Ok(previous), Some(holder)) = (
            counter::read(entry, TERM),
            counter::read(entry, PREVIOUS),
            read_holder(entry),
        ) else {
            return Err(malformed(what, &path, &Bson::Document(entry.clone())));
        };
        if term > after {
            terms.push(Term::new(term, previous, holder));
        }
    }
    terms.sort_by_key(|term| term.term);
    Ok(terms)
}

fn malformed(what: &str, path: &str, value: &Bson) -> Error {
    Error::InvalidData {
        what: what.to_owned(),
        field: path.to_owned(),
        reason: format!(
            "holds {value}, but the record of an election's terms is an array of \
             {{{TERM}: int64, {PREVIOUS}: int64 or null, {HOLDER}: {{host, pid, label}}}}; \
             remove the field ({{$unset: \"{TERMS}\"}}) to start the record afresh"
        ),
    }
}

/// The terms of `name`'s record greater than `after`, oldest first: one
/// `find` of the lock document, reading only its record.
///
/// # Errors
/// A backend error when the read fails; [`Error::InvalidData`] when the
/// record was edited into another shape.
pub(crate) async fn read_after(
    collection: &Collection<Document>,
    name: &LockName,
    after: u64,
    timeout: Duration,
) -> Result<Vec<Term>> {
    let found = collection
        .find_one(by_name(name))
        .projection(doc! { TERMS: 1 })
        .max_time(timeout)
        .await
        .map_err(|error| driver(&format!("reading the terms of {name}"), error))?;
    match found {
        Some(found) => read(&found, after, &describe(name, &collection.namespace())),
        None => Ok(Vec::new()),
    }
}

/// Withdraws the term of `lease`'s grant, recorded for `holder`: one
/// update of the lock document, after one `find` of its token when the
/// grant's answer never came.
///
/// # Errors
/// A backend error when a read or the write fails.
pub(crate) async fn withdraw(
    collection: &Collection<Document>,
    lease: &Lease,
    holder: &Holder,
) -> Result<()> {
    let name = &lease.name;
    let term = match lease.fencing_token {
        0 => {
            let found = collection
                .find_one(doc! { "_id": name.as_str(), LOCK_ID: stored_id(lease) })
                .max_time(lease.operation_timeout)
                .await
                .map_err(|error| driver(&format!("finding the grant of {name}"), error))?;
            match found.map(|found| read_token(&found)) {
                Some(Ok(Some(token))) => token,
                _ => return Ok(()),
            }
        }
        token => token,
    };
    let (filter, update) = withdrawal(name, term, holder);
    collection
        .update_one(filter, update)
        .await
        .map_err(|error| driver(&format!("withdrawing a term of {name}"), error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use distlock_core::{Claim, Holder};

    fn request(records_term: bool) -> AcquireRequest {
        AcquireRequest {
            records_term,
            ..AcquireRequest::new(
                LockName::new("$terms").unwrap(),
                Claim::Exclusive,
                Duration::from_secs(1),
                Arc::new(Holder {
                    host: "$host".into(),
                    pid: 7,
                    label: Some("$$NOW".into()),
                }),
            )
        }
    }

    #[test]
    fn a_grant_that_records_no_term_carries_the_record_over() {
        assert_eq!(after_grant(&request(false)), Bson::String("$terms".into()));
    }

    #[test]
    fn the_holder_of_a_term_is_a_literal() {
        let text = format!("{:?}", after_grant(&request(true)));
        assert!(
            text.contains(
                "\"$literal\": Document({\"host\": String(\"$host\"), \"pid\": Int64(7), \
                 \"label\": String(\"$$NOW\")})"
            ),
            "{text}"
        );
    }

    #[test]
    fn terms_read_back_after_a_term_in_order() {
        let entry = |term: i64, previous: Bson| {
            doc! { TERM: term, PREVIOUS: previous, HOLDER: { "host": "h", "pid": 1_i64, "label": "v" } }
        };
        let found = doc! { TERMS: [entry(9, Bson::Int64(5)), entry(5, Bson::Null), entry(12, Bson::Int64(9))] };
        let terms = read(&found, 5, "doc").unwrap();
        let read: Vec<_> = terms.iter().map(|t| (t.term, t.previous)).collect();
        assert_eq!(read, vec![(9, Some(5)), (12, Some(9))]);
        assert_eq!(terms[0].holder.label.as_deref(), Some("v"));
        assert!(super::read(&doc! {}, 0, "doc").unwrap().is_empty());
    }

    #[test]
    fn a_record_of_another_shape_is_invalid_data_naming_the_entry() {
        for (found, at) in [
            (doc! { TERMS: "x" }, "terms"),
            (doc! { TERMS: [1_i64] }, "terms.0"),
            (doc! { TERMS: [{ TERM: 3_i64 }] }, "terms.0"),
            (
                doc! { TERMS: [{ TERM: "3", HOLDER: { "host": "h", "pid": 1_i64 } }] },
                "terms.0",
            ),
        ] {
            match read(&found, 0, "doc") {
                Err(Error::InvalidData { field, .. }) => assert_eq!(field, at),
                other => panic!("{found}: {other:?}"),
            }
        }
    }
}

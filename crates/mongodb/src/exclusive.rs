//! The update pipelines of exclusive grants: the writer's side of a
//! reader-writer lock, and the plain lock. They keep the top-level shape
//! that every earlier version of this backend wrote and reads.

use std::time::Duration;

use distlock_core::backend::AcquireRequest;
use mongodb::bson::{Bson, Document, doc};

use crate::document::{
    ACQUIRED_AT, EXPIRES_AT, FENCING_TOKEN, FREED, HOLDER, HOLDERS, ID, LIMIT, LOCK_ID, WAITING,
    field, free_at, held, holder, lock_id, next_token, now_plus, or_remove, token_is_valid,
};
use crate::terms::{self, TERMS};
use crate::waiting::{WriterMark, may_mark, others, with_mark};

/// A grant to `request`, as an expression of the document it replaces.
/// Other writers' marks stay; `mark`, the requester's own, goes with the
/// grant. The record of terms stays, with the grant's term appended when
/// the request is a campaign's.
pub(crate) fn grant(request: &AcquireRequest, mark: Option<&WriterMark>) -> Document {
    doc! {
        ID: field(ID),
        LOCK_ID: { "$literal": lock_id(request.lease_id) },
        FENCING_TOKEN: next_token(),
        ACQUIRED_AT: "$$NOW",
        EXPIRES_AT: now_plus(request.lease),
        HOLDER: { "$literal": holder(&request.holder) },
        WAITING: waiting_after_grant(mark),
        TERMS: terms::after_grant(request),
    }
}

/// The waiting writers' marks a grant keeps: all but the granted writer's
/// own. A grant that had no mark keeps the field as it is, without
/// evaluating it: that is the uncontended path, and marks that expired meanwhile are
/// dropped by the next attempt that marks.
fn waiting_after_grant(mark: Option<&WriterMark>) -> Bson {
    match mark {
        None => field(WAITING).into(),
        Some(_) => or_remove(others(mark)).into(),
    }
}

/// A grant to `request` where the stored fencing token may be built on;
/// otherwise the document as it is, whose reply shows the token at fault.
fn grant_if_token_valid(request: &AcquireRequest, mark: Option<&WriterMark>) -> Document {
    doc! { "$cond": [token_is_valid(), grant(request, mark), "$$ROOT"] }
}

/// The acquire pipeline: when nobody holds the lock by the server's clock,
/// replace the grant with ours; otherwise leave the document as it is.
///
/// With `mark` (a wait that will try again), a writer kept out by readers
/// also records that it waits, so that new readers wait behind it; and so
/// does one kept out by a writer while other writers' marks live, so that
/// the marks stay in force. A mark is never added beside permits (that is
/// a conflict) nor where only writers were ever involved, which keeps a
/// waiting attempt on a plain lock a write-free no-op.
pub(crate) fn acquire(request: &AcquireRequest, mark: Option<&WriterMark>) -> Vec<Document> {
    let Some(mark) = mark else {
        let grant = grant_if_token_valid(request, None);
        return vec![doc! {
            "$replaceWith": { "$cond": { "if": held(), "then": "$$ROOT", "else": grant } }
        }];
    };
    let kept_out = doc! {
        "$cond": [may_mark(), with_mark(mark, request.lease), "$$ROOT"]
    };
    let grant = grant_if_token_valid(request, Some(mark));
    vec![
        doc! {
            "$replaceWith": { "$cond": { "if": held(), "then": kept_out, "else": grant } }
        },
        // A waiting attempt may be made because a change event woke it; its
        // own write must not look like a release, or it would wake itself.
        doc! { "$set": { FREED: "$$REMOVE" } },
    ]
}

/// The hand-over pipeline, for a document the filter found held by the
/// old grant: the new grant replaces it in the same write, so the lock is
/// never free in between. The grant identity is replaced, not removed, so
/// the release watchers of other processes do not see a release.
pub(crate) fn hand_over(next: &AcquireRequest) -> Vec<Document> {
    vec![doc! { "$replaceWith": grant_if_token_valid(next, None) }]
}

/// The extension pipeline: the lease now runs `lease` from the server's now.
pub(crate) fn extend(lease: Duration) -> Vec<Document> {
    vec![doc! { "$set": { EXPIRES_AT: now_plus(lease) } }]
}

/// The release pipeline: the grant's identity goes, and the document, with
/// its fencing token, stays at least until the server's clock has passed
/// that token (see [`free_at`]).
pub(crate) fn release() -> Vec<Document> {
    vec![
        doc! { "$set": { EXPIRES_AT: free_at() } },
        doc! { "$unset": [LOCK_ID] },
    ]
}

/// The forced release: every holder goes, an exclusive grant, readers or
/// permits alike. Waiting writers' marks stay.
pub(crate) fn force_release() -> Vec<Document> {
    vec![
        doc! { "$set": { EXPIRES_AT: free_at() } },
        doc! { "$unset": [LOCK_ID, HOLDERS, LIMIT] },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::backend::LeaseId;
    use distlock_core::{Claim, Holder, LockName};

    pub(crate) fn request(name: &str, label: Option<&str>) -> AcquireRequest {
        AcquireRequest {
            lease_id: LeaseId::from_u128(0xabc),
            ..AcquireRequest::new(
                LockName::new(name).unwrap(),
                Claim::Exclusive,
                Duration::from_millis(1500),
                Holder {
                    host: "$host".into(),
                    pid: 7,
                    label: label.map(str::to_owned),
                }
                .into(),
            )
        }
    }

    fn granted(pipeline: &[Document]) -> &Document {
        let if_valid = pipeline[0]
            .get_document("$replaceWith")
            .and_then(|with| with.get_document("$cond"))
            .and_then(|cond| cond.get_document("else"))
            .and_then(|grant| grant.get_array("$cond"))
            .unwrap();
        assert_eq!(if_valid[0], Bson::Document(token_is_valid()));
        assert_eq!(if_valid[2], Bson::from("$$ROOT"), "no grant on a bad token");
        if_valid[1].as_document().unwrap()
    }

    #[test]
    fn caller_values_are_literals_in_the_acquire_pipeline() {
        let mark = WriterMark::new();
        for pipeline in [
            acquire(&request("$$NOW", Some("$label")), None),
            acquire(&request("$$NOW", Some("$label")), Some(&mark)),
        ] {
            let grant = granted(&pipeline);
            assert_eq!(
                grant.get_document(LOCK_ID).unwrap(),
                &doc! { "$literal": "00000000000000000000000000000abc" }
            );
            assert_eq!(
                grant.get_document(HOLDER).unwrap(),
                &doc! { "$literal": { "host": "$host", "pid": 7_i64, "label": "$label" } }
            );
            assert_eq!(grant.get_str(ID).unwrap(), "$_id");
        }
    }

    #[test]
    fn a_single_try_keeps_the_one_stage_pipeline() {
        let pipeline = acquire(&request("n", None), None);
        assert_eq!(pipeline.len(), 1);
        let then = pipeline[0]
            .get_document("$replaceWith")
            .and_then(|with| with.get_document("$cond"))
            .and_then(|cond| cond.get_str("then"))
            .unwrap();
        assert_eq!(then, "$$ROOT", "a held lock is left exactly as it is");
    }
}

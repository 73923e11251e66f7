//! Fair mode: whole locks go to waiters in the order they asked, by the
//! server's doing.
//!
//! Waiting writers keep places in the lock document's `queue` array,
//! first come first:
//!
//! ```text
//! queue: [{ id, expiresAt, lease, holder, recordsTerm }]
//! ```
//!
//! A place lasts one lease (`lease`, in milliseconds) from its waiter's
//! latest attempt, by `$$NOW`. Every fair write first drops the places
//! that ran out; then, when nobody holds the lock, it grants it to the
//! first place in the same write ([`pass_on`]), under the place's own
//! identity, with the place's lease from the server's now, its holder,
//! and its term when it records one. That write names the place in
//! `passedTo`; a place's identity starts with the identity of its
//! waiter's backend, so that the change stream of that backend alone
//! reports the write (see `watch`). The grant lasts the place's lease and
//! a grace (`grace`) from the write, so that the waiter, once the write's change
//! event (or, in the releaser's process, its reply) has told it the grant's
//! token and end, holds the lock as it was passed, with no command of its
//! own (see `passed`), under the place's identity. A waiter that cannot
//! show it heard in time, or heard nothing (no change streams), takes the
//! grant over by command instead, under its attempt's identity, extended
//! from that command.

mod passed;
mod places;
pub(crate) mod waiters;

use std::time::Duration;

use distlock_core::LockName;
use distlock_core::backend::AcquireRequest;
use mongodb::bson::{Bson, Document, doc};

use crate::document::{
    ACQUIRED_AT, ENTRY_ID, EXPIRES_AT, FENCING_TOKEN, FREED, HOLDER, ID, LOCK_ID, PASSED_TO,
    PERMITS, QUEUE, WAITING, field, free_at, held, held_exclusively, holder, lock_id, millis,
    next_token, now_plus, or_remove, token_is_valid,
};
use crate::terms::{self, TERMS};

pub(crate) use self::passed::{PassOn, Standing};
pub(crate) use self::places::{PlaceId, Places};

/// A place's lease, in milliseconds: its grant's, and its own life.
const LEASE: &str = "lease";
/// Whether a place's grant appends its term to the record of terms.
const RECORDS_TERM: &str = "recordsTerm";

/// The live places (whose `expiresAt` is after `$$NOW`).
pub(super) fn live_places() -> Document {
    doc! {
        "$filter": {
            "input": { "$cond": [{ "$isArray": field(QUEUE) }, field(QUEUE), []] },
            "as": "place",
            "cond": { "$gt": ["$$place.expiresAt", "$$NOW"] },
        }
    }
}

/// The first stage of every fair write: places that ran out go, and so
/// does the mark of an earlier pass-on, so that only the write that
/// passes the lock on carries one.
fn prune() -> Document {
    doc! { "$set": { QUEUE: live_places(), PASSED_TO: "$$REMOVE" } }
}

/// What a pass-on grants beyond the place's lease, in milliseconds, of a
/// lease of `lease` milliseconds: a quarter of it. It is the time the
/// place's waiter has to hear of the grant and hold it as passed, counting
/// a whole lease from then (see `passed`); it is also how much longer a
/// grant passed on to a waiter that died holds the line up.
fn grace(lease: &str) -> Document {
    doc! { "$toLong": { "$divide": [lease, GRACE_PARTS] } }
}

/// The grace is the lease divided by this.
const GRACE_PARTS: i64 = 4;

/// The stage that grants a lock nobody holds to the first place in line,
/// where the stored fencing token may be built on; otherwise it leaves the
/// document as it is.
fn pass_on() -> Document {
    let first = doc! { "$arrayElemAt": [field(QUEUE), 0] };
    let grant = doc! {
        ID: field(ID),
        LOCK_ID: "$$place.id",
        FENCING_TOKEN: next_token(),
        ACQUIRED_AT: "$$NOW",
        EXPIRES_AT: {
            "$dateAdd": {
                "startDate": "$$NOW",
                "unit": "millisecond",
                "amount": { "$add": ["$$place.lease", grace("$$place.lease")] },
            }
        },
        HOLDER: "$$place.holder",
        WAITING: field(WAITING),
        TERMS: { "$cond": [
            format!("$$place.{RECORDS_TERM}"),
            terms::appended(Bson::from("$$place.holder")),
            field(TERMS),
        ] },
        QUEUE: { "$filter": {
            "input": field(QUEUE),
            "as": "other",
            "cond": { "$ne": ["$$other.id", "$$place.id"] },
        } },
        PASSED_TO: "$$place.id",
    };
    let may_pass_on = doc! {
        "$and": [
            { "$not": [held()] },
            { "$gt": [{ "$size": field(QUEUE) }, 0] },
            token_is_valid(),
        ]
    };
    doc! {
        "$replaceWith": { "$cond": {
            "if": may_pass_on,
            "then": { "$let": { "vars": { "place": first }, "in": grant } },
            "else": "$$ROOT",
        } }
    }
}

/// The last stage of every fair write: an empty queue is not stored (a
/// grant made with nobody in line left none at all).
fn tidy(extra: Document) -> Document {
    let mut set = doc! { QUEUE: or_remove(doc! { "$ifNull": [field(QUEUE), []] }) };
    set.extend(extra);
    doc! { "$set": set }
}

/// A new place for `request`'s wait, lasting a lease from now.
fn new_place(request: &AcquireRequest, place: &PlaceId) -> Document {
    doc! {
        ENTRY_ID: { "$literal": place.as_str() },
        EXPIRES_AT: now_plus(request.lease),
        LEASE: millis(request.lease),
        HOLDER: { "$literal": holder(&request.holder) },
        RECORDS_TERM: request.records_term,
    }
}

/// The queue with `place` renewed for a lease from now, or added last.
fn in_line(request: &AcquireRequest, place: &PlaceId) -> Document {
    let ours = doc! { "$eq": ["$$this.id", { "$literal": place.as_str() }] };
    let renewed = doc! {
        "$map": {
            "input": field(QUEUE),
            "in": { "$cond": [
                ours.clone(),
                { "$mergeObjects": ["$$this", { EXPIRES_AT: now_plus(request.lease) }] },
                "$$this",
            ] },
        }
    };
    let there = doc! {
        "$anyElementTrue": [{ "$map": { "input": field(QUEUE), "in": ours } }]
    };
    doc! {
        "$cond": [
            there,
            renewed,
            { "$concatArrays": [field(QUEUE), [new_place(request, place)]] },
        ]
    }
}

/// The fair acquire pipeline. After dropping dead places and passing a
/// free lock on: the grant made to `place` is taken over under this
/// attempt's identity and extended from now (a waiter that did not hold it
/// as passed, or whose own attempt passed it on); or a lock free with nobody in
/// line is granted; or, for a wait (`place` given), its place is renewed
/// or taken, except beside permits (that is a conflict). A single try
/// takes no place, so it is granted only when nobody holds or waits.
pub(crate) fn acquire(request: &AcquireRequest, place: Option<&PlaceId>) -> Vec<Document> {
    let ours = doc! { "$literal": lock_id(request.lease_id) };
    let free_and_nobody_waits = doc! {
        "$and": [
            { "$not": [held()] },
            { "$eq": [{ "$size": field(QUEUE) }, 0] },
            token_is_valid(),
        ]
    };
    let grant = crate::exclusive::grant(request, None);
    let outcome = match place {
        None => doc! { "$cond": [free_and_nobody_waits, grant, "$$ROOT"] },
        Some(place) => {
            let take_over = doc! { "$mergeObjects": ["$$ROOT", {
                LOCK_ID: ours.clone(),
                EXPIRES_AT: now_plus(request.lease),
                HOLDER: { "$literal": holder(&request.holder) },
            }] };
            let granted_to_place = doc! {
                "$and": [{ "$eq": [field(LOCK_ID), { "$literal": place.as_str() }] }, held()]
            };
            let queued = doc! { "$cond": [
                { "$ne": [field(LOCK_ID), PERMITS] },
                { "$mergeObjects": ["$$ROOT", { QUEUE: in_line(request, place) }] },
                "$$ROOT",
            ] };
            let direct_or_queued = doc! { "$cond": [free_and_nobody_waits, grant, queued] };
            doc! { "$cond": [granted_to_place, take_over, direct_or_queued] }
        }
    };
    let taken = doc! { "$eq": [field(LOCK_ID), ours] };
    vec![
        prune(),
        pass_on(),
        doc! { "$replaceWith": outcome },
        // A waiting attempt may be made because a change event woke it;
        // its own write must not look like a release, nor a grant of ours
        // like a pass-on.
        tidy(doc! {
            FREED: "$$REMOVE",
            PASSED_TO: { "$cond": [taken, "$$REMOVE", field(PASSED_TO)] },
        }),
    ]
}

/// The fair release pipeline, for a document the filter found held by our
/// grant: the lock goes to the first live place in the same write, or is
/// free when nobody waits.
pub(crate) fn release() -> Vec<Document> {
    vec![
        prune(),
        doc! { "$set": { EXPIRES_AT: free_at() } },
        doc! { "$unset": [LOCK_ID] },
        pass_on(),
        tidy(doc! {}),
    ]
}

/// The filter for the document where `place` waits, or holds the grant
/// passed on to it.
pub(crate) fn placed(name: &LockName, place: &PlaceId) -> Document {
    doc! {
        ID: name.as_str(),
        "$or": [
            { format!("{QUEUE}.{ENTRY_ID}"): place.as_str() },
            { LOCK_ID: place.as_str() },
        ],
    }
}

/// Gives `place`, of `request`'s wait, up: its place goes, and a grant
/// passed on to it that it has not taken over passes on to the next place,
/// the term the pass-on recorded for it withdrawn first (nobody received
/// that grant), so that the next term names the one before it. When that
/// leaves nobody in line and no writer holding, readers kept out by the
/// line may go: the write says so in `freed`.
pub(crate) fn leave(request: &AcquireRequest, place: &PlaceId) -> Vec<Document> {
    let id = doc! { "$literal": place.as_str() };
    let granted = doc! { "$eq": [field(LOCK_ID), id.clone()] };
    let readers_may_go = doc! {
        "$and": [
            { "$eq": [{ "$size": field(QUEUE) }, 0] },
            { "$not": [held_exclusively()] },
        ]
    };
    vec![
        prune(),
        doc! { "$set": {
            QUEUE: { "$filter": {
                "input": field(QUEUE),
                "as": "place",
                "cond": { "$ne": ["$$place.id", id.clone()] },
            } },
            EXPIRES_AT: { "$cond": [granted.clone(), free_at(), field(EXPIRES_AT)] },
            LOCK_ID: { "$cond": [granted.clone(), "$$REMOVE", field(LOCK_ID)] },
            TERMS: { "$cond": [
                granted,
                terms::withdrawn(field(FENCING_TOKEN).into(), &request.holder),
                field(TERMS),
            ] },
        } },
        pass_on(),
        tidy(doc! { FREED: { "$cond": [readers_may_go, id, "$$REMOVE"] } }),
    ]
}

/// Whether readers may be admitted beside the places in line: only when
/// none lives.
pub(crate) fn nobody_in_line() -> Document {
    doc! { "$eq": [{ "$size": live_places() }, 0] }
}

/// Whether the place a write passed the lock on to (its `passedTo`,
/// read from a reply or a change event) is one of `backend`'s.
pub(crate) fn passed_to_us(place: &str, backend: &str) -> bool {
    place.len() == 32 && place.starts_with(backend)
}

/// The time a place lasts, and its waiter renews it within: half of it.
pub(crate) fn renewal(lease: Duration) -> Duration {
    lease / 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::{Claim, Holder};

    fn request(retries: bool) -> AcquireRequest {
        AcquireRequest {
            retries,
            ..AcquireRequest::new(
                LockName::new("$$NOW").unwrap(),
                Claim::Exclusive,
                Duration::from_millis(1500),
                Holder {
                    host: "$host".into(),
                    pid: 7,
                    label: Some("$label".into()),
                }
                .into(),
            )
        }
    }

    #[test]
    fn caller_values_are_literals_in_a_place() {
        let place = PlaceId::new("0123456789abcdef");
        let text = format!("{}", new_place(&request(true), &place));
        assert!(
            text.contains(&format!("\"$literal\": \"{}\"", place.as_str())),
            "{text}"
        );
        assert!(
            text.contains("\"$literal\": { \"host\": \"$host\""),
            "{text}"
        );
    }

    #[test]
    fn a_waiter_that_leaves_withdraws_its_term_as_a_literal_holder() {
        let place = PlaceId::new("0123456789abcdef");
        let text = format!("{:?}", leave(&request(true), &place));
        assert!(text.contains("fencingToken"), "{text}");
        assert!(
            text.contains("\"$literal\": Document({\"host\": String(\"$host\")"),
            "{text}"
        );
    }

    #[test]
    fn a_single_try_takes_no_place() {
        let new_place = format!("{RECORDS_TERM:?}: Boolean(false)");
        let place = PlaceId::new("0123456789abcdef");
        let waits = format!("{:?}", acquire(&request(true), Some(&place)));
        assert!(waits.contains(&new_place), "a wait adds a place: {waits}");
        let tries = format!("{:?}", acquire(&request(false), None));
        assert!(!tries.contains(&new_place), "{tries}");
    }

    #[test]
    fn a_pass_on_names_the_backend_and_the_place() {
        let (ours, theirs) = ("0123456789abcdef", "fedcba9876543210");
        let place = PlaceId::new(ours);
        assert!(place.as_str().starts_with(ours) && place.as_str().len() == 32);
        assert!(passed_to_us(place.as_str(), ours));
        assert!(!passed_to_us(place.as_str(), theirs));
        assert!(!passed_to_us(ours, ours));
    }

    #[test]
    fn a_place_is_found_by_its_identity_only() {
        let place = PlaceId::new("0123456789abcdef");
        let found = doc! { QUEUE: [{ ENTRY_ID: "x" }, { ENTRY_ID: place.as_str() }] };
        assert!(place.is_in(&found));
        assert!(!PlaceId::new("0123456789abcdef").is_in(&found));
        assert!(!place.is_in(&doc! {}));
    }
}

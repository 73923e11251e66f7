//! Readers and permits: one entry each in the document's `holders` array,
//! `{id, fencingToken, acquiredAt, expiresAt, holder}`, while `lockId` says
//! which of the two the name holds and `expiresAt` is the latest of the
//! entries' expiries.
//!
//! Every pipeline here first drops the entries and marks that expired by
//! `$$NOW`, then decides, in the same command; `$$NOW` is one instant for
//! the whole command, so dropping, deciding and the new expiry agree.

use std::time::Duration;

use distlock_core::backend::{AcquireRequest, LeaseId};
use distlock_core::{Claim, Holder, LockName, MAX_PERMITS};
use mongodb::bson::{Bson, Document, doc};

use crate::document::{
    ACQUIRED_AT, ENTRY_ID, EXPIRES_AT, FENCING_TOKEN, FREED, HOLDER, HOLDERS, ID, LIMIT, LOCK_ID,
    PERMITS, SHARED, WAITING, field, free_at, held_by_entries, held_exclusively, holder,
    latest_expiry, live, lock_id, next_token, now_plus, or_remove, token_is_valid,
};

/// The most readers that hold one name at once; the next one waits as if
/// the name were held. It bounds the document's size (each entry is at
/// most about 700 bytes, see [`MAX_HOLDER_TEXT`]) and the work of every
/// command on it, as [`MAX_PERMITS`] does for a semaphore.
pub(crate) const MAX_READERS: u32 = MAX_PERMITS;

/// The most bytes of a holder's host and of its label kept in an entry.
const MAX_HOLDER_TEXT: usize = 255;

/// The `lockId` of a name held with `claim`'s kind; `None` for an
/// exclusive claim, whose grant identity is its `lockId`.
pub(crate) fn kind_marker(claim: Claim) -> Option<&'static str> {
    match claim {
        Claim::Exclusive => None,
        Claim::Shared => Some(SHARED),
        Claim::Permit { .. } => Some(PERMITS),
    }
}

fn marker(claim: Claim) -> &'static str {
    // Only readers and permits come here; exclusive claims go to the
    // pipelines of `exclusive`.
    kind_marker(claim).unwrap_or(SHARED)
}

/// `text`, cut to at most [`MAX_HOLDER_TEXT`] bytes at a character boundary.
fn cut(text: &str) -> &str {
    let mut end = text.len().min(MAX_HOLDER_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The holder as an entry records it: host and label cut, so that a long
/// label cannot push the document past MongoDB's 16 MiB limit.
pub(crate) fn entry_holder(who: &Holder) -> Document {
    holder(&Holder {
        host: cut(&who.host).to_owned(),
        pid: who.pid,
        label: who.label.as_deref().map(|label| cut(label).to_owned()),
    })
}

/// Whether the acquire pipeline admits `claim`, given the live entries
/// `$_h`, the live marks `$_w` and whether a writer holds the name `$_x`.
fn admits(claim: Claim) -> Document {
    let none_held = doc! { "$eq": [{ "$size": "$_h" }, 0] };
    match claim {
        Claim::Permit { limit } => {
            let limit = i64::from(limit);
            doc! { "$and": [
                { "$not": ["$_x"] },
                { "$or": [
                    none_held,
                    { "$and": [
                        { "$eq": [field(LOCK_ID), PERMITS] },
                        { "$eq": [field(LIMIT), limit] },
                        { "$lt": [{ "$size": "$_h" }, limit] },
                    ] },
                ] },
            ] }
        }
        // Readers also wait while a writer waits, marked or in a fair line.
        _ => doc! { "$and": [
            { "$not": ["$_x"] },
            { "$eq": [{ "$size": "$_w" }, 0] },
            crate::fair::nobody_in_line(),
            { "$lt": [{ "$size": "$_h" }, i64::from(MAX_READERS)] },
            { "$or": [none_held, { "$eq": [field(LOCK_ID), SHARED] }] },
        ] },
    }
}

/// The acquire pipeline of a reader or a permit: adds our entry when
/// `request.claim` is admitted and the stored fencing token may be built
/// on, and otherwise only drops what expired (a no-op write once nothing
/// has). Every field gets its new value or itself; the temporary `_`
/// fields go at the end.
pub(crate) fn acquire(request: &AcquireRequest) -> Vec<Document> {
    let kind = marker(request.claim);
    let none_left = doc! { "$eq": [{ "$size": "$_h" }, 0] };
    let emptied = doc! { "$and": [held_by_entries(), none_left.clone()] };
    let entry = doc! {
        ENTRY_ID: { "$literal": lock_id(request.lease_id) },
        FENCING_TOKEN: "$_t",
        ACQUIRED_AT: "$$NOW",
        EXPIRES_AT: now_plus(request.lease),
        HOLDER: { "$literal": entry_holder(&request.holder) },
    };
    let limit = match request.claim {
        Claim::Permit { limit } => doc! {
            "$cond": ["$_ok", i64::from(limit), { "$cond": [none_left.clone(), "$$REMOVE", field(LIMIT)] }]
        },
        _ => doc! { "$cond": [{ "$or": ["$_ok", none_left.clone()] }, "$$REMOVE", field(LIMIT)] },
    };
    vec![
        doc! { "$set": {
            "_h": { "$cond": [held_by_entries(), live(HOLDERS), []] },
            "_w": live(WAITING),
            "_x": held_exclusively(),
            "_t": next_token(),
            "_v": token_is_valid(),
        } },
        doc! { "$set": { "_ok": { "$and": ["$_v", admits(request.claim)] } } },
        doc! { "$set": {
            LOCK_ID: { "$cond": ["$_ok", kind, { "$cond": [emptied.clone(), "$$REMOVE", field(LOCK_ID)] }] },
            LIMIT: limit,
            HOLDERS: { "$cond": ["$_ok", { "$concatArrays": ["$_h", [entry]] }, or_remove("$_h")] },
            WAITING: or_remove("$_w"),
            FENCING_TOKEN: { "$cond": ["$_ok", "$_t", field(FENCING_TOKEN)] },
            ACQUIRED_AT: { "$cond": ["$_ok", "$$NOW", field(ACQUIRED_AT)] },
            HOLDER: { "$cond": ["$_ok", { "$literal": entry_holder(&request.holder) }, field(HOLDER)] },
            EXPIRES_AT: { "$cond": [
                "$_ok",
                { "$max": [now_plus(request.lease), latest_expiry("$_h")] },
                { "$cond": [emptied, free_at(), field(EXPIRES_AT)] },
            ] },
            // An attempt may be made because a change event woke it; its own
            // write must not look like a release, or it would wake itself.
            FREED: "$$REMOVE",
        } },
        doc! { "$unset": ["_h", "_w", "_x", "_t", "_v", "_ok"] },
    ]
}

/// What the reply to an acquire carries: enough to tell the outcome and
/// when to try again, but not the holders' names and labels, which would
/// make every reply as large as the document.
pub(crate) fn reply_projection() -> Document {
    doc! {
        LOCK_ID: 1, LIMIT: 1, FENCING_TOKEN: 1, ACQUIRED_AT: 1, EXPIRES_AT: 1,
        format!("{HOLDERS}.{ENTRY_ID}"): 1,
        format!("{HOLDERS}.{FENCING_TOKEN}"): 1,
        format!("{HOLDERS}.{EXPIRES_AT}"): 1,
        format!("{WAITING}.{ENTRY_ID}"): 1,
        format!("{WAITING}.{EXPIRES_AT}"): 1,
    }
}

/// True for a live entry among `ids` (the `$$entry` variable).
fn live_entry_among(ids: &[String]) -> Document {
    let ours = match ids {
        [id] => doc! { "$eq": ["$$entry.id", { "$literal": id }] },
        _ => doc! { "$in": ["$$entry.id", { "$literal": ids }] },
    };
    doc! { "$and": [ours, { "$gt": ["$$entry.expiresAt", "$$NOW"] }] }
}

/// True when the document has a live entry among `ids`.
fn has_live_entry(ids: &[String]) -> Document {
    doc! {
        "$anyElementTrue": [{
            "$map": {
                "input": { "$ifNull": [field(HOLDERS), []] },
                "as": "entry",
                "in": live_entry_among(ids),
            }
        }]
    }
}

/// The filter for our live entry `id` in `name`, held as `claim`'s kind.
pub(crate) fn live_entry(name: &LockName, claim: Claim, id: LeaseId) -> Document {
    let ids = [lock_id(id)];
    doc! {
        ID: name.as_str(),
        LOCK_ID: marker(claim),
        format!("{HOLDERS}.{ENTRY_ID}"): ids[0].as_str(),
        "$expr": has_live_entry(&ids),
    }
}

/// The filter for documents among `names` with a live entry among `ids`.
pub(crate) fn live_entries(names: &[&LockName], ids: &[String]) -> Document {
    let names: Vec<Bson> = names
        .iter()
        .map(|name| Bson::String(name.as_str().to_owned()))
        .collect();
    doc! {
        ID: { "$in": names },
        LOCK_ID: { "$in": [SHARED, PERMITS] },
        format!("{HOLDERS}.{ENTRY_ID}"): { "$in": ids },
        "$expr": has_live_entry(ids),
    }
}

/// The extension pipeline: our live entries among `ids` run `lease` from
/// the server's now. Only `$set`, and the array keeps its order, so the
/// change is one element per entry in the oplog; entries that expired are
/// left for the next acquire or release to drop.
pub(crate) fn extend(ids: &[String], lease: Duration) -> Vec<Document> {
    vec![
        doc! { "$set": { HOLDERS: { "$map": {
            "input": field(HOLDERS),
            "as": "entry",
            "in": { "$cond": [
                live_entry_among(ids),
                { "$mergeObjects": ["$$entry", { EXPIRES_AT: now_plus(lease) }] },
                "$$entry",
            ] },
        } } } },
        doc! { "$set": { EXPIRES_AT: latest_expiry(field(HOLDERS)) } },
    ]
}

/// The release pipeline for our entry `id`, held as `claim`'s kind. With
/// the last entry the name is free, as an exclusive release leaves it.
/// A write that may let a waiter in says so in `freed`: every permit's
/// release, and a reader's only when it was the last one (a writer needs
/// them all gone) or readers were at their cap.
pub(crate) fn release(claim: Claim, id: LeaseId) -> Vec<Document> {
    let id = lock_id(id);
    let none_left = doc! { "$eq": [{ "$size": "$_h" }, 0] };
    let frees: Bson = match claim {
        Claim::Permit { .. } => true.into(),
        _ => doc! { "$or": [
            none_left.clone(),
            { "$gte": [{ "$size": "$_h" }, i64::from(MAX_READERS) - 1] },
        ] }
        .into(),
    };
    vec![
        doc! { "$set": { "_h": { "$filter": {
            "input": live(HOLDERS),
            "as": "other",
            "cond": { "$ne": ["$$other.id", { "$literal": &id }] },
        } } } },
        doc! { "$set": {
            HOLDERS: or_remove("$_h"),
            LOCK_ID: { "$cond": [none_left.clone(), "$$REMOVE", field(LOCK_ID)] },
            LIMIT: { "$cond": [none_left.clone(), "$$REMOVE", field(LIMIT)] },
            EXPIRES_AT: { "$cond": [none_left, free_at(), latest_expiry("$_h")] },
            FREED: { "$cond": [frees, { "$literal": &id }, "$$REMOVE"] },
        } },
        doc! { "$unset": "_h" },
    ]
}

/// The aggregation that tells which of `ids` are live entries among
/// `names`, after a bulk extension matched fewer documents than it might.
pub(crate) fn which_live(names: &[&LockName], ids: &[String]) -> Vec<Document> {
    let names: Vec<Bson> = names
        .iter()
        .map(|name| Bson::String(name.as_str().to_owned()))
        .collect();
    vec![
        doc! { "$match": { ID: { "$in": names }, LOCK_ID: { "$in": [SHARED, PERMITS] } } },
        doc! { "$project": { ID: 0, "ids": { "$map": {
            "input": { "$filter": {
                "input": { "$ifNull": [field(HOLDERS), []] },
                "as": "entry",
                "cond": live_entry_among(ids),
            } },
            "in": "$$this.id",
        } } } },
    ]
}

/// The entry `id` in `found`, if it is there.
pub(crate) fn entry(found: &Document, id: LeaseId) -> Option<&Document> {
    let id = lock_id(id);
    found
        .get_array(HOLDERS)
        .ok()?
        .iter()
        .filter_map(Bson::as_document)
        .find(|entry| entry.get_str(ENTRY_ID).ok() == Some(id.as_str()))
}

/// When the first entry in `found` expires, in the server's milliseconds
/// since the epoch, and how many entries there are.
pub(crate) fn first_expiry(found: &Document) -> (Option<i64>, usize) {
    let Ok(entries) = found.get_array(HOLDERS) else {
        return (None, 0);
    };
    let first = entries
        .iter()
        .filter_map(|entry| entry.as_document()?.get_datetime(EXPIRES_AT).ok())
        .map(|at| at.timestamp_millis())
        .min();
    (first, entries.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn request(claim: Claim, label: &str) -> AcquireRequest {
        AcquireRequest::new(
            LockName::new("$$NOW").unwrap(),
            claim,
            Duration::from_secs(1),
            Arc::new(Holder {
                host: "$host".into(),
                pid: 7,
                label: Some(label.into()),
            }),
        )
    }

    #[test]
    fn caller_values_are_literals_in_the_entry_pipelines() {
        for claim in [Claim::Shared, Claim::Permit { limit: 3 }] {
            let request = request(claim, "$label");
            let text = format!("{:?}", acquire(&request));
            assert!(
                text.contains(&format!(
                    "\"$literal\": String(\"{}\")",
                    lock_id(request.lease_id)
                )),
                "{text}"
            );
            assert!(
                text.contains("\"$literal\": Document({\"host\": String(\"$host\")"),
                "{text}"
            );
            let text = format!("{:?}", release(claim, request.lease_id));
            assert!(text.contains("$literal"), "{text}");
        }
    }

    #[test]
    fn long_holder_texts_are_cut_at_a_character_boundary() {
        let label = "é".repeat(200);
        let cut_label = cut(&label);
        assert!(cut_label.len() <= MAX_HOLDER_TEXT);
        assert!(cut_label.len() >= MAX_HOLDER_TEXT - 1);
        assert!(label.starts_with(cut_label));
        assert_eq!(cut("short"), "short");
    }

    #[test]
    fn entries_and_their_expiries_read_back() {
        let id = LeaseId::random();
        let found = doc! { HOLDERS: [
            { ENTRY_ID: lock_id(LeaseId::random()), EXPIRES_AT: mongodb::bson::DateTime::from_millis(20) },
            { ENTRY_ID: lock_id(id), FENCING_TOKEN: 5_i64, EXPIRES_AT: mongodb::bson::DateTime::from_millis(10) },
        ] };
        assert_eq!(
            entry(&found, id).and_then(|e| e.get_i64(FENCING_TOKEN).ok()),
            Some(5)
        );
        assert!(entry(&found, LeaseId::random()).is_none());
        assert_eq!(first_expiry(&found), (Some(10), 2));
        assert_eq!(first_expiry(&doc! {}), (None, 0));
    }
}

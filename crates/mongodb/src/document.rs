//! The lock document and the filters and update pipelines that change it.
//!
//! One document per lock:
//!
//! ```text
//! { _id: <name>, lockId: <32 hex chars>, fencingToken: <int64>,
//!   acquiredAt: <date>, expiresAt: <date>,
//!   holder: { host: <string>, pid: <int64>, label: <string or null> } }
//! ```
//!
//! Every time is the server's `$$NOW`; every value the caller supplied is
//! wrapped in `$literal` inside a pipeline, so no name or label can be read
//! as an expression or a field path.

use std::time::Duration;

use distlock_core::{AcquireRequest, Holder, LeaseId, LockName};
use mongodb::bson::{Bson, Document, doc};

/// The lock's name, verbatim.
pub(crate) const ID: &str = "_id";
/// The identity of the current grant; absent when the lock was released.
pub(crate) const LOCK_ID: &str = "lockId";
/// The fencing token of the latest grant; kept across releases.
pub(crate) const FENCING_TOKEN: &str = "fencingToken";
/// When the latest grant was made, by the server's clock.
pub(crate) const ACQUIRED_AT: &str = "acquiredAt";
/// When the current grant ends unless extended, by the server's clock.
pub(crate) const EXPIRES_AT: &str = "expiresAt";
/// Who made the latest grant.
pub(crate) const HOLDER: &str = "holder";

/// How a lease identity is stored: 32 lowercase hex digits.
pub(crate) fn lock_id(id: LeaseId) -> String {
    format!("{:032x}", id.as_u128())
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis())
        .unwrap_or(i64::MAX)
        .max(1)
}

/// `$$NOW + lease` as an aggregation expression.
fn now_plus(lease: Duration) -> Document {
    doc! {
        "$dateAdd": { "startDate": "$$NOW", "unit": "millisecond", "amount": millis(lease) }
    }
}

/// True while the document's grant has not expired by the server's clock.
pub(crate) fn unexpired() -> Document {
    doc! { "$gt": [format!("${EXPIRES_AT}"), "$$NOW"] }
}

/// True while someone holds the lock: a grant identity is present and has
/// not expired.
fn held() -> Document {
    doc! {
        "$and": [
            { "$ne": [{ "$type": format!("${LOCK_ID}") }, "missing"] },
            unexpired(),
        ]
    }
}

fn holder(holder: &Holder) -> Document {
    doc! {
        "host": holder.host.as_str(),
        "pid": i64::from(holder.pid),
        "label": holder.label.as_deref().map_or(Bson::Null, |label| Bson::String(label.to_owned())),
    }
}

/// Reads a holder back; `None` when the document has none or it is malformed.
pub(crate) fn read_holder(document: &Document) -> Option<Holder> {
    let holder = document.get_document(HOLDER).ok()?;
    let pid = match holder.get("pid")? {
        Bson::Int32(pid) => u32::try_from(*pid).ok()?,
        Bson::Int64(pid) => u32::try_from(*pid).ok()?,
        _ => return None,
    };
    Some(Holder {
        host: holder.get_str("host").ok()?.to_owned(),
        pid,
        label: holder.get_str("label").ok().map(str::to_owned),
    })
}

/// Reads a fencing token back.
pub(crate) fn read_token(document: &Document) -> Option<u64> {
    match document.get(FENCING_TOKEN)? {
        Bson::Int64(token) => u64::try_from(*token).ok(),
        Bson::Int32(token) => u64::try_from(*token).ok(),
        _ => None,
    }
}

/// The filter for one lock.
pub(crate) fn by_name(name: &LockName) -> Document {
    doc! { ID: name.as_str() }
}

/// The filter for a grant of ours that has not expired.
pub(crate) fn live_grant(name: &LockName, id: LeaseId) -> Document {
    doc! { ID: name.as_str(), LOCK_ID: lock_id(id), "$expr": unexpired() }
}

/// The filter for any live grant of `name`, whoever holds it.
pub(crate) fn any_live_grant(name: &LockName) -> Document {
    doc! { ID: name.as_str(), LOCK_ID: { "$exists": true }, "$expr": unexpired() }
}

/// The filter for live grants of ours among several locks.
pub(crate) fn live_grants<'a>(leases: impl Iterator<Item = (&'a LockName, LeaseId)>) -> Document {
    let (names, ids): (Vec<Bson>, Vec<Bson>) = leases
        .map(|(name, id)| {
            (
                Bson::String(name.as_str().to_owned()),
                Bson::String(lock_id(id)),
            )
        })
        .unzip();
    doc! {
        ID: { "$in": names },
        LOCK_ID: { "$in": ids },
        "$expr": unexpired(),
    }
}

/// The filter for every held lock.
pub(crate) fn all_live_grants() -> Document {
    doc! { LOCK_ID: { "$exists": true }, "$expr": unexpired() }
}

/// A grant to `request`, as an expression of the document it replaces:
/// the token is `max(previous + 1, now in ms)`.
fn grant(request: &AcquireRequest) -> Document {
    let previous = doc! { "$ifNull": [format!("${FENCING_TOKEN}"), 0_i64] };
    doc! {
        ID: format!("${ID}"),
        LOCK_ID: { "$literal": lock_id(request.lease_id) },
        FENCING_TOKEN: {
            "$max": [
                { "$add": [previous, 1_i64] },
                { "$toLong": "$$NOW" },
            ]
        },
        ACQUIRED_AT: "$$NOW",
        EXPIRES_AT: now_plus(request.lease),
        HOLDER: { "$literal": holder(&request.holder) },
    }
}

/// The acquire pipeline: when nobody holds the lock by the server's clock,
/// replace the grant with ours; otherwise leave the document as it is.
pub(crate) fn acquire(request: &AcquireRequest) -> Vec<Document> {
    vec![doc! {
        "$replaceWith": {
            "$cond": { "if": held(), "then": "$$ROOT", "else": grant(request) }
        }
    }]
}

/// The hand-over pipeline, for a document the filter found held by the
/// old grant: the new grant replaces it in the same write, so the lock is
/// never free in between. The grant identity is replaced, not removed, so
/// the release watchers of other processes do not see a release.
pub(crate) fn hand_over(next: &AcquireRequest) -> Vec<Document> {
    vec![doc! { "$replaceWith": grant(next) }]
}

/// The extension pipeline: the lease now runs `lease` from the server's now.
pub(crate) fn extend(lease: Duration) -> Vec<Document> {
    vec![doc! { "$set": { EXPIRES_AT: now_plus(lease) } }]
}

/// The release pipeline: the grant's identity goes, and the document, with
/// its fencing token, stays at least until the server's clock has passed
/// that token. Tokens are `max(previous + 1, now in ms)`, so a lock granted
/// faster than once a millisecond runs its tokens ahead of the clock; were
/// the TTL index to delete the document sooner, the next grant would start
/// from the clock again, below the last token. `expiresAt` is what the TTL
/// index keys on, and a released lock is free whatever it says.
pub(crate) fn release() -> Vec<Document> {
    vec![
        doc! { "$set": { EXPIRES_AT: { "$max": [
            "$$NOW",
            { "$toDate": format!("${FENCING_TOKEN}") },
        ] } } },
        doc! { "$unset": [LOCK_ID] },
    ]
}

/// The pipeline of [`list`](distlock_core::Backend::list): held locks with
/// the milliseconds they have left by the server's clock.
pub(crate) fn list() -> Vec<Document> {
    vec![
        doc! { "$match": all_live_grants() },
        doc! {
            "$project": {
                ID: 1,
                FENCING_TOKEN: 1,
                HOLDER: 1,
                "remainingMs": {
                    "$subtract": [
                        { "$toLong": format!("${EXPIRES_AT}") },
                        { "$toLong": "$$NOW" },
                    ]
                },
            }
        },
        doc! { "$sort": { ID: 1 } },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, label: Option<&str>) -> AcquireRequest {
        AcquireRequest {
            lease_id: LeaseId::from_u128(0xabc),
            ..AcquireRequest::new(
                LockName::new(name).unwrap(),
                distlock_core::Claim::Exclusive,
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

    #[test]
    fn caller_values_are_literals_in_the_acquire_pipeline() {
        let pipeline = acquire(&request("$$NOW", Some("$label")));
        let grant = pipeline[0]
            .get_document("$replaceWith")
            .and_then(|with| with.get_document("$cond"))
            .and_then(|cond| cond.get_document("else"))
            .unwrap();
        assert_eq!(
            grant.get_document(LOCK_ID).unwrap(),
            &doc! { "$literal": "00000000000000000000000000000abc" }
        );
        assert_eq!(
            grant.get_document(HOLDER).unwrap(),
            &doc! { "$literal": { "host": "$host", "pid": 7_i64, "label": "$label" } }
        );
        assert_eq!(grant.get_str(ID).unwrap(), "$_id");
        // The name itself is only in the filter, a plain equality.
        assert_eq!(
            by_name(&LockName::new("$$NOW").unwrap()),
            doc! { "_id": "$$NOW" }
        );
    }

    #[test]
    fn holders_read_back_with_or_without_a_label() {
        for label in [None, Some("l")] {
            let request = request("n", label);
            let stored = doc! { HOLDER: holder(&request.holder) };
            assert_eq!(read_holder(&stored).as_ref(), Some(&*request.holder));
        }
    }

    #[test]
    fn identities_are_32_hex_digits() {
        assert_eq!(lock_id(LeaseId::from_u128(u128::MAX)), "f".repeat(32));
        assert_eq!(lock_id(LeaseId::from_u128(1)).len(), 32);
    }
}

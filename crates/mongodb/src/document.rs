//! The lock document: its fields, how they are read back, the filters that
//! find it, and the expressions the update pipelines of every kind share.
//!
//! One document per lock name. An exclusive grant lives in the top-level
//! fields:
//!
//! ```text
//! { _id: <name>, lockId: <32 hex chars>, fencingToken: <int64>,
//!   acquiredAt: <date>, expiresAt: <date>,
//!   holder: { host: <string>, pid: <int64>, label: <string or null> } }
//! ```
//!
//! Readers and permits live in `holders`, one entry each, while `lockId`
//! says which of them the name holds (`"shared"` or `"permits"`, never 32
//! hex digits) and `expiresAt` is the latest expiry among the entries, so
//! that "held until `expiresAt`" stays true of every document. `waiting`
//! lists the writers waiting for readers; `freed` marks a write that may let
//! a waiter in (see `watch`); `terms` is an election's record of terms (see
//! `terms`).
//!
//! Every time is the server's `$$NOW`; every value the caller supplied is
//! wrapped in `$literal` inside a pipeline, so no name or label can be read
//! as an expression or a field path.

use std::time::Duration;

use distlock_core::backend::LeaseId;
use distlock_core::{Holder, LockName};
use mongodb::Namespace;
use mongodb::bson::{Bson, Document, doc};

use crate::counter::{self, BadCounter};

/// The lock's name, verbatim.
pub(crate) const ID: &str = "_id";
/// The identity of the current exclusive grant, or [`SHARED`] or
/// [`PERMITS`] while readers or permits hold the name; absent when free.
pub(crate) const LOCK_ID: &str = "lockId";
/// The fencing token of the latest grant of any kind; kept across releases.
pub(crate) const FENCING_TOKEN: &str = "fencingToken";
/// When the latest grant was made, by the server's clock.
pub(crate) const ACQUIRED_AT: &str = "acquiredAt";
/// When the current grant ends unless extended, by the server's clock: the
/// latest of the holders' expiries when there are several.
pub(crate) const EXPIRES_AT: &str = "expiresAt";
/// Who made the latest grant.
pub(crate) const HOLDER: &str = "holder";
/// The readers or permits that hold the name, one entry each.
pub(crate) const HOLDERS: &str = "holders";
/// A semaphore's limit, while its permits are held.
pub(crate) const LIMIT: &str = "limit";
/// Writers waiting for the name: `[{id, expiresAt}]`.
pub(crate) const WAITING: &str = "waiting";
/// Set to a fresh value by each write that may let a waiter in.
pub(crate) const FREED: &str = "freed";
/// An entry's identity, in [`HOLDERS`] and [`WAITING`].
pub(crate) const ENTRY_ID: &str = "id";
/// In fair mode, the waiting writers' places, first come first.
pub(crate) const QUEUE: &str = "queue";
/// Set by a write that passed the lock on to a place: the place's identity.
pub(crate) const PASSED_TO: &str = "passedTo";

/// `lockId` while readers hold the name.
pub(crate) const SHARED: &str = "shared";
/// `lockId` while permits of a semaphore are held.
pub(crate) const PERMITS: &str = "permits";

/// How a lease identity is stored: 32 lowercase hex digits.
pub(crate) fn lock_id(id: LeaseId) -> String {
    format!("{:032x}", id.as_u128())
}

/// `$field`: the value of a top-level field, in an expression.
pub(crate) fn field(name: &str) -> String {
    format!("${name}")
}

pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis())
        .unwrap_or(i64::MAX)
        .max(1)
}

/// `$$NOW + lease` as an aggregation expression.
pub(crate) fn now_plus(lease: Duration) -> Document {
    doc! {
        "$dateAdd": { "startDate": "$$NOW", "unit": "millisecond", "amount": millis(lease) }
    }
}

/// True while the document's grant has not expired by the server's clock.
pub(crate) fn unexpired() -> Document {
    doc! { "$gt": [field(EXPIRES_AT), "$$NOW"] }
}

/// True while someone holds the lock: a grant identity is present and has
/// not expired. With readers or permits, `expiresAt` is their latest
/// expiry, so this holds while any of them lives.
pub(crate) fn held() -> Document {
    doc! {
        "$and": [
            { "$ne": [{ "$type": field(LOCK_ID) }, "missing"] },
            unexpired(),
        ]
    }
}

/// True when `lockId` names readers or permits rather than one grant.
pub(crate) fn held_by_entries() -> Document {
    doc! { "$in": [field(LOCK_ID), [SHARED, PERMITS]] }
}

/// True while an exclusive grant lives.
pub(crate) fn held_exclusively() -> Document {
    doc! { "$and": [held(), { "$not": [held_by_entries()] }] }
}

/// The entries of the array field `array` that have not expired.
pub(crate) fn live(array: &str) -> Document {
    doc! {
        "$filter": {
            "input": { "$ifNull": [field(array), []] },
            "as": "entry",
            "cond": { "$gt": ["$$entry.expiresAt", "$$NOW"] },
        }
    }
}

/// The array `entries`, or nothing (the field is removed) when it is
/// empty: an array field is never stored empty.
pub(crate) fn or_remove(entries: impl Into<Bson>) -> Document {
    doc! {
        "$let": {
            "vars": { "entries": entries.into() },
            "in": { "$cond": [{ "$eq": [{ "$size": "$$entries" }, 0] }, "$$REMOVE", "$$entries"] },
        }
    }
}

/// The latest `expiresAt` among `entries`; null when there are none.
/// (`$max` of `$map`, since not every server reads `"$a.b"` through an
/// array; see docs/mongodb.md.)
pub(crate) fn latest_expiry(entries: impl Into<Bson>) -> Document {
    doc! { "$max": { "$map": { "input": entries.into(), "in": "$$this.expiresAt" } } }
}

/// True when the stored fencing token may be built on (see
/// [`counter::is_valid`]): a grant is made only then, and otherwise the
/// reply shows the token, which is reported as an error.
pub(crate) fn token_is_valid() -> Document {
    counter::is_valid(&field(FENCING_TOKEN))
}

/// The next fencing token, an int64: `max(previous + 1, now in ms)`, for a
/// document whose token [`token_is_valid`]. A whole double stored by hand
/// counts as the integer it holds.
pub(crate) fn next_token() -> Document {
    doc! {
        "$max": [
            { "$add": [counter::as_long(&field(FENCING_TOKEN)), 1_i64] },
            { "$toLong": "$$NOW" },
        ]
    }
}

/// The `expiresAt` of a lock just freed: the server's now, or its fencing
/// token read as milliseconds since the epoch if that is later. Tokens are
/// `max(previous + 1, now in ms)`, so a lock granted faster than once a
/// millisecond runs its tokens ahead of the clock; were the TTL index to
/// delete the document sooner, the next grant would start from the clock
/// again, below the last token. `expiresAt` is what the TTL index keys on,
/// and a released lock is free whatever it says. A token no grant could
/// have written (see [`token_is_valid`]) counts for nothing here, so that a
/// release never fails on it.
pub(crate) fn free_at() -> Document {
    doc! { "$max": ["$$NOW", { "$toDate": counter::as_long(&field(FENCING_TOKEN)) }] }
}

pub(crate) fn holder(holder: &Holder) -> Document {
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

/// Reads a fencing token back: `None` when there is none.
///
/// # Errors
/// [`BadCounter`] when it is not a whole number from 0 to 2^63 - 1.
pub(crate) fn read_token(document: &Document) -> Result<Option<u64>, BadCounter> {
    counter::read(document, FENCING_TOKEN)
}

/// How the document of `name` in `namespace` is named in errors.
pub(crate) fn describe(name: &LockName, namespace: &Namespace) -> String {
    format!("lock document {name} in {namespace}")
}

/// The filter for one lock.
pub(crate) fn by_name(name: &LockName) -> Document {
    doc! { ID: name.as_str() }
}

/// The filter for an exclusive grant of ours, stored under `stored_id`,
/// that has not expired.
pub(crate) fn live_grant(name: &LockName, stored_id: String) -> Document {
    doc! { ID: name.as_str(), LOCK_ID: stored_id, "$expr": unexpired() }
}

/// The filter for any live grant of `name`, whoever holds it, of any kind.
pub(crate) fn any_live_grant(name: &LockName) -> Document {
    doc! { ID: name.as_str(), LOCK_ID: { "$exists": true }, "$expr": unexpired() }
}

/// The filter for live exclusive grants of ours among several locks, each
/// a name and the identity its grant is stored under.
pub(crate) fn live_grants<'a>(leases: impl Iterator<Item = (&'a LockName, String)>) -> Document {
    let (names, ids): (Vec<Bson>, Vec<Bson>) = leases
        .map(|(name, id)| (Bson::String(name.as_str().to_owned()), Bson::String(id)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_read_back_with_or_without_a_label() {
        for label in [None, Some("l")] {
            let expected = Holder {
                host: "$host".into(),
                pid: 7,
                label: label.map(str::to_owned),
            };
            let stored = doc! { HOLDER: holder(&expected) };
            assert_eq!(read_holder(&stored), Some(expected));
        }
    }

    #[test]
    fn identities_are_32_hex_digits_and_never_a_kind() {
        assert_eq!(lock_id(LeaseId::from_u128(u128::MAX)), "f".repeat(32));
        assert_eq!(lock_id(LeaseId::from_u128(1)).len(), 32);
        for kind in [SHARED, PERMITS] {
            assert_ne!(kind.len(), 32, "{kind} could pass for a grant identity");
        }
    }

    #[test]
    fn names_are_only_plain_equality_values() {
        assert_eq!(
            by_name(&LockName::new("$$NOW").unwrap()),
            doc! { "_id": "$$NOW" }
        );
    }
}

//! Taking a grant up again by its identity, for a process that restarted
//! while it held a lock (`LockClient::resume`): one `findAndModify` whose
//! filter finds the grant by its name, identity and fencing token, live by
//! the server's `$$NOW`, and whose pipeline gives it the new identity, a
//! lease from `$$NOW` and the new holder in the same write. A grant that
//! was released, ran out, was taken over or resumed already matches
//! nothing, and nothing changes.
//!
//! Every kind is found where its extension finds it: an exclusive grant in
//! the top-level fields (in fair mode too: a grant passed on to a waiter
//! is stored under the waiter's place, which the guard's handle names; see
//! `grant`), a reader or a permit in its entry of `holders`, whose own
//! token is matched (and a semaphore's limit with it). Its claim, token,
//! `acquiredAt`, place among the holders, the record of terms, the waiting
//! writers' marks and the fair line stay as they were.
//!
//! The write removes `freed` and `passedTo`, as an acquisition's does: it
//! neither releases nor passes anything on, and a change event that shows
//! either would wake waiters for nothing (see `watch`). It removes them
//! with a `$set` of `$$REMOVE`, not an `$unset` stage, and never removes
//! `lockId`, so that its change event is an update that no release
//! watcher matches.

use distlock_core::backend::{AcquireRequest, Lease};
use distlock_core::{Claim, LockName};
use mongodb::bson::{Document, doc};

use crate::document::{
    ENTRY_ID, EXPIRES_AT, FENCING_TOKEN, FREED, HOLDER, HOLDERS, ID, LIMIT, LOCK_ID, PASSED_TO,
    field, holder, latest_expiry, lock_id, now_plus, unexpired,
};
use crate::holders::{entry_holder, kind_marker};

/// The filter for the live grant `lease` names, of its kind: `None` when
/// its token is one no grant can have (beyond int64), so that nothing is
/// asked.
pub(crate) fn held(lease: &Lease) -> Option<Document> {
    let token = i64::try_from(lease.fencing_token).ok()?;
    let id = lock_id(lease.id);
    Some(match kind_marker(lease.claim) {
        None => exclusive_grant(&lease.name, id, token),
        Some(kind) => {
            let mut filter = doc! {
                ID: lease.name.as_str(),
                LOCK_ID: kind,
                format!("{HOLDERS}.{ENTRY_ID}"): id.as_str(),
                "$expr": { "$anyElementTrue": [{ "$map": {
                    "input": { "$ifNull": [field(HOLDERS), []] },
                    "as": "entry",
                    "in": entry_is(&id, token),
                } }] },
            };
            if let Claim::Permit { limit } = lease.claim {
                filter.insert(LIMIT, i64::from(limit));
            }
            filter
        }
    })
}

/// The filter for the live exclusive grant `id` of `name` with `token`.
fn exclusive_grant(name: &LockName, id: String, token: i64) -> Document {
    doc! { ID: name.as_str(), LOCK_ID: id, FENCING_TOKEN: token, "$expr": unexpired() }
}

/// True for the live entry `id` with `token` (the `$$entry` variable).
fn entry_is(id: &str, token: i64) -> Document {
    doc! { "$and": [
        { "$eq": ["$$entry.id", { "$literal": id }] },
        { "$eq": ["$$entry.fencingToken", token] },
        { "$gt": ["$$entry.expiresAt", "$$NOW"] },
    ] }
}

/// The pipeline that gives the grant `old` found by [`held`] the identity
/// of `request`, a lease of `request`'s from the server's now, and its
/// holder.
pub(crate) fn take_up(old: &Lease, request: &AcquireRequest) -> Vec<Document> {
    let new_id = doc! { "$literal": lock_id(request.lease_id) };
    let lease_end = now_plus(request.lease);
    match kind_marker(old.claim) {
        None => vec![doc! { "$set": {
            LOCK_ID: new_id,
            EXPIRES_AT: lease_end,
            HOLDER: { "$literal": holder(&request.holder) },
            FREED: "$$REMOVE",
            PASSED_TO: "$$REMOVE",
        } }],
        Some(_) => {
            let token = i64::try_from(old.fencing_token).unwrap_or(i64::MAX);
            vec![
                // Only `$set`, and the array keeps its order, as in an
                // extension.
                doc! { "$set": { HOLDERS: { "$map": {
                    "input": field(HOLDERS),
                    "as": "entry",
                    "in": { "$cond": [
                        entry_is(&lock_id(old.id), token),
                        { "$mergeObjects": ["$$entry", {
                            ENTRY_ID: new_id,
                            EXPIRES_AT: lease_end,
                            HOLDER: { "$literal": entry_holder(&request.holder) },
                        }] },
                        "$$entry",
                    ] },
                } } } },
                doc! { "$set": {
                    EXPIRES_AT: latest_expiry(field(HOLDERS)),
                    FREED: "$$REMOVE",
                    PASSED_TO: "$$REMOVE",
                } },
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock_core::Holder;
    use distlock_core::backend::GrantState;

    use super::*;
    use crate::grant::lease_id_of;
    use distlock_core::backend::LeaseId;

    fn request(claim: Claim, label: &str) -> AcquireRequest {
        AcquireRequest::new(
            LockName::new("$$NOW").unwrap(),
            claim,
            Duration::from_secs(1),
            Holder {
                host: "$host".into(),
                pid: 7,
                label: Some(label.into()),
            }
            .into(),
        )
    }

    #[test]
    fn every_kind_is_found_by_name_identity_and_token() {
        for claim in [Claim::Exclusive, Claim::Shared, Claim::Permit { limit: 3 }] {
            let old = request(claim, "old").granted(42, GrantState::none());
            let filter = held(&old).unwrap();
            assert_eq!(filter.get_str(ID).unwrap(), "$$NOW", "{claim}");
            let text = format!("{filter:?}");
            assert!(text.contains(&lock_id(old.id)), "{text}");
            assert!(text.contains("Int64(42)"), "{claim}: {text}");
            assert!(
                text.contains("$$NOW"),
                "{claim}: judged by the server's clock"
            );
            assert_eq!(
                filter.get_i64(LIMIT).ok(),
                matches!(claim, Claim::Permit { .. }).then_some(3),
                "{claim}"
            );
        }
        let beyond = request(Claim::Exclusive, "l").granted(u64::MAX, GrantState::none());
        assert!(held(&beyond).is_none(), "no grant has a token beyond int64");
    }

    #[test]
    fn caller_values_are_literals_in_the_pipeline() {
        for claim in [Claim::Exclusive, Claim::Shared] {
            let old = request(claim, "old").granted(42, GrantState::none());
            let new = request(claim, "$label");
            let text = format!("{:?}", take_up(&old, &new));
            assert!(
                text.contains(&format!(
                    "\"$literal\": String(\"{}\")",
                    lock_id(new.lease_id)
                )),
                "{text}"
            );
            assert!(
                text.contains("\"$literal\": Document({\"host\": String(\"$host\")"),
                "{text}"
            );
            assert!(text.contains("\"freed\": String(\"$$REMOVE\")"), "{text}");
            assert!(
                text.contains("\"passedTo\": String(\"$$REMOVE\")"),
                "{text}"
            );
            assert!(!text.contains("$unset"), "{text}");
        }
    }

    #[test]
    fn stored_identities_read_back_as_lease_identities() {
        let id = LeaseId::random();
        assert_eq!(lease_id_of(&lock_id(id)), Some(id));
        assert_eq!(lease_id_of("shared"), None);
        assert_eq!(lease_id_of(&"g".repeat(32)), None);
    }
}

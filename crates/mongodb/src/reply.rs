//! Reading the document an acquire returns: granted, held, or held as
//! another kind. The pipelines leave only live state behind them, so the
//! document alone tells, without comparing any time with a clock here.
//!
//! A stored counter that no grant can be built on (see `counter`) makes the
//! pipelines leave the document as it was; the reply then shows it, and it
//! is reported as an error rather than waited on.

use distlock_core::backend::AcquireRequest;
use distlock_core::{Claim, Error, Result};
use mongodb::Namespace;
use mongodb::bson::Document;

use crate::counter::{self, BadCounter};
use crate::document::{
    ACQUIRED_AT, EXPIRES_AT, LIMIT, LOCK_ID, PERMITS, SHARED, describe, lock_id, read_token,
};
use crate::error::BACKEND;
use crate::holders::{self, MAX_READERS};
use crate::waiting;

/// The outcome of one acquire, as its reply shows it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Ours, with this token; `acquired_at` is the server's time of the
    /// grant, in milliseconds since the epoch.
    Granted {
        fencing_token: u64,
        acquired_at: Option<i64>,
    },
    /// Held as another kind, or as a semaphore of another limit.
    Conflict(Claim),
    /// Held; nothing can change by expiry alone before the server's clock
    /// reaches `until` (milliseconds since the epoch), when known.
    Held { until: Option<i64> },
}

/// What `found` is held as, by the `lockId` the pipelines left; `None`
/// when it is free.
///
/// # Errors
/// [`BadCounter`] when a semaphore's `limit` is not a whole number.
pub(crate) fn held_as(found: &Document) -> std::result::Result<Option<Claim>, BadCounter> {
    let Ok(kind) = found.get_str(LOCK_ID) else {
        return Ok(None);
    };
    Ok(Some(match kind {
        SHARED => Claim::Shared,
        PERMITS => Claim::Permit {
            limit: counter::read(found, LIMIT)?
                .and_then(|limit| u32::try_from(limit).ok())
                .unwrap_or(0),
        },
        _ => Claim::Exclusive,
    }))
}

fn millis(found: &Document, key: &str) -> Option<i64> {
    found.get_datetime(key).ok().map(|at| at.timestamp_millis())
}

/// The verdict on an exclusive request's reply, from the lock collection
/// `namespace`.
///
/// # Errors
/// [`Error::InvalidData`] when the document's fencing token or limit is
/// not a whole number; a backend error when a grant has no fencing token.
pub(crate) fn exclusive(
    request: &AcquireRequest,
    found: &Document,
    namespace: &Namespace,
) -> Result<Verdict> {
    let bad = |bad: BadCounter| bad.into_error(describe(&request.name, namespace));
    let token = read_token(found).map_err(bad)?;
    if found.get_str(LOCK_ID).ok() == Some(lock_id(request.lease_id).as_str()) {
        return granted(request, token, found);
    }
    // A grant made only when nothing lives, so a kind left in the reply
    // lives: permits are a conflict, readers hold it until `expiresAt`.
    Ok(match held_as(found).map_err(bad)? {
        Some(held @ Claim::Permit { .. }) => Verdict::Conflict(held),
        _ => Verdict::Held {
            until: millis(found, EXPIRES_AT),
        },
    })
}

/// The verdict on a reader's or a permit's reply, from the lock collection
/// `namespace`.
///
/// # Errors
/// As [`exclusive`], for the document's counters and our entry's token.
pub(crate) fn entry(
    request: &AcquireRequest,
    found: &Document,
    namespace: &Namespace,
) -> Result<Verdict> {
    let bad = |bad: BadCounter| bad.into_error(describe(&request.name, namespace));
    read_token(found).map_err(bad)?;
    if let Some(entry) = holders::entry(found, request.lease_id) {
        return granted(request, read_token(entry).map_err(bad)?, found);
    }
    let held = held_as(found).map_err(bad)?;
    if let Some(held) = held.filter(|&held| !request.claim.same_family(held)) {
        return Ok(Verdict::Conflict(held));
    }
    let (first_entry, entries) = holders::first_expiry(found);
    let until = match request.claim {
        // A reader waits for a writer that holds the name, for every
        // writer's mark to go, and for a place among the readers.
        Claim::Shared => [
            (held == Some(Claim::Exclusive))
                .then(|| millis(found, EXPIRES_AT))
                .flatten(),
            waiting::first_expiry(found),
            (entries >= MAX_READERS as usize)
                .then_some(first_entry)
                .flatten(),
        ]
        .into_iter()
        .flatten()
        .max(),
        _ => first_entry,
    };
    Ok(Verdict::Held { until })
}

fn granted(request: &AcquireRequest, token: Option<u64>, found: &Document) -> Result<Verdict> {
    let fencing_token = token.ok_or_else(|| no_token(request))?;
    Ok(Verdict::Granted {
        fencing_token,
        acquired_at: millis(found, ACQUIRED_AT),
    })
}

pub(crate) fn no_token(request: &AcquireRequest) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: format!(
            "acquiring {}: the granted document has no fencing token",
            request.name
        ),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use distlock_core::backend::LeaseId;
    use distlock_core::{Holder, LockName};
    use mongodb::bson::{DateTime, doc};

    use crate::document::{ENTRY_ID, FENCING_TOKEN, HOLDERS, WAITING};

    fn request(claim: Claim) -> AcquireRequest {
        AcquireRequest::new(
            LockName::new("n").unwrap(),
            claim,
            Duration::from_secs(1),
            Holder::this_process(None).into(),
        )
    }

    fn at(ms: i64) -> DateTime {
        DateTime::from_millis(ms)
    }

    fn ns() -> Namespace {
        Namespace::new("db", "locks")
    }

    #[test]
    fn an_exclusive_reply_is_ours_held_or_a_semaphore() {
        let ours = request(Claim::Exclusive);
        let granted = doc! {
            LOCK_ID: lock_id(ours.lease_id), FENCING_TOKEN: 9_i64, ACQUIRED_AT: at(5),
        };
        assert_eq!(
            exclusive(&ours, &granted, &ns()).unwrap(),
            Verdict::Granted {
                fencing_token: 9,
                acquired_at: Some(5)
            }
        );
        let readers = doc! { LOCK_ID: SHARED, EXPIRES_AT: at(70) };
        assert_eq!(
            exclusive(&ours, &readers, &ns()).unwrap(),
            Verdict::Held { until: Some(70) }
        );
        let permits = doc! { LOCK_ID: PERMITS, LIMIT: 2_i64, EXPIRES_AT: at(70) };
        assert_eq!(
            exclusive(&ours, &permits, &ns()).unwrap(),
            Verdict::Conflict(Claim::Permit { limit: 2 })
        );
        let tokenless = doc! { LOCK_ID: lock_id(ours.lease_id) };
        assert!(exclusive(&ours, &tokenless, &ns()).is_err());
    }

    #[test]
    fn a_readers_reply_waits_for_the_writer_and_every_mark() {
        let reader = request(Claim::Shared);
        let ours = doc! {
            LOCK_ID: SHARED,
            HOLDERS: [{ ENTRY_ID: lock_id(reader.lease_id), FENCING_TOKEN: 4_i64 }],
            ACQUIRED_AT: at(1),
        };
        assert_eq!(
            entry(&reader, &ours, &ns()).unwrap(),
            Verdict::Granted {
                fencing_token: 4,
                acquired_at: Some(1)
            }
        );
        let writer_and_marks = doc! {
            LOCK_ID: lock_id(LeaseId::random()), EXPIRES_AT: at(50),
            WAITING: [{ ENTRY_ID: "a", EXPIRES_AT: at(80) }, { ENTRY_ID: "b", EXPIRES_AT: at(60) }],
        };
        assert_eq!(
            entry(&reader, &writer_and_marks, &ns()).unwrap(),
            Verdict::Held { until: Some(60) }
        );
        let permits = doc! { LOCK_ID: PERMITS, LIMIT: 3_i64 };
        assert_eq!(
            entry(&reader, &permits, &ns()).unwrap(),
            Verdict::Conflict(Claim::Permit { limit: 3 })
        );
    }

    #[test]
    fn a_permits_reply_names_a_conflict_or_the_first_expiry() {
        let permit = request(Claim::Permit { limit: 2 });
        let full = doc! {
            LOCK_ID: PERMITS, LIMIT: 2_i64,
            HOLDERS: [{ ENTRY_ID: "a", EXPIRES_AT: at(30) }, { ENTRY_ID: "b", EXPIRES_AT: at(20) }],
        };
        assert_eq!(
            entry(&permit, &full, &ns()).unwrap(),
            Verdict::Held { until: Some(20) }
        );
        let other_limit = doc! { LOCK_ID: PERMITS, LIMIT: 3_i64 };
        assert_eq!(
            entry(&permit, &other_limit, &ns()).unwrap(),
            Verdict::Conflict(Claim::Permit { limit: 3 })
        );
        for (held, claim) in [
            (doc! { LOCK_ID: SHARED }, Claim::Shared),
            (
                doc! { LOCK_ID: lock_id(LeaseId::random()) },
                Claim::Exclusive,
            ),
        ] {
            assert_eq!(
                entry(&permit, &held, &ns()).unwrap(),
                Verdict::Conflict(claim)
            );
        }
    }

    #[test]
    fn whole_doubles_are_read_as_integers() {
        let ours = request(Claim::Exclusive);
        let granted = doc! { LOCK_ID: lock_id(ours.lease_id), FENCING_TOKEN: 9.0 };
        assert_eq!(
            exclusive(&ours, &granted, &ns()).unwrap(),
            Verdict::Granted {
                fencing_token: 9,
                acquired_at: None
            }
        );
        let permit = request(Claim::Permit { limit: 2 });
        let other_limit = doc! { LOCK_ID: PERMITS, LIMIT: 3.0, FENCING_TOKEN: 4.0 };
        assert_eq!(
            entry(&permit, &other_limit, &ns()).unwrap(),
            Verdict::Conflict(Claim::Permit { limit: 3 })
        );
    }

    #[test]
    fn a_counter_no_grant_can_follow_is_an_error_naming_the_document() {
        let writer = request(Claim::Exclusive);
        let reader = request(Claim::Shared);
        let cases = [
            (doc! { FENCING_TOKEN: 5.5 }, FENCING_TOKEN),
            (
                doc! { LOCK_ID: SHARED, FENCING_TOKEN: -1_i64 },
                FENCING_TOKEN,
            ),
            (doc! { LOCK_ID: PERMITS, LIMIT: 2.5 }, LIMIT),
        ];
        for (found, bad_field) in cases {
            for outcome in [
                exclusive(&writer, &found, &ns()),
                entry(&reader, &found, &ns()),
            ] {
                match outcome {
                    Err(Error::InvalidData { what, field, .. }) => {
                        assert_eq!(field, bad_field);
                        assert_eq!(what, "lock document n in db.locks");
                    }
                    other => panic!("{found}: {other:?}"),
                }
            }
        }
    }
}

//! [`list`](distlock_core::backend::Backend::list): one entry per holder, an
//! exclusive grant, each reader and each permit, with the time it has left
//! by the server's clock.

use std::time::Duration;

use distlock_core::backend::Waiters;
use distlock_core::{LockInfo, LockKind, LockName, Permits, Result};
use mongodb::Namespace;
use mongodb::bson::{Bson, Document, doc};

use crate::counter::{self, BadCounter};
use crate::document::{
    EXPIRES_AT, FENCING_TOKEN, HOLDER, HOLDERS, ID, LIMIT, LOCK_ID, PERMITS, SHARED,
    all_live_grants, describe, field, held_by_entries, live, read_holder, read_token,
};

/// The aggregation: held documents, one row per live holder, the
/// milliseconds each has left computed on the server.
pub(crate) fn pipeline() -> Vec<Document> {
    // An exclusive grant is its document's only holder.
    let grant = doc! {
        FENCING_TOKEN: field(FENCING_TOKEN),
        EXPIRES_AT: field(EXPIRES_AT),
        HOLDER: field(HOLDER),
    };
    vec![
        doc! { "$match": all_live_grants() },
        doc! { "$project": {
            LOCK_ID: 1,
            LIMIT: 1,
            "held": { "$cond": [held_by_entries(), live(HOLDERS), [grant]] },
        } },
        doc! { "$set": { "inUse": { "$size": "$held" } } },
        doc! { "$unwind": "$held" },
        doc! { "$project": {
            LOCK_ID: 1,
            LIMIT: 1,
            "inUse": 1,
            FENCING_TOKEN: "$held.fencingToken",
            HOLDER: "$held.holder",
            "remainingMs": {
                "$subtract": [
                    { "$toLong": "$held.expiresAt" },
                    { "$toLong": "$$NOW" },
                ]
            },
        } },
        doc! { "$sort": { ID: 1, FENCING_TOKEN: 1 } },
    ]
}

/// One row of [`pipeline`]'s result, from the lock collection
/// `namespace`; `None` when it names no valid lock.
///
/// # Errors
/// [`Error::InvalidData`] when the row's fencing token or limit is not a
/// whole number (see `counter`): the document needs fixing by hand.
pub(crate) fn read(row: &Document, namespace: &Namespace) -> Result<Option<LockInfo>> {
    let Some(name) = row
        .get_str(ID)
        .ok()
        .and_then(|name| LockName::new(name).ok())
    else {
        return Ok(None);
    };
    let Ok(kind) = row.get_str(LOCK_ID) else {
        return Ok(None);
    };
    let bad = |bad: BadCounter| bad.into_error(describe(&name, namespace));
    let remaining = match row.get("remainingMs") {
        Some(Bson::Int64(ms)) => u64::try_from(*ms).unwrap_or(0),
        Some(Bson::Int32(ms)) => u64::try_from(*ms).unwrap_or(0),
        _ => 0,
    };
    let (kind, permits) = match kind {
        SHARED => (LockKind::Shared, None),
        PERMITS => (
            LockKind::Semaphore,
            Some(Permits {
                in_use: count(row, "inUse").map_err(bad)?,
                limit: count(row, LIMIT).map_err(bad)?,
            }),
        ),
        _ => (LockKind::Exclusive, None),
    };
    Ok(Some(LockInfo {
        fencing_token: read_token(row).map_err(bad)?,
        name,
        kind,
        permits,
        holder: read_holder(row),
        expires_in: Some(Duration::from_millis(remaining)),
        waiters: Waiters::Unknown,
    }))
}

fn count(row: &Document, key: &str) -> std::result::Result<u32, BadCounter> {
    Ok(counter::read(row, key)?
        .and_then(|count| u32::try_from(count).ok())
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> Namespace {
        Namespace::new("db", "locks")
    }

    #[test]
    fn rows_read_back_with_their_kind() {
        let row = doc! {
            ID: "n", LOCK_ID: PERMITS, LIMIT: 3_i64, "inUse": 2_i32,
            FENCING_TOKEN: 8_i64, "remainingMs": 1500_i64,
            HOLDER: { "host": "h", "pid": 1_i64, "label": Bson::Null },
        };
        let info = read(&row, &ns()).unwrap().unwrap();
        assert_eq!(info.kind, LockKind::Semaphore);
        assert_eq!(
            info.permits,
            Some(Permits {
                in_use: 2,
                limit: 3
            })
        );
        assert_eq!(info.fencing_token, Some(8));
        assert_eq!(info.expires_in, Some(Duration::from_millis(1500)));
        let reader = doc! { ID: "n", LOCK_ID: SHARED, "remainingMs": -4_i64 };
        let info = read(&reader, &ns()).unwrap().unwrap();
        assert_eq!((info.kind, info.permits), (LockKind::Shared, None));
        assert_eq!(info.expires_in, Some(Duration::ZERO));
        let writer = doc! { ID: "n", LOCK_ID: "0123456789abcdef0123456789abcdef" };
        assert_eq!(
            read(&writer, &ns()).unwrap().unwrap().kind,
            LockKind::Exclusive
        );
    }

    #[test]
    fn doubles_read_as_whole_numbers_and_fractions_are_errors() {
        let row = doc! {
            ID: "n", LOCK_ID: PERMITS, LIMIT: 3.0, "inUse": 1_i32, FENCING_TOKEN: 8.0,
        };
        let info = read(&row, &ns()).unwrap().unwrap();
        assert_eq!(info.fencing_token, Some(8));
        assert_eq!(info.permits.map(|permits| permits.limit), Some(3));
        let fraction = doc! { ID: "n", LOCK_ID: SHARED, FENCING_TOKEN: 8.5 };
        let error = read(&fraction, &ns()).unwrap_err().to_string();
        assert!(
            error.contains("fencingToken") && error.contains("db.locks"),
            "{error}"
        );
    }
}

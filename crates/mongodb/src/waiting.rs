//! Waiting writers' marks: while one lives, new readers wait, so that a
//! steady stream of readers cannot starve a writer.
//!
//! A mark is `{id, expiresAt}` in the document's `waiting` array. It lasts
//! one lease from the writer's latest attempt, by the server's clock, so a
//! writer that vanished holds readers back for one lease at most. Each
//! attempt of the same wait refreshes it; the writer's grant, or the end of
//! its wait, removes it.

use std::time::Duration;

use distlock_core::LockName;
use distlock_core::backend::LeaseId;
use mongodb::bson::{Bson, Document, doc};

use crate::document::{
    ENTRY_ID, FREED, ID, LOCK_ID, PERMITS, SHARED, WAITING, field, held_exclusively, live, lock_id,
    now_plus, or_remove,
};

/// The identity of one wait's mark, kept in its
/// [`WaitState`](distlock_core::backend::WaitState) across attempts (each attempt
/// has a lease identity of its own).
#[derive(Debug, Clone)]
pub(crate) struct WriterMark(String);

impl WriterMark {
    /// A fresh identity.
    pub(crate) fn new() -> Self {
        Self(lock_id(LeaseId::random()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the document `found` holds this mark.
    pub(crate) fn is_in(&self, found: &Document) -> bool {
        found.get_array(WAITING).is_ok_and(|marks| {
            marks.iter().any(|mark| {
                mark.as_document()
                    .and_then(|mark| mark.get_str(ENTRY_ID).ok())
                    == Some(self.as_str())
            })
        })
    }
}

/// The live marks other than `mark`.
pub(crate) fn others(mark: Option<&WriterMark>) -> Bson {
    match mark {
        None => live(WAITING).into(),
        Some(mark) => doc! {
            "$filter": {
                "input": live(WAITING),
                "as": "mark",
                "cond": { "$ne": ["$$mark.id", { "$literal": mark.as_str() }] },
            }
        }
        .into(),
    }
}

/// Whether a writer kept out of a held lock marks itself: where readers
/// hold it, or other marks live; never where permits hold it.
pub(crate) fn may_mark() -> Document {
    doc! {
        "$and": [
            { "$ne": [field(LOCK_ID), PERMITS] },
            { "$or": [
                { "$eq": [field(LOCK_ID), SHARED] },
                { "$gt": [{ "$size": live(WAITING) }, 0] },
            ] },
        ]
    }
}

/// The document with `mark` added or refreshed, to last `lease` from now.
pub(crate) fn with_mark(mark: &WriterMark, lease: Duration) -> Document {
    let entry = doc! { ENTRY_ID: { "$literal": mark.as_str() }, "expiresAt": now_plus(lease) };
    doc! {
        "$mergeObjects": [
            "$$ROOT",
            { WAITING: { "$concatArrays": [others(Some(mark)), [entry]] } },
        ]
    }
}

/// The filter for the document holding `mark`.
pub(crate) fn marked(name: &LockName, mark: &WriterMark) -> Document {
    doc! { ID: name.as_str(), format!("{WAITING}.{ENTRY_ID}"): mark.as_str() }
}

/// Removes `mark`. When no mark is left and no writer holds the name,
/// readers kept out by the marks may go now: the write says so in
/// `freed`, which wakes them in every process.
pub(crate) fn unmark(mark: &WriterMark) -> Vec<Document> {
    let readers_may_go = doc! {
        "$and": [
            { "$eq": [{ "$size": "$_marks" }, 0] },
            { "$not": [held_exclusively()] },
        ]
    };
    vec![
        doc! { "$set": { "_marks": others(Some(mark)) } },
        doc! { "$set": {
            WAITING: or_remove("$_marks"),
            FREED: { "$cond": [readers_may_go, { "$literal": mark.as_str() }, "$$REMOVE"] },
        } },
        doc! { "$unset": "_marks" },
    ]
}

/// When the first of the marks in `found` expires, in the server's
/// milliseconds since the epoch.
pub(crate) fn first_expiry(found: &Document) -> Option<i64> {
    found
        .get_array(WAITING)
        .ok()?
        .iter()
        .filter_map(|mark| mark.as_document()?.get_datetime("expiresAt").ok())
        .map(|at| at.timestamp_millis())
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_found_by_its_identity_only() {
        let mark = WriterMark::new();
        let other = WriterMark::new();
        let found = doc! { WAITING: [{ ENTRY_ID: other.as_str() }, { ENTRY_ID: mark.as_str() }] };
        assert!(mark.is_in(&found));
        assert!(!WriterMark::new().is_in(&found));
        assert!(!mark.is_in(&doc! {}));
        assert_eq!(mark.as_str().len(), 32);
    }

    #[test]
    fn the_mark_is_a_literal() {
        let mark = WriterMark::new();
        let pipeline = with_mark(&mark, Duration::from_secs(1));
        let text = format!("{pipeline}");
        assert!(
            text.contains(&format!("\"$literal\": \"{}\"", mark.as_str())),
            "{text}"
        );
    }
}

//! Fencing on the protected side: a write to a document of your own that
//! a stale lock holder cannot make.
//!
//! A lock's fencing token is only as good as the store that checks it.
//! [`Fence`] keeps the highest token that wrote to a document in one of
//! its fields, and turns a write into one conditional update: it applies
//! only when the writer's token is at least the one recorded, and records
//! the writer's. A holder that paused past its lease, and whose lock went
//! to someone who has written since, then matches no document.
//!
//! ```no_run
//! use distlock_mongodb::fencing::Fence;
//! use distlock_mongodb::mongodb::bson::{Document, doc};
//! # async fn example(
//! #     accounts: distlock_mongodb::mongodb::Collection<Document>,
//! #     guard: distlock_core::LockGuard,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! let fence = Fence::new("fencingToken")?;
//! let (filter, update) = fence.guard(
//!     doc! { "_id": 42 },
//!     doc! { "$inc": { "balance": -10 } },
//!     guard.fencing_token(),
//! )?;
//! let written = accounts.update_one(filter, update).await?;
//! if written.matched_count == 0 {
//!     // A holder with a newer token has written: this one is stale.
//! }
//! # Ok(())
//! # }
//! ```

use distlock_core::{Error, Result};
use mongodb::bson::{Bson, Document, doc};

/// The field a document keeps its highest writing token in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    field: String,
}

impl Fence {
    /// A fence kept in the document's `field` (a top-level field or a
    /// dotted path).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an empty field name, one that starts
    /// with `$`, has an empty path segment, or holds a NUL.
    pub fn new(field: impl Into<String>) -> Result<Self> {
        let field = field.into();
        let reason = if field.is_empty() {
            "must not be empty"
        } else if field.starts_with('$') {
            "must not start with `$`, which MongoDB reads as an operator"
        } else if field.split('.').any(str::is_empty) {
            "must not have an empty segment (`a..b`, or a dot at either end)"
        } else if field.contains('\0') {
            "must not hold a NUL"
        } else {
            return Ok(Self { field });
        };
        Err(Error::config("fence field", format!("`{field}` {reason}")))
    }

    /// The condition to add to a write's filter: the document records no
    /// token yet, or one at most `token`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a token above `i64::MAX`, which
    /// MongoDB cannot store as a number.
    pub fn filter(&self, token: u64) -> Result<Document> {
        let token = stored(token)?;
        Ok(doc! { "$or": [
            { &self.field: { "$lte": token } },
            { &self.field: { "$exists": false } },
        ] })
    }

    /// `filter` and `update` made into a fenced write by `token`: the
    /// filter also requires [`filter`](Self::filter)'s condition, and the
    /// update also records `token` (in its `$set`).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a token above `i64::MAX`, an update
    /// whose `$set` is not a document, or one that already sets the fence
    /// field.
    pub fn guard(
        &self,
        filter: Document,
        mut update: Document,
        token: u64,
    ) -> Result<(Document, Document)> {
        let guarded = doc! { "$and": [filter, self.filter(token)?] };
        let set = update
            .entry("$set".to_owned())
            .or_insert_with(|| Bson::Document(Document::new()));
        let Bson::Document(set) = set else {
            return Err(Error::config("update", "its `$set` must be a document"));
        };
        if set.contains_key(&self.field) {
            return Err(Error::config(
                "update",
                format!(
                    "it sets the fence field `{}` itself; leave it to the fence",
                    self.field
                ),
            ));
        }
        set.insert(self.field.clone(), stored(token)?);
        Ok((guarded, update))
    }
}

/// `token` as MongoDB stores numbers.
fn stored(token: u64) -> Result<i64> {
    i64::try_from(token).map_err(|_| {
        Error::config(
            "fencing token",
            format!("{token} is above the largest number MongoDB stores (2^63 - 1)"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_mongodb_would_misread_is_refused() {
        for field in ["", "$where", "a..b", ".a", "a.", "nul\0"] {
            assert!(Fence::new(field).is_err(), "{field:?}");
        }
        assert!(Fence::new("meta.fencingToken").is_ok());
    }

    #[test]
    fn the_guard_adds_the_condition_and_records_the_token() {
        let fence = Fence::new("fence").unwrap();
        let (filter, update) = fence
            .guard(
                doc! { "_id": 1 },
                doc! { "$set": { "v": 2 }, "$inc": { "n": 1 } },
                7,
            )
            .unwrap();
        assert_eq!(
            filter,
            doc! { "$and": [
                { "_id": 1 },
                { "$or": [{ "fence": { "$lte": 7_i64 } }, { "fence": { "$exists": false } }] },
            ] }
        );
        assert_eq!(
            update,
            doc! { "$set": { "v": 2, "fence": 7_i64 }, "$inc": { "n": 1 } }
        );
        assert!(
            fence
                .guard(doc! {}, doc! { "$set": { "fence": 1 } }, 7)
                .is_err()
        );
        assert!(fence.guard(doc! {}, doc! { "$set": 1 }, 7).is_err());
        assert!(fence.filter(u64::MAX).is_err());
    }
}

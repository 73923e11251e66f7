//! Fencing on the protected side: a write to a table of your own that a
//! stale lock holder cannot make.
//!
//! A lock's fencing token is only as good as the store that checks it.
//! [`Fence`] names a `bigint` column in which each row keeps the highest
//! token that wrote to it, and gives the two pieces of one guarded
//! `UPDATE`: the assignment that records the writer's token, and the
//! condition that lets the write through only when that token is at least
//! the one recorded. A holder that paused past its lease, and whose lock
//! went to someone who has written since, then updates no row.
//!
//! ```no_run
//! use distlock_postgres::fencing::Fence;
//! # async fn example(
//! #     db: &distlock_postgres::tokio_postgres::Client,
//! #     guard: &distlock_core::LockGuard,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! let fence = Fence::new("fencing_token")?;
//! let sql = format!(
//!     "UPDATE accounts SET balance = balance - $1, {} WHERE id = $2 AND {}",
//!     fence.assignment(3),
//!     fence.condition(3),
//! );
//! let token = Fence::token(guard.fencing_token())?;
//! let updated = db.execute(&sql, &[&10_i64, &42_i64, &token]).await?;
//! if updated == 0 {
//!     // A holder with a newer token has written: this one is stale.
//! }
//! # Ok(())
//! # }
//! ```

use distlock_core::{Error, Result};

/// A `bigint` column that keeps, in each row, the highest token that wrote
/// to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The column's name, quoted as an identifier.
    quoted: String,
}

impl Fence {
    /// A fence kept in `column` (its name as written in `CREATE TABLE`,
    /// before any quoting: it is quoted here, so any name is safe).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an empty name or one with a NUL.
    pub fn new(column: &str) -> Result<Self> {
        if column.is_empty() || column.contains('\0') {
            return Err(Error::config(
                "fence column",
                "a column name must not be empty or hold a NUL",
            ));
        }
        Ok(Self {
            quoted: format!("\"{}\"", column.replace('"', "\"\"")),
        })
    }

    /// `"column" = $param`: records the writer's token, given as the
    /// statement's parameter number `param` (a `bigint`).
    pub fn assignment(&self, param: usize) -> String {
        format!("{} = ${param}", self.quoted)
    }

    /// `("column" IS NULL OR "column" <= $param)`: the row records no token
    /// yet, or one at most the writer's.
    pub fn condition(&self, param: usize) -> String {
        format!("({0} IS NULL OR {0} <= ${param})", self.quoted)
    }

    /// `token` as the `bigint` the statement takes.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a token above `i64::MAX`.
    pub fn token(token: u64) -> Result<i64> {
        i64::try_from(token).map_err(|_| {
            Error::config(
                "fencing token",
                format!("{token} is above the largest bigint (2^63 - 1)"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_column_is_quoted_whatever_its_name() {
        let fence = Fence::new(r#"odd "name"; DROP TABLE x"#).unwrap();
        assert_eq!(fence.assignment(3), r#""odd ""name""; DROP TABLE x" = $3"#);
        assert_eq!(
            Fence::new("fence").unwrap().condition(2),
            r#"("fence" IS NULL OR "fence" <= $2)"#
        );
        assert!(Fence::new("").is_err());
        assert!(Fence::token(u64::MAX).is_err());
    }
}

//! What a request claims on a name: the whole lock, a reader's share of it,
//! or one permit of a counted semaphore.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The most permits a semaphore may have. Backends that keep one key or file
/// per permit (memcached, the file backend) look at each of them in turn.
pub const MAX_PERMITS: u32 = 1000;

/// What a request asks for on its name.
///
/// [`Exclusive`](Self::Exclusive) and [`Shared`](Self::Shared) on the same
/// name form a reader-writer lock: any number of readers, or one writer.
/// [`Permit`](Self::Permit) is one of `limit` permits of a counted semaphore.
/// A name is either a lock or a semaphore: a backend answers a request of
/// the other sort, or one whose limit differs from its holders', with
/// [`Error::KindConflict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Claim {
    /// The whole lock; for a reader-writer lock, the writer's side.
    Exclusive,
    /// A reader's share: held with other readers, never with a writer.
    Shared,
    /// One permit of a semaphore of `limit` permits.
    Permit {
        /// How many holders the semaphore admits at once, from 1 to
        /// [`MAX_PERMITS`].
        limit: u32,
    },
}

impl Claim {
    /// One permit of a semaphore of `limit` permits.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `limit` is 0 or above [`MAX_PERMITS`].
    pub fn permit(limit: u32) -> Result<Self> {
        Self::Permit { limit }.validated()
    }

    /// This claim, checked: a permit's limit must be from 1 to
    /// [`MAX_PERMITS`].
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the limit.
    pub fn validated(self) -> Result<Self> {
        match self {
            Self::Permit { limit } if limit == 0 || limit > MAX_PERMITS => Err(Error::config(
                "permits",
                format!("a semaphore needs from 1 to {MAX_PERMITS} permits, not {limit}"),
            )),
            claim => Ok(claim),
        }
    }

    /// The kind of lock this claim takes part in.
    pub fn kind(self) -> LockKind {
        match self {
            Self::Exclusive => LockKind::Exclusive,
            Self::Shared => LockKind::Shared,
            Self::Permit { .. } => LockKind::Semaphore,
        }
    }

    /// The semaphore's limit, for a permit.
    pub fn limit(self) -> Option<u32> {
        match self {
            Self::Permit { limit } => Some(limit),
            _ => None,
        }
    }

    /// Whether a holder of `self` and a holder of `other` may share one
    /// name's kind: readers and writers may, a semaphore only with
    /// permits of the same limit. Whether they may hold it *at once* is a
    /// separate question (a writer excludes everyone).
    pub fn same_family(self, other: Claim) -> bool {
        match (self, other) {
            (Self::Permit { limit: a }, Self::Permit { limit: b }) => a == b,
            (Self::Permit { .. }, _) | (_, Self::Permit { .. }) => false,
            _ => true,
        }
    }

    /// The [`Error::KindConflict`] for asking for `self` on `name`, which
    /// is held as `held`.
    pub fn conflict(self, name: &crate::LockName, held: Claim) -> Error {
        Error::KindConflict {
            name: name.to_string(),
            held,
            requested: self,
        }
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exclusive => f.write_str("an exclusive lock"),
            Self::Shared => f.write_str("a shared (reader) lock"),
            Self::Permit { limit: 1 } => f.write_str("a semaphore of 1 permit"),
            Self::Permit { limit } => write!(f, "a semaphore of {limit} permits"),
        }
    }
}

/// The kind of one holder, as [`Backend::list`](crate::backend::Backend::list)
/// shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockKind {
    /// An exclusive lock, or the writer of a reader-writer lock.
    Exclusive,
    /// A reader of a reader-writer lock.
    Shared,
    /// A permit of a semaphore.
    Semaphore,
}

impl LockKind {
    /// The kind in lower case, as `distlock list` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Shared => "shared",
            Self::Semaphore => "semaphore",
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A semaphore's permits in use, out of its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permits {
    /// How many permits are held now.
    pub in_use: u32,
    /// How many the semaphore admits at once.
    pub limit: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_limits_are_checked() {
        assert!(Claim::permit(0).is_err());
        assert!(Claim::permit(MAX_PERMITS + 1).is_err());
        assert_eq!(Claim::permit(3).unwrap(), Claim::Permit { limit: 3 });
        let message = Claim::permit(0).unwrap_err().to_string();
        assert!(
            message.contains("permits") && message.contains("1000"),
            "{message}"
        );
    }

    #[test]
    fn readers_and_writers_share_a_family_and_semaphores_do_not() {
        assert!(Claim::Shared.same_family(Claim::Exclusive));
        assert!(!Claim::Shared.same_family(Claim::Permit { limit: 2 }));
        assert!(!Claim::Permit { limit: 2 }.same_family(Claim::Permit { limit: 3 }));
        assert!(Claim::Permit { limit: 2 }.same_family(Claim::Permit { limit: 2 }));
    }
}

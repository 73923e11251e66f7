//! The one error type of distlock.

use std::time::Duration;

/// Errors from acquiring, extending and releasing locks, and from building
/// clients and backends.
///
/// Losing a race is not an error: [`try_acquire`](crate::LockClient::try_acquire)
/// returns `Ok(None)` when the lock is held elsewhere.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock could not be acquired before the deadline: it was held, or
    /// the backend kept failing with transient errors (the last of which is
    /// kept), or both.
    #[error("timed out after {waited:?} waiting for lock {name}")]
    Timeout {
        /// The lock that was waited for, as shown to people.
        name: String,
        /// How long the caller waited.
        waited: Duration,
        /// The last transient error of the wait's attempts, if the last
        /// attempt failed with one. It is this error's
        /// [`source`](std::error::Error::source), not part of its message.
        #[source]
        last_error: Option<Box<Error>>,
    },
    /// A single call to the backend did not answer within the operation
    /// timeout (see
    /// [`LockOptions::operation_timeout`](crate::LockOptions::operation_timeout)).
    /// Transient: the store may be slow, failing over or out of reach.
    #[error("{operation} did not answer within {after:?}")]
    OperationTimeout {
        /// The call that did not answer: `"acquire"`, `"extend"`,
        /// `"release"`, `"list"`, …
        operation: &'static str,
        /// How long it was given.
        after: Duration,
    },
    /// The caller cancelled the wait (see
    /// [`AcquireOptions::cancel_on`](crate::AcquireOptions::cancel_on));
    /// nothing is held.
    #[error("cancelled after {waited:?} waiting for lock {name}")]
    Cancelled {
        /// The lock that was waited for, as shown to people.
        name: String,
        /// How long the caller waited, including the attempt that was in
        /// flight when the wait was cancelled.
        waited: Duration,
    },
    /// The lease is no longer ours: an extension was refused, or none
    /// succeeded in time.
    #[error("lost the lock {name}")]
    Lost {
        /// The lock that was lost, as shown to people.
        name: String,
    },
    /// A lock name was rejected.
    #[error("invalid lock name: {reason}")]
    InvalidName {
        /// What is wrong with it.
        reason: String,
    },
    /// An option or a URL was rejected.
    #[error("invalid configuration: {field}: {reason}")]
    InvalidConfig {
        /// The option or URL part at fault.
        field: String,
        /// What is wrong with it and how to fix it.
        reason: String,
    },
    /// What was asked for does not exist: for example the entity that an
    /// entity lock was asked to lock.
    #[error("{what} not found")]
    NotFound {
        /// What was looked for, as shown to people.
        what: String,
    },
    /// Stored data, or a value to be stored, does not have the expected
    /// shape: for example a document that cannot be read as the caller's
    /// type.
    #[error("{what}: field `{field}`: {reason}")]
    InvalidData {
        /// Whose data, as shown to people.
        what: String,
        /// The path of the field at fault (`.` for the value as a whole).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The name is held as another kind of lock than was asked for: a
    /// semaphore asked for as a lock, or the other way round, or a
    /// semaphore asked for with another limit than its holders'.
    #[error("lock {name} is held as {held}; it cannot be taken as {requested}")]
    KindConflict {
        /// The lock, as shown to people.
        name: String,
        /// What its holders hold.
        held: crate::Claim,
        /// What was asked for.
        requested: crate::Claim,
    },
    /// The backend cannot do what was asked.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// An [`Observer`](crate::Observer) fell so far behind an election that
    /// its backend no longer keeps the terms it missed: each backend keeps
    /// the last [`TERMS_KEPT`](crate::backend::TERMS_KEPT). The observer goes on
    /// with the terms after them; look at it more often to miss none.
    #[error(
        "missed the terms of election {name} after term {after} and before term {before}: \
         the backend keeps only the last {kept} terms, and the observer looked too seldom"
    )]
    TermsForgotten {
        /// The election's name, as shown to people.
        name: String,
        /// The last term the observer returned.
        after: u64,
        /// The first term the backend still keeps, which comes next.
        before: u64,
        /// How many terms the backend keeps.
        kept: usize,
    },
    /// The backend refused us: bad credentials, or missing permissions.
    /// Retrying does not help until the configuration is fixed.
    #[error("{backend} backend refused: {message}")]
    Denied {
        /// Which backend refused (`"mongodb"`, `"file"`, …).
        backend: &'static str,
        /// What was refused, in words that never include credentials.
        message: String,
        /// The driver's own error, if any, reachable by downcast.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The backend failed, or could not be reached.
    #[error("{backend} backend: {message}")]
    Backend {
        /// Which backend failed (`"mongodb"`, `"file"`, …).
        backend: &'static str,
        /// What failed, in words that never include credentials.
        message: String,
        /// The driver's own error, if any, reachable by downcast.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl Error {
    /// A call to the store that did not answer within `after`.
    pub(crate) fn operation_timeout(operation: &'static str, after: Duration) -> Self {
        Self::OperationTimeout { operation, after }
    }

    /// An [`Error::InvalidConfig`] for `field`.
    pub fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidConfig {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// An [`Error::Backend`] that keeps `source`.
    pub fn backend(
        backend: &'static str,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Backend {
            backend,
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// An [`Error::Denied`] that keeps `source`.
    pub fn denied(
        backend: &'static str,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Denied {
            backend,
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// Whether retrying the same call later may succeed: true for
    /// [`Error::Backend`] (a store that is unreachable, slow, failing over,
    /// or answered in a way the backend did not expect),
    /// [`Error::OperationTimeout`] and [`Error::Timeout`]; false for everything that stays wrong until
    /// someone changes something: [`Error::Denied`] (credentials,
    /// permissions), [`Error::InvalidData`] (corrupt stored data),
    /// [`Error::InvalidConfig`], [`Error::InvalidName`],
    /// [`Error::KindConflict`], [`Error::NotFound`], [`Error::Unsupported`],
    /// [`Error::TermsForgotten`] (the observer goes on past them),
    /// and the ends of a wait or a lease ([`Error::Cancelled`],
    /// [`Error::Lost`]).
    ///
    /// [`LockClient::acquire`](crate::LockClient::acquire) retries
    /// transient errors until its deadline, and ends at once on any other.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Backend { .. } | Self::OperationTimeout { .. } | Self::Timeout { .. }
        )
    }
}

/// `Result` with distlock's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

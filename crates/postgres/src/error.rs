//! The driver's and the pool's errors as distlock's.

use distlock_core::Error;
use tokio_postgres::error::SqlState;

/// `error` from `what`: refused credentials, a missing database and missing
/// privileges are [`Error::Denied`], which retrying cannot fix; everything
/// else (a refused or dropped connection, a terminated backend, a
/// deadlock, PgBouncer's own refusals) may pass and is a transient
/// [`Error::Backend`]. The driver's messages name the user at most, never
/// the password, which it never sees in text form.
pub(crate) fn from_driver(what: &str, error: tokio_postgres::Error) -> Error {
    if let Some(db) = error.as_db_error() {
        let code = db.code();
        if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
            || *code == SqlState::INSUFFICIENT_PRIVILEGE
            || *code == SqlState::INVALID_CATALOG_NAME
        {
            let message = format!("{what}: {}", db.message());
            return Error::denied("postgres", message, error);
        }
    }
    Error::backend("postgres", format!("{what}: {error}"), error)
}

/// The pool's `error` from `what`.
pub(crate) fn from_pool(what: &str, error: deadpool_postgres::PoolError) -> Error {
    match error {
        deadpool_postgres::PoolError::Backend(error) => from_driver(what, error),
        other => Error::backend("postgres", format!("{what}: {other}"), other),
    }
}

/// A copy of `error` for each of several outcomes that share it (the
/// leases of one bulk extension): its kind and message, without its source.
pub(crate) fn copy(error: &Error) -> Error {
    match error {
        Error::Denied {
            backend, message, ..
        } => Error::Denied {
            backend,
            message: message.clone(),
            source: None,
        },
        other => Error::Backend {
            backend: "postgres",
            message: other.to_string(),
            source: None,
        },
    }
}

//! The driver's and the pool's errors as distlock's.

use std::future::Future;
use std::time::Duration;

use distlock_core::{Error, Result};
use tokio_postgres::error::SqlState;

/// `error` from `what`: refused credentials, a missing database and missing
/// privileges are [`Error::Denied`], which retrying cannot fix; everything
/// else (a refused or dropped connection, a failed TLS handshake, a
/// terminated backend, a deadlock, PgBouncer's own refusals) may pass and
/// is a transient [`Error::Backend`], whose message gives the driver's
/// causes too. The driver's messages name the user at most, never the
/// password, which it never sees in text form.
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
    Error::backend("postgres", format!("{what}: {}", describe(&error)), error)
}

/// `error` in words: the driver's message, which names only the kind of
/// failure, followed by its causes; and, when TLS failed, what to change.
pub(crate) fn describe(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let said = cause.to_string();
        if !said.is_empty() && !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    if let Some(hint) = tls_hint(error) {
        text.push_str("; ");
        text.push_str(hint);
    }
    text
}

/// What to change when `error` is a TLS handshake that failed, as far as
/// its cause tells.
fn tls_hint(error: &tokio_postgres::Error) -> Option<&'static str> {
    use rustls::CertificateError as Certificate;
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.to_string() == "server does not support TLS" {
            return Some(
                "the server does not offer TLS, which sslmode=require, verify-ca and \
                 verify-full need: turn ssl on at the server, or use sslmode=prefer",
            );
        }
        let tls = cause.downcast_ref::<rustls::Error>().or_else(|| {
            cause
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::InvalidCertificate(problem)) = tls {
            return Some(match problem {
                Certificate::UnknownIssuer | Certificate::BadSignature => {
                    "the server's certificate is not signed by a CA in sslrootcert, or by a \
                     public CA when sslrootcert is not given: point sslrootcert at the PEM \
                     certificate of the CA that signed it"
                }
                Certificate::NotValidForName | Certificate::NotValidForNameContext { .. } => {
                    "the server's certificate is not issued for the host name in the URL: \
                     connect with a host name the certificate lists, or use sslmode=verify-ca \
                     to check only the CA that signed it"
                }
                Certificate::Expired
                | Certificate::ExpiredContext { .. }
                | Certificate::NotValidYet
                | Certificate::NotValidYetContext { .. } => {
                    "the server's certificate is outside its validity period: renew it, or \
                     check this machine's clock"
                }
                _ => "the server's certificate failed the checks sslmode asks for",
            });
        }
        source = cause.source();
    }
    None
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

/// Whether `error` is the server refusing a commit because its
/// notification queue is full (SQLSTATE 54000, program limit exceeded,
/// which that refusal is the only one a freeing statement can meet).
pub(crate) fn notification_queue_full(error: &distlock_core::Error) -> bool {
    let source = std::error::Error::source(error);
    source
        .and_then(|source| source.downcast_ref::<tokio_postgres::Error>())
        .and_then(tokio_postgres::Error::code)
        == Some(&SqlState::PROGRAM_LIMIT_EXCEEDED)
}
/// The output of `future`, or a backend error saying that `what` had no
/// answer within `timeout`.
///
/// # Errors
/// A backend error when `timeout` passes first.
///
/// # Cancel safety
/// As `future`'s.
pub(crate) async fn within<T>(
    what: &str,
    timeout: Duration,
    future: impl Future<Output = T>,
) -> Result<T> {
    tokio::time::timeout(timeout, future)
        .await
        .map_err(|_| Error::Backend {
            backend: "postgres",
            message: format!("{what}: no answer within {timeout:?}"),
            source: None,
        })
}

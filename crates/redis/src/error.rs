//! Redis's errors as distlock's.

use std::time::Duration;

use distlock_core::Error;
use redis::{ErrorKind, RedisError};

/// `error` from `what`, as distlock's error. Refused credentials and
/// permissions are [`Error::Denied`]; everything else may pass (a server
/// restarting, failing over, out of memory) and is a transient
/// [`Error::Backend`] whose message says what the server answered.
pub(crate) fn from_redis(what: &str, error: RedisError) -> Error {
    let code = error.code().unwrap_or_default().to_owned();
    let why = match (error.kind(), code.as_str()) {
        (ErrorKind::AuthenticationFailed, _) | (_, "WRONGPASS" | "NOAUTH") => {
            return Error::denied(
                "redis",
                format!("{what}: the server refused the URL's user or password"),
                error,
            );
        }
        (_, "NOPERM") => {
            return Error::denied(
                "redis",
                format!(
                    "{what}: the server's ACL does not let this user run the backend's commands \
                     (it needs EVALSHA, SCRIPT LOAD, SCAN, PUBLISH, SUBSCRIBE and the keys under \
                     its prefix)"
                ),
                error,
            );
        }
        (ErrorKind::ReadOnly, _) => "the server is a read-only replica (READONLY): point the URL \
             at the primary; during a failover this passes once a replica is promoted"
            .to_owned(),
        (_, "OOM") => "the server is out of memory (OOM: maxmemory reached under a noeviction \
             policy), so it takes no new grant; give it memory, or locks a server of their own"
            .to_owned(),
        (ErrorKind::NoScriptError, _) => "the server forgot the script again right after it was \
             loaded (NOSCRIPT): something is flushing its scripts (SCRIPT FLUSH)"
            .to_owned(),
        (ErrorKind::BusyLoadingError, _) => {
            "the server is loading its data after a restart (LOADING)".to_owned()
        }
        (ErrorKind::ParseError, _) => {
            "the server's answer is not the Redis protocol: is the URL's \
             port a Redis server's?"
                .to_owned()
        }
        _ => error.to_string(),
    };
    Error::backend("redis", format!("{what}: {why}"), error)
}

/// A reply of an unexpected shape.
pub(crate) fn unexpected(what: &str, reply: &redis::Value) -> Error {
    Error::Backend {
        backend: "redis",
        message: format!("{what}: unexpected reply {reply:?}; is this a Redis server?"),
        source: None,
    }
}

/// The error for a call that did not answer within `after`.
pub(crate) fn timed_out(operation: &'static str, after: Duration) -> Error {
    Error::OperationTimeout { operation, after }
}

/// A copy of `error` for each lease of a batch that failed as one.
pub(crate) fn copy(error: &Error) -> Error {
    match error {
        Error::OperationTimeout { operation, after } => Error::OperationTimeout {
            operation,
            after: *after,
        },
        Error::Denied {
            backend, message, ..
        } => Error::Denied {
            backend,
            message: message.clone(),
            source: None,
        },
        Error::Backend {
            backend, message, ..
        } => Error::Backend {
            backend,
            message: message.clone(),
            source: None,
        },
        other => Error::Backend {
            backend: "redis",
            message: other.to_string(),
            source: None,
        },
    }
}

//! Turning driver errors into distlock's errors.

use distlock_core::Error;
use mongodb::error::{ErrorKind, WriteFailure};

/// The backend's name in errors.
pub(crate) const BACKEND: &str = "mongodb";

/// MongoDB's duplicate key error.
const DUPLICATE_KEY: i32 = 11000;
/// The server's code for a collection that does not exist.
pub(crate) const NAMESPACE_NOT_FOUND: i32 = 26;
/// The server's codes for an index that exists under the same keys or name
/// with other options.
pub(crate) const INDEX_OPTIONS_CONFLICT: i32 = 85;
pub(crate) const INDEX_KEY_SPECS_CONFLICT: i32 = 86;

/// The server's codes for a user it does not know or may not act: retrying
/// will not help until someone changes the credentials or the roles.
const UNAUTHORIZED: i32 = 13;
const AUTHENTICATION_FAILED: i32 = 18;

/// A backend error for `what` that keeps the driver's error as its source.
///
/// Driver errors name hosts and server replies, never the password of the
/// URL: the driver keeps credentials out of its messages and its `Debug`.
pub(crate) fn driver(what: &str, error: mongodb::error::Error) -> Error {
    let message = format!("{what}: {}", summary(&error));
    if is_denial(&error) {
        return Error::denied(BACKEND, message, error);
    }
    Error::backend(BACKEND, message, error)
}

/// Whether `error` is the server refusing our credentials or our rights.
fn is_denial(error: &mongodb::error::Error) -> bool {
    let code = match error.kind.as_ref() {
        ErrorKind::Authentication { .. } => return true,
        ErrorKind::Command(command) => command.code,
        ErrorKind::Write(WriteFailure::WriteError(write)) => write.code,
        _ => return false,
    };
    matches!(code, UNAUTHORIZED | AUTHENTICATION_FAILED)
}

/// A short description of a driver error: its kind, without the full
/// server reply the driver's own `Display` adds.
fn summary(error: &mongodb::error::Error) -> String {
    match error.kind.as_ref() {
        ErrorKind::Command(command) => format!(
            "command failed with code {} ({}): {}",
            command.code, command.code_name, command.message
        ),
        ErrorKind::Write(WriteFailure::WriteError(write)) => {
            format!("write failed with code {}: {}", write.code, write.message)
        }
        ErrorKind::Write(WriteFailure::WriteConcernError(concern)) => format!(
            "write concern failed with code {} ({}): {}",
            concern.code, concern.code_name, concern.message
        ),
        other => other.to_string(),
    }
}

/// Whether `error` is a duplicate key error: two first upserts of one name
/// raced and the other one inserted the document.
pub(crate) fn is_duplicate_key(error: &mongodb::error::Error) -> bool {
    match error.kind.as_ref() {
        ErrorKind::Command(command) => command.code == DUPLICATE_KEY,
        ErrorKind::Write(WriteFailure::WriteError(write)) => write.code == DUPLICATE_KEY,
        _ => false,
    }
}

/// The server's error code, if the error came from the server.
pub(crate) fn code(error: &mongodb::error::Error) -> Option<i32> {
    match error.kind.as_ref() {
        ErrorKind::Command(command) => Some(command.code),
        ErrorKind::Write(WriteFailure::WriteError(write)) => Some(write.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(concern)) => Some(concern.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{doc, from_document};
    use mongodb::error::CommandError;

    fn command_error(code: i32) -> mongodb::error::Error {
        let command: CommandError = from_document(doc! {
            "code": code,
            "codeName": "DuplicateKey",
            "errmsg": "E11000 duplicate key error collection: db.locks index: _id_",
        })
        .unwrap();
        mongodb::error::Error::from(ErrorKind::Command(command))
    }

    #[test]
    fn duplicate_keys_are_recognised() {
        assert!(is_duplicate_key(&command_error(11000)));
        assert!(!is_duplicate_key(&command_error(11001)));
        assert_eq!(code(&command_error(11000)), Some(11000));
    }

    #[test]
    fn messages_name_the_code() {
        let error = driver("acquiring x", command_error(11000));
        assert!(error.to_string().contains("11000"), "{error}");
    }
}

//! etcd's errors as distlock's.

use distlock_core::Error;

use crate::raw;

/// `error` from `what`, as distlock's error: refused credentials or
/// permissions are [`Error::Denied`]; everything else may pass (an
/// unreachable member, an election) and is a transient [`Error::Backend`].
pub(crate) fn from_etcd(what: &str, error: raw::Error) -> Error {
    if let Some(status) = error.status()
        && matches!(
            status.code(),
            tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
        )
    {
        return Error::denied("etcd", format!("{what}: {}", status.message()), error);
    }
    Error::backend("etcd", format!("{what}: {error}"), error)
}

/// Whether etcd refused a write because its lease is gone.
pub(crate) fn is_lease_not_found(error: &Error) -> bool {
    matches!(error, Error::Backend { message, .. } if message.contains("requested lease not found"))
}

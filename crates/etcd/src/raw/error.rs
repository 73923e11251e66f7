//! What a call to etcd fails with.

use std::fmt;

/// A call to etcd that failed, or a client that could not be set up.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The call ended with this gRPC status: etcd's answer, or the
    /// transport's when no member could be reached.
    Status(tonic::Status),
    /// The options cannot make a client: no endpoint, an endpoint that is
    /// not a URL, or TLS settings the transport refused.
    Setup {
        /// What was wrong, and how to fix it.
        message: String,
        /// The underlying error, when there is one.
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// etcd gave something the client cannot use: a stream that ended
    /// before its first answer, or a token that is no header value.
    Protocol(&'static str),
}

impl Error {
    /// The gRPC status the call ended with, if it ended with one.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            Self::Status(status) => Some(status),
            _ => None,
        }
    }

    pub(crate) fn setup(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Setup {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        Self::Status(status)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The code's name and etcd's message; never the metadata,
            // which the status's own Display would print.
            Self::Status(status) => write!(f, "{:?}: {}", status.code(), status.message()),
            Self::Setup { message, .. } => f.write_str(message),
            Self::Protocol(what) => write!(f, "etcd protocol: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Below a status is the transport's error, if any.
            Self::Status(status) => std::error::Error::source(status),
            Self::Setup { source, .. } => source.as_deref().map(|e| e as _),
            Self::Protocol(_) => None,
        }
    }
}

//! The three requests the backend makes of a store (read an object, create
//! it, replace a version of it), and what their errors mean for a lock.
//!
//! Every write is conditional. A write that fails its precondition, and a
//! `409 Conflict` (S3 answers it to `If-Match` writes that race), are both
//! [`Written::Conflict`]: someone else wrote first, or this very write
//! landed and its answer was lost and the HTTP client sent it again. A
//! write with no answer at all (a reset connection, a timeout) is
//! [`Written::Unsure`]. The caller tells these apart by reading the object
//! back.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    Error as StoreError, GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
    UpdateVersion,
};
use tokio::time::Instant;

use distlock_core::{Error, Result};

use crate::record::Record;

/// The backend's name in errors and metrics.
pub(crate) const BACKEND: &str = "objectstore";

/// An object as read.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) record: Record,
    /// The version read, to replace it.
    pub(crate) version: UpdateVersion,
    /// When the answer came back, on this process's monotonic clock.
    pub(crate) read_at: Instant,
    /// When the store wrote this version, by the store's clock.
    pub(crate) modified: SystemTime,
}

impl Found {
    /// The version's ETag, which identifies it in every store.
    pub(crate) fn etag(&self) -> &str {
        self.version.e_tag.as_deref().unwrap_or_default()
    }
}

/// What a conditional write did.
#[derive(Debug)]
pub(crate) enum Written {
    /// It was stored; this is the new version, when the store said it.
    Stored(Option<UpdateVersion>),
    /// The precondition failed (or S3 answered 409): the object is not as
    /// the write expected, perhaps because this write landed already.
    Conflict,
    /// No answer came that says what happened (a connection reset, a
    /// timeout, a server error past the client's retries): the write may
    /// have landed. This is the error, for when reading back fails too.
    Unsure(Error),
}

impl Written {
    /// What the write did, or its error when that is not known: for
    /// callers that cannot settle it by reading back (the probe).
    ///
    /// # Errors
    /// The write's error, when its answer was lost.
    pub(crate) fn known(self) -> Result<Self> {
        match self {
            Written::Unsure(error) => Err(error),
            known => Ok(known),
        }
    }
}

/// A store, as the backend uses it.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    inner: Arc<dyn ObjectStore>,
}

impl Store {
    pub(crate) fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self { inner }
    }

    pub(crate) fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// Reads the object at `key`: `None` when there is none.
    ///
    /// # Errors
    /// A backend error when the store fails; [`Error::InvalidData`] when the
    /// object is not a lock record, or has no ETag.
    pub(crate) async fn read(&self, key: &Path) -> Result<Option<Found>> {
        let result = match self.inner.get_opts(key, GetOptions::default()).await {
            Ok(result) => result,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(failed("read", key, error)),
        };
        let meta = result.meta.clone();
        let body = result
            .bytes()
            .await
            .map_err(|error| failed("read", key, error))?;
        let read_at = Instant::now();
        let record = Record::decode(key.as_ref(), &body)?;
        if meta.e_tag.is_none() {
            return Err(Error::InvalidData {
                what: format!("lock object {key}"),
                field: "ETag".into(),
                reason: "the store answered without an ETag, which conditional writes need".into(),
            });
        }
        Ok(Some(Found {
            record,
            version: UpdateVersion {
                e_tag: meta.e_tag,
                version: meta.version,
            },
            read_at,
            modified: SystemTime::from(meta.last_modified),
        }))
    }

    /// Creates the object at `key` with `record`, if there is none.
    ///
    /// # Errors
    /// As [`replace`](Self::replace).
    pub(crate) async fn create(&self, key: &Path, record: &Record) -> Result<Written> {
        self.put(key, record, PutMode::Create).await
    }

    /// Replaces `version` of the object at `key` with `record`, if it is
    /// still that version.
    ///
    /// # Errors
    /// [`Error::Denied`] when the store refuses the credentials;
    /// [`Error::Unsupported`] when it has no conditional writes.
    pub(crate) async fn replace(
        &self,
        key: &Path,
        record: &Record,
        version: &UpdateVersion,
    ) -> Result<Written> {
        self.put(key, record, PutMode::Update(version.clone()))
            .await
    }

    async fn put(&self, key: &Path, record: &Record, mode: PutMode) -> Result<Written> {
        let payload = PutPayload::from(Bytes::from(record.encode()));
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        match self.inner.put_opts(key, payload, options).await {
            Ok(put) => Ok(Written::Stored(
                (put.e_tag.is_some() || put.version.is_some()).then(|| UpdateVersion::from(put)),
            )),
            // object_store reports 412 as `Precondition` (and, for a create,
            // as `AlreadyExists`), and a 409 that its own retries did not
            // get past as `AlreadyExists`.
            Err(
                StoreError::Precondition { .. }
                | StoreError::AlreadyExists { .. }
                | StoreError::NotModified { .. },
            ) => Ok(Written::Conflict),
            Err(error) => match failed("write", key, error) {
                error @ Error::Backend { .. } => Ok(Written::Unsure(error)),
                error => Err(error),
            },
        }
    }

    /// Deletes the object at `key`, if there is one.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub(crate) async fn delete(&self, key: &Path) -> Result<()> {
        match self.inner.delete(key).await {
            Ok(()) | Err(StoreError::NotFound { .. }) => Ok(()),
            Err(error) => Err(failed("delete", key, error)),
        }
    }
}

/// distlock's error for a request the store failed. Never shows
/// credentials: object_store's errors name the store, the path and the
/// status, never a key or a token.
pub(crate) fn failed(what: &str, key: &Path, error: StoreError) -> Error {
    let message = format!("{what} of {key} failed: {error}");
    match error {
        StoreError::PermissionDenied { .. } | StoreError::Unauthenticated { .. } => {
            Error::denied(BACKEND, message, error)
        }
        StoreError::NotImplemented { .. } | StoreError::NotSupported { .. } => Error::Unsupported(
            format!("{message}; the store needs conditional writes (If-None-Match and If-Match)"),
        ),
        _ => Error::backend(BACKEND, message, error),
    }
}

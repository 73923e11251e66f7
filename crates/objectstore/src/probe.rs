//! The probe of a store's conditional writes, made when the backend opens
//! and by `distlock check`.
//!
//! Some S3-compatible stores accept `If-None-Match` and `If-Match` and
//! overwrite anyway. On such a store every lock could be taken twice, so
//! the backend refuses to open on it unless told not to check. The probe
//! writes an object of its own under `<prefix>/probe/`, tries each
//! precondition where it must fail and where it must hold, and deletes it:
//! five requests and a delete.

use std::time::SystemTime;

use object_store::UpdateVersion;

use distlock_core::backend::{Feature, FeatureState, ServerInfo};
use distlock_core::{Error, LockName, Result};

use crate::keys::KeySpace;
use crate::record::Record;
use crate::store::{Store, Written};

/// The features the probe reports, by name.
const CREATE: &str = "conditional create (If-None-Match: *)";
const REPLACE: &str = "conditional replace (If-Match)";

/// What the probe found.
#[derive(Debug)]
pub(crate) struct Probe {
    /// A second create of an existing object was refused.
    create_refused: bool,
    /// A replace under an ETag the object never had was refused.
    stale_replace_refused: bool,
    /// A replace under the object's own ETag was stored, and read back.
    replace_kept: bool,
    /// The store's clock, by its time of the probe's last write.
    clock: Option<SystemTime>,
}

impl Probe {
    /// Probes `store`, leaving nothing behind.
    ///
    /// # Errors
    /// A backend error when a request fails (the bucket is missing, the
    /// credentials are refused).
    pub(crate) async fn run(store: &Store, keys: &KeySpace) -> Result<Self> {
        let key = keys.probe();
        let name = LockName::new("distlock probe")?;
        let outcome = Self::steps(store, &key, &name).await;
        // Deleting is best-effort: a probe object left behind is harmless,
        // and never listed as a lock.
        if let Err(error) = store.delete(&key).await {
            tracing::debug!(target: "distlock::objectstore", %key, %error, "probe object not deleted");
        }
        outcome
    }

    async fn steps(store: &Store, key: &object_store::path::Path, name: &LockName) -> Result<Self> {
        if let Written::Conflict = store.create(key, &Record::free(name, 1)).await?.known()? {
            return Err(Error::Backend {
                backend: crate::store::BACKEND,
                message: format!(
                    "the probe could not create {key}, a fresh random key: the store refused a \
                     create of an object that did not exist"
                ),
                source: None,
            });
        }
        let create_refused = matches!(
            store.create(key, &Record::free(name, 2)).await?.known()?,
            Written::Conflict
        );
        let never = UpdateVersion {
            e_tag: Some("\"distlock-probe-never-an-etag\"".into()),
            version: None,
        };
        let stale_replace_refused = matches!(
            store
                .replace(key, &Record::free(name, 3), &never)
                .await?
                .known()?,
            Written::Conflict
        );
        let Some(current) = store.read(key).await? else {
            return Ok(Self {
                create_refused,
                stale_replace_refused,
                replace_kept: false,
                clock: None,
            });
        };
        let last = Record::free(name, 4);
        let stored = matches!(
            store.replace(key, &last, &current.version).await?.known()?,
            Written::Stored(_)
        );
        let after = store.read(key).await?;
        let replace_kept = stored
            && after
                .as_ref()
                .is_some_and(|found| found.record.write == last.write);
        Ok(Self {
            create_refused,
            stale_replace_refused,
            replace_kept,
            clock: after.map(|found| found.modified),
        })
    }

    /// Whether locks are safe on this store.
    pub(crate) fn passed(&self) -> bool {
        self.create_refused && self.stale_replace_refused && self.replace_kept
    }

    /// What the probe found, as `distlock check` shows it.
    pub(crate) fn server_info(&self) -> ServerInfo {
        let create = if self.create_refused {
            Feature::present(CREATE, "a second create of an existing object was refused")
        } else {
            Feature::missing(
                CREATE,
                "the store overwrote an existing object under If-None-Match: *, so two clients \
                 could both take one lock; use a store that honours it",
            )
        };
        let replace = match (self.stale_replace_refused, self.replace_kept) {
            (true, true) => Feature::present(
                REPLACE,
                "a replace under a stale ETag was refused, and one under the current ETag kept",
            ),
            (false, _) => Feature::missing(
                REPLACE,
                "the store overwrote an object under an If-Match ETag it never had, so a holder \
                 whose lease ran out could overwrite the next holder's grant; use a store that \
                 honours it",
            ),
            (true, false) => Feature::missing(
                REPLACE,
                "the store did not keep a replace under the object's own ETag, so no lock could \
                 be extended or released",
            ),
        };
        ServerInfo::new(None, self.clock)
            .with_feature(create)
            .with_feature(replace)
    }

    /// The error that refuses to open on a store that failed the probe.
    pub(crate) fn refusal(&self, store: &str) -> Error {
        let missing: Vec<String> = self
            .server_info()
            .features
            .into_iter()
            .filter(|feature| feature.state == FeatureState::Missing)
            .map(|feature| format!("{}: {}", feature.name, feature.detail))
            .collect();
        Error::Unsupported(format!(
            "{store} cannot keep locks safely: {}. Add `check=false` to the URL (or \
             `.check(false)`) only if you know better than this probe",
            missing.join("; ")
        ))
    }
}

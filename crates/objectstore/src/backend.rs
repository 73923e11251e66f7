//! The [`Backend`] on an object store: the backend type, how it is made,
//! and the trait it implements. The protocol of a lock is in
//! [`crate::exclusive`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;

use distlock_core::backend::Waiters;
use distlock_core::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, Extended, GrantState, Lease,
    LockInfo, Resumes, ServerInfo, WaitState,
};
use distlock_core::{Claim, Error, LockKind, LockName, Result};

use crate::config::ObjectStoreConfig;
use crate::exclusive::{Locks, expires_in};
use crate::keys::KeySpace;
use crate::probe::Probe;
use crate::store::{Store, failed};

/// How many objects [`Backend::list`] reads at once.
const LIST_READS_AT_ONCE: usize = 16;

/// Locks kept as objects in a bucket, written only under the store's
/// preconditions.
///
/// Open one with [`ObjectStoreBackend::open`] (from an `s3://`, `gs://` or
/// `az://` URL), [`ObjectStoreBackend::connect`] (from a configuration),
/// or [`ObjectStoreBackend::builder`] (on an `object_store` client you
/// built). See the crate documentation for what it guarantees.
#[derive(Debug)]
pub struct ObjectStoreBackend {
    locks: Locks,
    /// The store, as messages name it.
    shown: String,
}

impl ObjectStoreBackend {
    /// Parses `url` (see [`ObjectStoreConfig::parse`]) and opens the store.
    ///
    /// # Errors
    /// As [`ObjectStoreConfig::parse`] and [`connect`](Self::connect).
    pub async fn open(url: &str) -> Result<Self> {
        Self::connect(ObjectStoreConfig::parse(url)?).await
    }

    /// Builds the cloud's client for `config` and, unless its check is
    /// off, probes that the store honours its preconditions.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] or [`Error::Unsupported`] as
    /// [`ObjectStoreConfig::parse`] says; a backend error when the probe's
    /// requests fail (a missing bucket, refused credentials);
    /// [`Error::Unsupported`] naming what the store ignored, when it failed
    /// the probe.
    pub async fn connect(config: ObjectStoreConfig) -> Result<Self> {
        let store = config.build_client()?;
        Self::builder(store)
            .prefix(config.prefix_str())
            .check(config.checks())
            .shown_as(config.display_name())
            .build()
            .await
    }

    /// A backend on `store`, a client of `object_store` that the caller
    /// built (with settings this crate's URLs do not reach).
    pub fn builder(store: Arc<dyn ObjectStore>) -> ObjectStoreBackendBuilder {
        ObjectStoreBackendBuilder {
            shown: store.to_string(),
            store,
            prefix: String::new(),
            check: true,
        }
    }

    /// Probes the store's preconditions again (as opening does), and says
    /// what it found; `distlock check` shows it through
    /// [`Backend::server_info`].
    ///
    /// # Errors
    /// A backend error when a request fails.
    pub async fn probe(&self) -> Result<ServerInfo> {
        let probe = Probe::run(&self.locks.store, &self.locks.keys).await?;
        Ok(probe.server_info())
    }

    /// The object that keeps `name`'s lock, as a path in the bucket.
    pub fn lock_key(&self, name: &LockName) -> String {
        self.locks.keys.lock(name).to_string()
    }
}

/// Makes an [`ObjectStoreBackend`] on a client of the caller's.
#[derive(Debug)]
#[must_use]
pub struct ObjectStoreBackendBuilder {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    check: bool,
    shown: String,
}

impl ObjectStoreBackendBuilder {
    /// Keeps the locks under `prefix`, a path in the bucket.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Whether [`build`](Self::build) probes the store's preconditions and
    /// refuses a store that ignores them (the default).
    pub fn check(mut self, check: bool) -> Self {
        self.check = check;
        self
    }

    /// How messages name the store.
    fn shown_as(mut self, shown: String) -> Self {
        self.shown = shown;
        self
    }

    /// The backend, once the store passed the probe (unless the check is
    /// off).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed prefix; a backend error
    /// when the probe's requests fail; [`Error::Unsupported`] when the
    /// store failed the probe.
    pub async fn build(self) -> Result<ObjectStoreBackend> {
        let keys = KeySpace::new(&self.prefix)?;
        let store = Store::new(self.store);
        if self.check {
            let probe = Probe::run(&store, &keys).await?;
            if !probe.passed() {
                return Err(probe.refusal(&self.shown));
            }
        }
        Ok(ObjectStoreBackend {
            locks: Locks::new(store, keys),
            shown: self.shown,
        })
    }
}

#[async_trait]
impl Backend for ObjectStoreBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
    }

    fn store_name(&self) -> &'static str {
        crate::store::BACKEND
    }

    fn abilities(&self) -> Abilities<'_> {
        Abilities::none().with_resumes(self)
    }

    async fn server_info(&self, _limit: Duration) -> Result<ServerInfo> {
        self.probe().await
    }

    async fn try_acquire(
        &self,
        request: &AcquireRequest,
        _wait: &mut WaitState,
    ) -> Result<Attempt> {
        match request.claim {
            Claim::Exclusive => self.locks.try_acquire(request).await,
            Claim::Shared | Claim::Permit { .. } => Err(Error::Unsupported(format!(
                "{} grants exclusive locks only: a reader or a permit would need several \
                 objects changed in one step, which object stores cannot do",
                self.shown
            ))),
        }
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        Extended::each(leases, |lease| self.locks.extend(lease)).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.locks.release(lease).await
    }

    async fn list(&self, _limit: Duration) -> Result<Vec<LockInfo>> {
        let store = &self.locks.store;
        let listed: Vec<_> = store
            .inner()
            .list(Some(self.locks.keys.locks()))
            .try_collect()
            .await
            .map_err(|error| failed("list", self.locks.keys.locks(), error))?;
        let read = futures::stream::iter(listed)
            .map(|meta| async move { (store.read(&meta.location).await, meta.location) })
            .buffer_unordered(LIST_READS_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        let mut infos = Vec::new();
        for (found, key) in read {
            let found = match found {
                Ok(Some(found)) => found,
                // Released and deleted by someone between the list and the read.
                Ok(None) => continue,
                Err(error @ Error::InvalidData { .. }) => {
                    tracing::warn!(target: "distlock::objectstore", %key, %error, "not a lock object; left out of the list");
                    continue;
                }
                Err(error) => return Err(error),
            };
            let Some(grant) = found.record.grant else {
                continue;
            };
            infos.push(LockInfo {
                name: found.record.name,
                kind: LockKind::Exclusive,
                permits: None,
                holder: Some(grant.holder),
                fencing_token: Some(found.record.token),
                expires_in: Some(expires_in(grant.lease, found.modified)),
                waiters: Waiters::Unknown,
            });
        }
        infos.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
        Ok(infos)
    }

    async fn force_release(&self, name: &LockName, _limit: Duration) -> Result<bool> {
        self.locks.force_release(name).await
    }
}

#[async_trait]
impl Resumes for ObjectStoreBackend {
    async fn resume(&self, lease: &Lease, request: &AcquireRequest) -> Result<Option<GrantState>> {
        self.locks.resume(lease, request).await
    }
}

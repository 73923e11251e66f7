//! The bare memcached lock, as a baseline for benchmarks.
//!
//! [`RawLock`] does what the classic recipe does and nothing more: one
//! `add` with an expiry to take a lock, one delete conditional on the CAS
//! that the `add` returned to release it. There is no fencing token, no
//! extension, no quorum, and no check that the CAS still belongs to this
//! grant after a memcached restart (CAS values start again from 1 when
//! memcached restarts, so a remembered CAS may match a newer holder's
//! item). Use it to measure what distlock's checks cost, never to protect
//! anything.

use std::time::Duration;

use distlock_core::{LockName, Result};

use crate::lease::lease_ttl;
use crate::proto::{Batch, Code, Key};
use crate::quorum::Store;

/// The bare `add` + conditional delete on the same keys and servers as
/// [`MemcachedBackend`](crate::MemcachedBackend) (in quorum mode too, it
/// uses only the one server that sharded mode would pick). Made by
/// [`MemcachedBackend::raw`](crate::MemcachedBackend::raw).
#[derive(Debug, Clone, Copy)]
pub struct RawLock<'a> {
    store: Store<'a>,
}

/// A lock taken by [`RawLock::try_lock`].
#[derive(Debug, Clone)]
#[must_use = "a raw grant is only released by RawLock::unlock or its expiry"]
pub struct RawGrant {
    name: LockName,
    key: Key,
    cas: u64,
}

impl RawGrant {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }
}

impl<'a> RawLock<'a> {
    pub(crate) fn new(store: Store<'a>) -> Self {
        Self { store }
    }

    /// `ms <key> 1 ME T<ttl> c`: takes `name` for `lease` (rounded as
    /// [`lease_ttl`] does) if nobody has it. One round trip.
    ///
    /// # Errors
    /// A backend error, or [`Error::InvalidConfig`](distlock_core::Error::InvalidConfig)
    /// for a lease memcached cannot express.
    pub async fn try_lock(&self, name: &LockName, lease: Duration) -> Result<Option<RawGrant>> {
        let ttl = lease_ttl(lease)?;
        let key = self.store.keys.lock_key(name);
        let server = self.store.quorum.shard(name);
        let reply = server
            .meta_one(
                Batch::new().ms(&key, b"1", format_args!("ME T{ttl} c")),
                self.store.timeout,
            )
            .await?;
        match reply.code {
            Code::Hd => {
                let cas = reply
                    .flag_u64('c')
                    .ok_or_else(|| server.message("an add came back without its CAS"))?;
                Ok(Some(RawGrant {
                    name: name.clone(),
                    key,
                    cas,
                }))
            }
            Code::Ns => Ok(None),
            other => Err(server.message(format!("unexpected reply {other:?} to an add"))),
        }
    }

    /// `md <key> C<cas>`: releases `grant` if its item is unchanged. One
    /// round trip. Returns whether it was.
    ///
    /// # Errors
    /// A backend error.
    pub async fn unlock(&self, grant: RawGrant) -> Result<bool> {
        let server = self.store.quorum.shard(&grant.name);
        let reply = server
            .meta_one(
                Batch::new().md(&grant.key, format_args!("C{}", grant.cas)),
                self.store.timeout,
            )
            .await?;
        match reply.code {
            Code::Hd => Ok(true),
            Code::Ex | Code::Nf => Ok(false),
            other => Err(server.message(format!("unexpected reply {other:?} to a delete"))),
        }
    }
}

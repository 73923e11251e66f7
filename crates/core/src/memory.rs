//! An in-memory backend, for unit tests and documentation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::{
    AcquireRequest, Attempt, Backend, Capabilities, HandOver, Holder, Lease, LeaseId, LockInfo,
};
use crate::error::Result;
use crate::name::LockName;
use crate::options::LockOptions;
use crate::wake::{ReleaseHub, ReleaseWatch};

/// Locks that live in this process's memory, with real leases that expire
/// by Tokio's clock, fencing tokens and release wake-ups.
///
/// It is shared by the clients of one process that hold the same
/// `Arc<MemoryBackend>`, and by nobody else: use it to test code that takes
/// locks, and in examples.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    locks: Mutex<HashMap<LockName, Slot>>,
    releases: ReleaseHub,
}

#[derive(Debug, Default)]
struct Slot {
    grant: Option<Grant>,
    last_token: u64,
}

#[derive(Debug)]
struct Grant {
    id: LeaseId,
    token: u64,
    expires_at: Instant,
    holder: Arc<Holder>,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<LockName, Slot>> {
        self.locks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Slot {
    fn live_grant(&self, now: Instant) -> Option<&Grant> {
        self.grant.as_ref().filter(|grant| grant.expires_at > now)
    }

    /// Grants the lock to `request`, replacing any grant; returns the token.
    fn grant_to(&mut self, request: &AcquireRequest, now: Instant) -> u64 {
        self.last_token += 1;
        self.grant = Some(Grant {
            id: request.lease_id,
            token: self.last_token,
            expires_at: now
                .checked_add(request.lease)
                .unwrap_or(now + LockOptions::MAX_LEASE),
            holder: request.holder.clone(),
        });
        self.last_token
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
            .with_release_wakeups(true)
            .with_cross_process(false)
            .with_hand_over(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Attempt> {
        let now = Instant::now();
        let mut locks = self.lock();
        let slot = locks.entry(request.name.clone()).or_default();
        if let Some(grant) = slot.live_grant(now) {
            return Ok(Attempt::Held {
                retry_after: Some(grant.expires_at - now),
            });
        }
        Ok(Attempt::Acquired {
            fencing_token: slot.grant_to(request, now),
        })
    }

    async fn extend(&self, lease: &Lease) -> Result<bool> {
        let now = Instant::now();
        let mut locks = self.lock();
        let Some(grant) = locks
            .get_mut(&lease.name)
            .and_then(|slot| slot.grant.as_mut())
            .filter(|grant| grant.id == lease.id && grant.expires_at > now)
        else {
            return Ok(false);
        };
        grant.expires_at = now + lease.lease;
        Ok(true)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let now = Instant::now();
        let mut locks = self.lock();
        let Some(slot) = locks.get_mut(&lease.name) else {
            return Ok(false);
        };
        if !slot
            .grant
            .as_ref()
            .is_some_and(|grant| grant.id == lease.id)
        {
            return Ok(false);
        }
        let was_live = slot.live_grant(now).is_some();
        slot.grant = None;
        drop(locks);
        self.releases.notify(&lease.name);
        Ok(was_live)
    }

    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        let now = Instant::now();
        let mut locks = self.lock();
        let Some(slot) = locks.get_mut(&lease.name).filter(|slot| {
            slot.live_grant(now)
                .is_some_and(|grant| grant.id == lease.id)
        }) else {
            return Ok(HandOver::NotOurs);
        };
        Ok(HandOver::Granted {
            fencing_token: slot.grant_to(next, now),
            confirmed_at: None,
        })
    }

    async fn list(&self) -> Result<Vec<LockInfo>> {
        let now = Instant::now();
        let mut held: Vec<LockInfo> = self
            .lock()
            .iter()
            .filter_map(|(name, slot)| {
                let grant = slot.live_grant(now)?;
                Some(LockInfo {
                    name: name.clone(),
                    holder: Some(Holder::clone(&grant.holder)),
                    fencing_token: Some(grant.token),
                    expires_in: Some(grant.expires_at - now),
                })
            })
            .collect();
        held.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(held)
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        let now = Instant::now();
        let mut locks = self.lock();
        let Some(slot) = locks.get_mut(name) else {
            return Ok(false);
        };
        let was_live = slot.live_grant(now).is_some();
        slot.grant = None;
        drop(locks);
        self.releases.notify(name);
        Ok(was_live)
    }

    fn watch_releases(&self, name: &LockName) -> Option<ReleaseWatch> {
        Some(self.releases.watch(name))
    }
}

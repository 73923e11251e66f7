//! Keys this client gave up but has not yet seen deleted.
//!
//! A key lives as long as the client's session, and the session lives as
//! long as the client holds or waits for anything. So a release, or the
//! end of a wait, whose delete failed (an election, a member killed
//! mid-request) or was cancelled would leave a key that blocks its name for
//! as long as the client keeps busy. Each key is noted before its delete is
//! sent and forgotten once etcd answers, and whatever is still noted is
//! deleted again at the next session renewal. A key whose write lost its
//! answer, and which its delete did not find, is deleted again a few times
//! over the next seconds (see [`Leftovers::recheck`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::KvClient;

/// When a key whose write lost its answer is deleted again, after each
/// pause: a write held up in the server for longer than their sum is
/// left to the session's end.
const RECHECKS: [Duration; 4] = [
    Duration::from_millis(100),
    Duration::from_millis(400),
    Duration::from_secs(1),
    Duration::from_secs(3),
];

/// The keys to delete again; cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Leftovers {
    keys: Arc<Mutex<HashSet<Vec<u8>>>>,
    /// A retry is under way: renewals do not start another.
    retrying: Arc<AtomicBool>,
}

impl Leftovers {
    /// Notes `key` before its delete is sent.
    pub(crate) fn note(&self, key: &[u8]) {
        self.lock().insert(key.to_vec());
    }

    /// Forgets `key` once etcd answered its delete (deleted, or gone).
    pub(crate) fn forget(&self, key: &[u8]) {
        self.lock().remove(key);
    }

    /// Deletes every noted key again, in a task of its own so that a
    /// renewal never waits for it; at most one such task runs at a time.
    /// Each key is this client's own (its name ends in a random id), so
    /// it is deleted unconditionally.
    pub(crate) fn retry(&self, kv: &KvClient) {
        if self.lock().is_empty() || self.retrying.swap(true, Ordering::AcqRel) {
            return;
        }
        let (leftovers, kv) = (self.clone(), kv.clone());
        tokio::spawn(async move {
            let keys: Vec<Vec<u8>> = leftovers.lock().iter().cloned().collect();
            for key in keys {
                match kv.clone().delete(key.clone(), None).await {
                    Ok(_) => leftovers.forget(&key),
                    Err(error) => {
                        tracing::debug!(%error, "deleting a left-over etcd key failed; trying again at the next renewal");
                    }
                }
            }
            leftovers.retrying.store(false, Ordering::Release);
        });
    }

    /// Deletes `key` a few more times over the next seconds, until a
    /// delete finds it: for a key whose write had its answer lost and whose
    /// first delete found nothing. The write may still be on its way, over
    /// the connection that lost its answer, and land after that delete; it
    /// would then hold its name for as long as the session lives. The key
    /// is this client's own, for an attempt it has given up.
    pub(crate) fn recheck(&self, kv: &KvClient, key: Vec<u8>) {
        let kv = kv.clone();
        tokio::spawn(async move {
            for pause in RECHECKS {
                tokio::time::sleep(pause).await;
                match kv.clone().delete(key.clone(), None).await {
                    Ok(response) if response.deleted() > 0 => {
                        tracing::debug!("deleted a key whose write landed after its release");
                        return;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(%error, "re-deleting a key whose write had its answer lost failed");
                    }
                }
            }
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<Vec<u8>>> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

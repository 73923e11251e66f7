//! Keys this client gave up but has not yet seen deleted.
//!
//! A key lives as long as the client's session, and the session lives as
//! long as the client holds or waits for anything. So a release, or the
//! end of a wait, whose delete failed (an election, a member killed
//! mid-request) or was cancelled would leave a key that blocks its name for
//! as long as the client keeps busy. A key is noted once its delete failed
//! or was dropped unanswered (never while it is in flight: a renewal's
//! retry would then delete the key under the release, whose owner check
//! would fail and report a loss), and whatever is noted is deleted again
//! at the next session renewal. A grant's key is deleted again only while
//! it is as the grant last wrote it: a resume may have taken it up, and it
//! is then another holder's. A key whose write lost its
//! answer, and which its delete did not find, is deleted again a few times
//! over the next seconds (see [`Leftovers::recheck`]), and then looked for
//! at each renewal for a while longer: a write held up through a leader
//! election can land later still, and would hold its name for as long as
//! the session lives.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::raw::Client;
use crate::raw::etcdserverpb::compare::CompareResult;
use crate::raw::etcdserverpb::{RangeRequest, TxnRequest};
use crate::requests::{self, create_revision, delete_op, mod_revision};

/// When a key whose write lost its answer is deleted again, after each
/// pause: a write held up in the server for longer than their sum is
/// left to the session's end.
const RECHECKS: [Duration; 4] = [
    Duration::from_millis(100),
    Duration::from_millis(400),
    Duration::from_secs(1),
    Duration::from_secs(3),
];

/// How long a key whose write lost its answer is looked for at each
/// renewal after its rechecks found nothing: far longer than any write is
/// held up in a cluster that elects a leader within seconds.
const SUSPECT_FOR: Duration = Duration::from_secs(300);

/// The keys to delete again; cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Leftovers {
    /// Each key, with the revisions a grant's key must still have (its
    /// create revision, and the revision of the grant's last write) to be
    /// deleted again; `None` for a wait's key, which is only ever ours.
    keys: Arc<Mutex<HashMap<Vec<u8>, Option<Revisions>>>>,
    /// Keys whose write lost its answer and that no delete has found yet,
    /// with when they were given up: looked for (a read, not a write) at
    /// each renewal, and deleted if they appear, until [`SUSPECT_FOR`].
    suspects: Arc<Mutex<HashMap<Vec<u8>, Instant>>>,
    /// A retry is under way: renewals do not start another.
    retrying: Arc<AtomicBool>,
}

/// A grant's key's create revision, and the revision of its last write.
pub(crate) type Revisions = (i64, i64);

/// A delete of `key` under way: dropped before [`answered`](Self::answered)
/// (the delete failed, or its caller went away), it notes the key as a
/// leftover.
#[must_use = "dropping it at once notes the key as a leftover"]
pub(crate) struct Pending<'a> {
    leftovers: &'a Leftovers,
    key: Option<(Vec<u8>, Option<Revisions>)>,
}

impl Pending<'_> {
    /// etcd answered the delete (deleted, or gone, or another holder's).
    pub(crate) fn answered(mut self) {
        self.key = None;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some((key, revisions)) = self.key.take() {
            self.leftovers.lock().insert(key, revisions);
        }
    }
}

impl Leftovers {
    /// A delete of `key`, a wait's or an attempt's, about to be sent.
    pub(crate) fn pending(&self, key: &[u8]) -> Pending<'_> {
        Pending {
            leftovers: self,
            key: Some((key.to_vec(), None)),
        }
    }

    /// A delete of a grant's `key` about to be sent, to be done again only
    /// while the key still has `revisions`.
    pub(crate) fn pending_grant(&self, key: &[u8], revisions: Revisions) -> Pending<'_> {
        Pending {
            leftovers: self,
            key: Some((key.to_vec(), Some(revisions))),
        }
    }

    /// Forgets `key` once etcd answered a delete of it.
    fn forget(&self, key: &[u8]) {
        self.lock().remove(key);
    }

    /// Deletes every noted key again, in a task of its own so that a
    /// renewal never waits for it; at most one such task runs at a time.
    /// A wait's key is this client's own (its name ends in a random id),
    /// so it is deleted unconditionally; a grant's only while unchanged.
    pub(crate) fn retry(&self, kv: &Client) {
        let idle = self.lock().is_empty() && self.suspects().is_empty();
        if idle || self.retrying.swap(true, Ordering::AcqRel) {
            return;
        }
        let (leftovers, kv) = (self.clone(), kv.clone());
        tokio::spawn(async move {
            let keys: Vec<(Vec<u8>, Option<Revisions>)> = leftovers
                .lock()
                .iter()
                .map(|(key, revisions)| (key.clone(), *revisions))
                .collect();
            for (key, revisions) in keys {
                let deleted = match revisions {
                    None => kv.delete_range(requests::delete(&key)).await.map(drop),
                    Some(revisions) => kv.txn(unchanged_delete(&key, revisions)).await.map(drop),
                };
                match deleted {
                    Ok(()) => leftovers.forget(&key),
                    Err(error) => {
                        tracing::debug!(%error, "deleting a left-over etcd key failed; trying again at the next renewal");
                    }
                }
            }
            leftovers.look_for_suspects(&kv).await;
            leftovers.retrying.store(false, Ordering::Release);
        });
    }

    /// Looks for each suspect key, deletes those that landed, and stops
    /// looking for those given up longer than [`SUSPECT_FOR`] ago.
    async fn look_for_suspects(&self, kv: &Client) {
        let suspects: Vec<(Vec<u8>, Instant)> = self
            .suspects()
            .iter()
            .map(|(key, since)| (key.clone(), *since))
            .collect();
        for (key, since) in suspects {
            let found = kv
                .range(RangeRequest {
                    keys_only: true,
                    ..requests::key(key.clone())
                })
                .await
                .map(|response| !response.kvs.is_empty());
            match found {
                Ok(true) => {
                    if kv.delete_range(requests::delete(&key)).await.is_ok() {
                        tracing::debug!("deleted a key whose write landed long after its release");
                        self.suspects().remove(&key);
                    }
                }
                Ok(false) if since.elapsed() > SUSPECT_FOR => {
                    self.suspects().remove(&key);
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::debug!(%error, "looking for a key whose write lost its answer failed");
                }
            }
        }
    }

    /// Deletes `key` a few more times over the next seconds, until a
    /// delete finds it: for a key whose write had its answer lost and whose
    /// first delete found nothing. The write may still be on its way, over
    /// the connection that lost its answer, and land after that delete; it
    /// would then hold its name for as long as the session lives. The key
    /// is this client's own, for an attempt it has given up.
    pub(crate) fn recheck(&self, kv: &Client, key: Vec<u8>) {
        let (leftovers, kv) = (self.clone(), kv.clone());
        tokio::spawn(async move {
            for pause in RECHECKS {
                tokio::time::sleep(pause).await;
                match kv.delete_range(requests::delete(&key)).await {
                    Ok(response) if response.deleted > 0 => {
                        tracing::debug!("deleted a key whose write landed after its release");
                        return;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(%error, "re-deleting a key whose write had its answer lost failed");
                    }
                }
            }
            // Not found yet: looked for at each renewal from now on.
            leftovers.suspects().insert(key, Instant::now());
        });
    }

    fn suspects(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Instant>> {
        self.suspects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Option<Revisions>>> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Deletes `key` if it still has `revisions`: a grant's key, which a
/// resume may have taken up since.
fn unchanged_delete(key: &[u8], (created, modified): Revisions) -> TxnRequest {
    TxnRequest {
        compare: vec![
            create_revision(key.to_vec(), CompareResult::Equal, created),
            mod_revision(key.to_vec(), CompareResult::Equal, modified),
        ],
        success: vec![delete_op(key)],
        failure: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_noted_only_once_its_delete_failed_or_was_dropped() {
        let leftovers = Leftovers::default();
        let pending = leftovers.pending_grant(b"grant", (7, 9));
        // In flight: a renewal's retry must not delete it under the release.
        assert!(leftovers.lock().is_empty());
        pending.answered();
        assert!(leftovers.lock().is_empty(), "answered: nothing left over");

        let failed = leftovers.pending_grant(b"grant", (7, 9));
        drop(failed);
        let wait = leftovers.pending(b"wait");
        drop(wait);
        let noted = leftovers.lock().clone();
        assert_eq!(noted.get(&b"grant"[..]), Some(&Some((7, 9))));
        assert_eq!(noted.get(&b"wait"[..]), Some(&None));
    }
}

//! Deleting our own keys: owner-checked, and tried again through an
//! election, so that a short-lived process does not leave its key to block
//! the name until its session ends.

use std::time::Duration;

use distlock_core::Result;
use tokio::time::Instant;

use crate::error::from_etcd;
use crate::grant::Grant;
use crate::raw::Client;
use crate::raw::etcdserverpb::TxnRequest;
use crate::raw::etcdserverpb::compare::CompareResult;
use crate::requests::{self, create_revision, delete_op, mod_revision, read_op};
use crate::session::SessionId;
use crate::transactions::range_reads;

/// The first and the longest pause between tries of a release that
/// failed; the tries end with the release's operation timeout.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const LAST_PAUSE: Duration = Duration::from_millis(500);

/// Deletes `grant`'s key if it is still as the grant wrote it (created at
/// its revision, last written at its `modified`); returns whether it was.
/// A failure that may pass (no leader, a member that does not answer) is
/// tried again, with backoff, for up to `within`.
///
/// After a failure, the delete may have happened without its answer: a
/// later try that finds the key gone while the grant's session lives counts
/// it as released, since only a release, or a forced one, deletes a key
/// whose session lives. A key still there but changed (taken up by a
/// resume) is not ours, answered or not.
///
/// # Errors
/// The last backend error, once `within` has passed, or the first that
/// trying again cannot mend.
///
/// # Cancel safety
/// Dropped, the key is either deleted or not; the caller notes it as a
/// leftover to delete again.
pub(crate) async fn delete_if_ours(
    client: &Client,
    grant: &Grant,
    within: Duration,
) -> Result<bool> {
    let key = grant.key.as_slice();
    retrying(within, |unanswered| async move {
        let txn = TxnRequest {
            compare: vec![
                create_revision(key.to_vec(), CompareResult::Equal, grant.revision),
                mod_revision(key.to_vec(), CompareResult::Equal, grant.modified),
            ],
            success: vec![delete_op(key)],
            failure: vec![read_op(requests::key(key.to_vec()))],
        };
        let response = client
            .txn(txn)
            .await
            .map_err(|e| from_etcd("releasing a lock", e))?;
        let still_there = range_reads(&response).any(|read| !read.kvs.is_empty());
        if response.succeeded {
            Ok(true)
        } else if unanswered && !still_there {
            lives(client, grant.session).await
        } else {
            Ok(false)
        }
    })
    .await
}

/// Deletes `key`, a key of ours named by its grant or wait; returns whether
/// it was there. Tried again as [`delete_if_ours`] is, for up to `within`;
/// a key found gone after an unanswered try may have been deleted by it.
///
/// # Errors
/// As [`delete_if_ours`].
///
/// # Cancel safety
/// As [`delete_if_ours`].
pub(crate) async fn delete(client: &Client, key: &[u8], within: Duration) -> Result<bool> {
    retrying(within, |_| async move {
        let response = client
            .delete_range(requests::delete(key))
            .await
            .map_err(|e| from_etcd("deleting a key", e))?;
        Ok(response.deleted > 0)
    })
    .await
}

/// Runs `attempt` until it answers, fails with an error that trying again
/// cannot mend, or `within` has passed. `attempt` is told whether an
/// earlier try failed, and so may have happened without its answer.
async fn retrying<T, F, Fut>(within: Duration, mut attempt: F) -> Result<T>
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    let mut unanswered = false;
    loop {
        let error = match attempt(unanswered).await {
            Ok(answer) => return Ok(answer),
            Err(error) => error,
        };
        if !error.is_transient() || Instant::now() + pause >= deadline {
            return Err(error);
        }
        tracing::debug!(%error, "deleting an etcd key failed; trying again");
        unanswered = true;
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LAST_PAUSE);
    }
}

/// Whether etcd still has the session `id`, with a second or more left by
/// the leader's clock (etcd reports whole seconds, rounded down).
pub(crate) async fn lives(client: &Client, id: SessionId) -> Result<bool> {
    let response = client
        .lease_time_to_live(id.0)
        .await
        .map_err(|e| from_etcd("reading a session's time left", e))?;
    Ok(response.ttl > 0)
}

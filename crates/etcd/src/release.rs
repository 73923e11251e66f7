//! Deleting our own keys: owner-checked, and tried again through an
//! election, so that a short-lived process does not leave its key to block
//! the name until its session ends.

use std::time::Duration;

use distlock_core::Result;
use tokio::time::Instant;

use crate::error::from_etcd;
use crate::raw::Client;
use crate::raw::etcdserverpb::TxnRequest;
use crate::raw::etcdserverpb::compare::CompareResult;
use crate::requests::{self, create_revision, delete_op};
use crate::session::SessionId;

/// The first and the longest pause between tries of a release that
/// failed; the tries end with the release's operation timeout.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const LAST_PAUSE: Duration = Duration::from_millis(500);

/// Deletes `key` if it is still the one created at `revision`, on
/// `session`; returns whether it was. A failure that may pass (no leader,
/// a member that does not answer) is tried again, with backoff, for up to
/// `within`.
///
/// After a failure, the delete may have happened without its answer: a
/// later try that finds the key gone while `session` lives counts it as
/// released, since only a release, or a forced one, deletes a key whose
/// session lives.
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
    key: &[u8],
    revision: i64,
    session: SessionId,
    within: Duration,
) -> Result<bool> {
    retrying(within, |unanswered| async move {
        let txn = TxnRequest {
            compare: vec![create_revision(
                key.to_vec(),
                CompareResult::Equal,
                revision,
            )],
            success: vec![delete_op(key)],
            failure: Vec::new(),
        };
        let response = client
            .txn(txn)
            .await
            .map_err(|e| from_etcd("releasing a lock", e))?;
        if response.succeeded {
            Ok(true)
        } else if unanswered {
            lives(client, session).await
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

/// Whether etcd still has the session `id`.
async fn lives(client: &Client, id: SessionId) -> Result<bool> {
    let response = client
        .lease_time_to_live(id.0)
        .await
        .map_err(|e| from_etcd("reading a session's time left", e))?;
    Ok(response.ttl > 0)
}

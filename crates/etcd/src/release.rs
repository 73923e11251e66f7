//! The release of a grant's key: owner-checked, and tried again through an
//! election, so that a short-lived process does not leave its key to block
//! the name until its session ends.

use std::time::Duration;

use distlock_core::Result;
use tokio::time::Instant;

use crate::error::from_etcd;
use crate::raw::Client;
use crate::raw::etcdserverpb::TxnRequest;
use crate::raw::etcdserverpb::compare::CompareResult;
use crate::requests::{create_revision, delete_op};
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
    let deadline = Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    let mut unanswered = false;
    loop {
        let txn = TxnRequest {
            compare: vec![create_revision(
                key.to_vec(),
                CompareResult::Equal,
                revision,
            )],
            success: vec![delete_op(key)],
            failure: Vec::new(),
        };
        let error = match client.txn(txn).await {
            Ok(response) if response.succeeded => return Ok(true),
            Ok(_) if unanswered => return lives(client, session).await,
            Ok(_) => return Ok(false),
            Err(error) => from_etcd("releasing a lock", error),
        };
        if !error.is_transient() || Instant::now() + pause >= deadline {
            return Err(error);
        }
        tracing::debug!(%error, "releasing an etcd key failed; trying again");
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

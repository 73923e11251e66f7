//! What a grant keeps (its key, the session it hangs on, the watch that
//! reports its loss), and the answer that hands it to core.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Attempt, GrantState, LeaseId, LossReporter};

use crate::raw::Client;
use crate::session::SessionId;
use crate::watch::{Task, Watched, deleted};

/// How long after a grant its key's watch starts.
const WATCH_AFTER: Duration = Duration::from_millis(25);

/// What a grant keeps: its key, the session it hangs on, and the task
/// watching it.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) key: Vec<u8>,
    pub(crate) revision: i64,
    pub(crate) id: LeaseId,
    /// The etcd lease the key was written on: only its renewals keep the
    /// grant, and its end ends it.
    pub(crate) session: SessionId,
    /// Told when a release finds the key gone: the grant was lost before.
    pub(crate) loss: LossReporter,
    /// Set before our own release deletes the key, so that its watch does
    /// not report that deletion as a loss.
    pub(crate) releasing: Arc<AtomicBool>,
    _watch: Task,
}

/// The grant of `key`, created at `revision` on `session`, watched for
/// deletion through `client`.
pub(crate) fn granted(
    client: &Client,
    request: &AcquireRequest,
    key: Vec<u8>,
    revision: i64,
    session: SessionId,
) -> Attempt {
    let releasing = Arc::new(AtomicBool::new(false));
    let watch = {
        let watched = Watched::Own {
            key: key.clone(),
            revision,
            kv: Box::new(client.clone()),
        };
        let (client, loss, releasing) = (client.clone(), request.loss.clone(), releasing.clone());
        Task::spawn(report_deletion(client, watched, revision, loss, releasing))
    };
    Attempt::Acquired {
        fencing_token: u64::try_from(revision).unwrap_or(0),
        state: GrantState::new(Grant {
            key,
            revision,
            id: request.lease_id,
            session,
            loss: request.loss.clone(),
            releasing,
            _watch: watch,
        }),
    }
}

/// Reports a loss once the grant's key, created at `revision`, is deleted
/// by anyone but our own release. The watch starts [`WATCH_AFTER`] after
/// the grant: most holds end sooner and then cost no watch at all, and a
/// watch from the grant's revision still sees a deletion made before it
/// started.
async fn report_deletion(
    client: Client,
    watched: Watched,
    revision: i64,
    loss: LossReporter,
    releasing: Arc<AtomicBool>,
) {
    tokio::time::sleep(WATCH_AFTER).await;
    deleted(client, watched, revision).await;
    if !releasing.load(Ordering::Acquire) {
        loss.report();
    }
}

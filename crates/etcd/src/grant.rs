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
///
/// The key is the grant's while it is as the grant last wrote it: created
/// at `revision` and last written at `modified`. Every owner check (a
/// confirmation, a release, a delayed release's move) compares both, so
/// that a key taken up by a resume, which rewrites it under another
/// identity and keeps its create revision, is no longer this grant's.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) key: Vec<u8>,
    /// The key's create revision: the fencing token.
    pub(crate) revision: i64,
    /// The revision of the grant's last write of its key: its creation,
    /// a fair campaign's take-over, or the resume that took it up.
    pub(crate) modified: i64,
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

/// The grant of `key`, created at `revision` and last written at
/// `modified` on `session`, watched through `client`.
pub(crate) fn granted(
    client: &Client,
    request: &AcquireRequest,
    key: Vec<u8>,
    (revision, modified): (i64, i64),
    session: SessionId,
) -> Attempt {
    Attempt::Acquired {
        fencing_token: u64::try_from(revision).unwrap_or(0),
        state: grant_state(client, request, key, (revision, modified), session),
    }
}

/// What core keeps of the grant [`granted`] describes: its [`Grant`], with
/// the watch that reports its loss.
pub(crate) fn grant_state(
    client: &Client,
    request: &AcquireRequest,
    key: Vec<u8>,
    (revision, modified): (i64, i64),
    session: SessionId,
) -> GrantState {
    let releasing = Arc::new(AtomicBool::new(false));
    let watch = {
        let watched = Watched::Own {
            key: key.clone(),
            revision,
            modified,
            kv: Box::new(client.clone()),
        };
        let (client, loss, releasing) = (client.clone(), request.loss.clone(), releasing.clone());
        Task::spawn(report_deletion(client, watched, modified, loss, releasing))
    };
    GrantState::new(Grant {
        key,
        revision,
        modified,
        id: request.lease_id,
        session,
        loss: request.loss.clone(),
        releasing,
        _watch: watch,
    })
}

/// Reports a loss once the grant's key, last written by the grant at
/// `modified`, is deleted or written by anyone but our own release (a
/// write is a resume that took the grant up). The watch starts
/// [`WATCH_AFTER`] after the grant: most holds end sooner and then cost no
/// watch at all, and a watch from the grant's last write still sees a
/// change made before it started.
async fn report_deletion(
    client: Client,
    watched: Watched,
    modified: i64,
    loss: LossReporter,
    releasing: Arc<AtomicBool>,
) {
    tokio::time::sleep(WATCH_AFTER).await;
    deleted(client, watched, modified).await;
    if !releasing.load(Ordering::Acquire) {
        loss.report();
    }
}

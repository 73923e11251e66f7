//! Release wake-ups that start on first use, for handles built without
//! talking to the server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use distlock_core::LockName;
use distlock_core::backend::{Feature, ReleaseHub, ReleaseWatch};
use mongodb::Collection;
use mongodb::bson::{Document, doc};
use tokio::sync::OnceCell;

use super::stream::{Watcher, read_concern};
use super::subject::Subject;
use crate::error::{code, driver};

/// The error code of a server without change streams (not a replica set).
const CHANGE_STREAMS_UNSUPPORTED: i32 = 40573;

/// How long after a failed probe the next wait probes again.
const PROBE_AGAIN: Duration = Duration::from_secs(30);

/// A watcher that starts on the first wait, or on [`start`](Self::start),
/// once a probe has shown that the server supports change streams. Until
/// then, and for good on a server without them, waiters poll.
#[derive(Debug)]
pub(crate) struct LazyWatcher {
    collection: Collection<Document>,
    subject: Subject,
    hub: ReleaseHub,
    probe_timeout: Duration,
    /// The probe's outcome: the running watcher, or `None` without change
    /// streams.
    started: Arc<OnceCell<Option<Watcher>>>,
    /// Whether a background probe runs, or failed less than
    /// [`PROBE_AGAIN`] ago.
    probing: Arc<AtomicBool>,
}

impl LazyWatcher {
    pub(crate) fn new(
        collection: Collection<Document>,
        subject: Subject,
        probe_timeout: Duration,
    ) -> Self {
        Self {
            collection,
            subject,
            hub: ReleaseHub::new(),
            probe_timeout,
            started: Arc::new(OnceCell::new()),
            probing: Arc::default(),
        }
    }

    /// Starts watching `name`; `None` until the watcher runs, and the caller
    /// then polls. The first call starts the probe in the background, on
    /// the current Tokio runtime.
    pub(crate) fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        if let Some(watcher) = self.started.get() {
            return watcher.as_ref().map(|_| self.hub.watch(name));
        }
        if !self.probing.swap(true, Ordering::Relaxed)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let started = Arc::downgrade(&self.started);
            runtime.spawn(start_unless_dropped(
                self.starter(),
                started,
                self.probing.clone(),
            ));
        }
        None
    }

    /// Probes and starts the watcher unless that was done; returns whether
    /// it runs.
    ///
    /// # Cancel safety
    /// Cancel safe: a cancelled probe is made again by the next caller.
    pub(crate) async fn start(&self) -> bool {
        self.started
            .get_or_try_init(|| self.starter().run())
            .await
            .is_ok_and(Option::is_some)
    }

    fn starter(&self) -> Starter {
        Starter {
            collection: self.collection.clone(),
            subject: self.subject.clone(),
            hub: self.hub.clone(),
            timeout: self.probe_timeout,
        }
    }
}

/// What starting a watcher takes.
struct Starter {
    collection: Collection<Document>,
    subject: Subject,
    hub: ReleaseHub,
    timeout: Duration,
}

impl Starter {
    /// The watcher, `None` without change streams, or `Err` when the probe
    /// failed in a way that may pass, and should be made again later.
    async fn run(self) -> Result<Option<Watcher>, ()> {
        match probe(&self.collection, self.timeout).await {
            Probe::Works => {
                tracing::debug!(namespace = %self.collection.namespace(), "watching for releases");
                Ok(Some(Watcher::start(
                    self.collection,
                    self.hub,
                    self.subject,
                )))
            }
            Probe::Unsupported => Ok(None),
            Probe::Failed(error) => {
                tracing::warn!(%error, retry_in = ?PROBE_AGAIN, "release wake-ups are off for now; waiters poll");
                Err(())
            }
        }
    }
}

/// Starts the watcher in the background, unless its owner is gone by then.
/// After a failed probe, lets the next wait probe again once
/// [`PROBE_AGAIN`] has passed.
async fn start_unless_dropped(
    starter: Starter,
    started: Weak<OnceCell<Option<Watcher>>>,
    probing: Arc<AtomicBool>,
) {
    let Some(cell) = started.upgrade() else {
        return;
    };
    let failed = cell.get_or_try_init(|| starter.run()).await.is_err();
    drop(cell);
    if failed {
        tokio::time::sleep(PROBE_AGAIN).await;
        probing.store(false, Ordering::Release);
    }
}

/// What a probe for change streams found.
enum Probe {
    Works,
    /// Not a replica set: for good.
    Unsupported,
    /// Anything else (a timeout, a network error, missing privileges),
    /// which may pass.
    Failed(String),
}

async fn probe(collection: &Collection<Document>, timeout: Duration) -> Probe {
    let probe = collection
        .watch()
        .pipeline([doc! { "$match": { "documentKey._id": { "$in": [] } } }])
        .read_concern(read_concern());
    match tokio::time::timeout(timeout, probe).await {
        Ok(Ok(_stream)) => Probe::Works,
        Ok(Err(error)) if code(&error) == Some(CHANGE_STREAMS_UNSUPPORTED) => {
            tracing::info!(
                "the server does not support change streams (not a replica set); waiters will poll"
            );
            Probe::Unsupported
        }
        Ok(Err(error)) => Probe::Failed(driver("opening a change stream", error).to_string()),
        Err(_) => Probe::Failed(format!("opening a change stream took over {timeout:?}")),
    }
}

/// What `distlock check` says of change streams on the collection.
pub(crate) async fn change_streams_feature(
    collection: &Collection<Document>,
    timeout: Duration,
) -> Feature {
    const NAME: &str = "change streams";
    match probe(collection, timeout).await {
        Probe::Works => Feature::present(NAME, "a release wakes waiters in every process at once"),
        Probe::Unsupported => Feature::degraded(
            NAME,
            "the server has none (not a replica set): waiters in other processes poll; run              MongoDB as a replica set, even of one member",
        ),
        Probe::Failed(error) => Feature::degraded(
            NAME,
            format!(
                "{error}: waiters in other processes poll; the user needs the changeStream                  and find actions on the collection"
            ),
        ),
    }
}

/// Whether the server supports change streams on the collection; for a
/// backend that decides once.
pub(crate) async fn change_streams_work(
    collection: &Collection<Document>,
    timeout: Duration,
) -> bool {
    match probe(collection, timeout).await {
        Probe::Works => true,
        Probe::Unsupported => false,
        Probe::Failed(error) => {
            tracing::warn!(%error, "release wake-ups are off; waiters will poll");
            false
        }
    }
}

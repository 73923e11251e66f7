//! Release wake-ups that start on first use, for handles built without
//! talking to the server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use distlock_core::{LockName, ReleaseHub, ReleaseWatch};
use mongodb::Collection;
use mongodb::bson::{Document, doc};
use tokio::sync::OnceCell;

use super::{Subject, Watcher};
use crate::error::{code, driver};

/// The error code of a server without change streams (not a replica set).
const CHANGE_STREAMS_UNSUPPORTED: i32 = 40573;

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
    probing: AtomicBool,
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
            probing: AtomicBool::new(false),
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
            runtime.spawn(start_unless_dropped(self.starter(), started));
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
            .get_or_init(|| self.starter().run())
            .await
            .is_some()
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
    async fn run(self) -> Option<Watcher> {
        if !change_streams_work(&self.collection, self.timeout).await {
            return None;
        }
        tracing::debug!(namespace = %self.collection.namespace(), "watching for releases");
        Some(Watcher::start(self.collection, self.hub, self.subject))
    }
}

/// Starts the watcher in the background, unless its owner is gone by then.
async fn start_unless_dropped(starter: Starter, started: Weak<OnceCell<Option<Watcher>>>) {
    if let Some(started) = started.upgrade() {
        started.get_or_init(|| starter.run()).await;
    }
}

/// Whether the server supports change streams on the collection.
pub(crate) async fn change_streams_work(
    collection: &Collection<Document>,
    timeout: Duration,
) -> bool {
    let probe = collection
        .watch()
        .pipeline([doc! { "$match": { "documentKey._id": { "$in": [] } } }]);
    match tokio::time::timeout(timeout, probe).await {
        Ok(Ok(_stream)) => true,
        Ok(Err(error)) if code(&error) == Some(CHANGE_STREAMS_UNSUPPORTED) => {
            tracing::info!(
                "the server does not support change streams (not a replica set); waiters will poll"
            );
            false
        }
        Ok(Err(error)) => {
            tracing::warn!(error = %driver("opening a change stream", error), "release wake-ups are off; waiters will poll");
            false
        }
        Err(_) => {
            tracing::warn!("opening a change stream timed out; release wake-ups are off");
            false
        }
    }
}

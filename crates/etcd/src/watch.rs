//! Watches for deletions: of a holder's own key (a loss), of the key a
//! waiter waits behind, or of any key of a semaphore's name (a wake-up).

use std::time::Duration;

use etcd_client::{EventType, KvClient, WatchClient, WatchFilterType, WatchOptions};
use tokio::task::JoinHandle;

/// A task that ends when dropped.
#[derive(Debug)]
pub(crate) struct Task(JoinHandle<()>);

impl Task {
    pub(crate) fn spawn(future: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(tokio::spawn(future))
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long to wait before watching again after the stream failed.
const RETRY: Duration = Duration::from_millis(200);

/// What a watch waits to see deleted.
#[derive(Clone)]
pub(crate) enum Watched {
    /// A waiter's predecessor: when etcd compacted the history the watch
    /// needs, the watch ends, since an unseen deletion would leave the
    /// waiter asleep and a spurious wake-up only costs a read.
    Predecessor(Vec<u8>),
    /// Any key in `start..end` (a semaphore's name: any holder leaving may
    /// let a waiter in); on compaction, as for a predecessor.
    AnyOf { start: Vec<u8>, end: Vec<u8> },
    /// A holder's own key, created at `revision`. On compaction the key is
    /// read: a false loss would be worse than a read.
    Own {
        key: Vec<u8>,
        revision: i64,
        kv: Box<KvClient>,
    },
}

impl Watched {
    pub(crate) fn key(&self) -> &[u8] {
        match self {
            Self::Predecessor(key) | Self::Own { key, .. } => key,
            Self::AnyOf { start, .. } => start,
        }
    }

    fn options(&self, from: i64) -> WatchOptions {
        let options = WatchOptions::new()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut])
            .with_progress_notify();
        match self {
            Self::AnyOf { end, .. } => options.with_range(end.clone()),
            _ => options,
        }
    }

    /// After a compaction past `from`: `Some(revision)` to watch again
    /// from, or `None` when the watch should end.
    async fn resume_after_compaction(&self) -> Option<i64> {
        let Self::Own { key, revision, kv } = self else {
            return None;
        };
        loop {
            match kv.as_ref().clone().get(key.clone(), None).await {
                Ok(response) => {
                    let ours = response
                        .kvs()
                        .first()
                        .is_some_and(|kv| kv.create_revision() == *revision);
                    let read_at = response.header().map_or(0, |header| header.revision());
                    return ours.then_some(read_at + 1);
                }
                Err(error) => {
                    tracing::debug!(%error, "reading an etcd key after compaction failed; reading again");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }
}

/// Waits until `watched` sees a deletion at a revision after `after`. A
/// broken stream is opened again from the last revision seen, so no
/// deletion is missed.
pub(crate) async fn deleted(client: WatchClient, watched: Watched, after: i64) {
    let mut from = after + 1;
    loop {
        let mut client = client.clone();
        let mut stream = match client
            .watch(watched.key().to_vec(), Some(watched.options(from)))
            .await
        {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "watching etcd failed; watching again");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        // Until the stream ends or fails; then it is opened again.
        while let Ok(Some(response)) = stream.message().await {
            if response.canceled() {
                if response.compact_revision() > 0 {
                    match watched.resume_after_compaction().await {
                        Some(revision) => from = revision,
                        None => return,
                    }
                }
                break;
            }
            if response
                .events()
                .iter()
                .any(|event| event.event_type() == EventType::Delete)
            {
                return;
            }
            if let Some(header) = response.header() {
                from = from.max(header.revision() + 1);
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

//! Watches for deletions: of a holder's own key (a loss, as is any write
//! of it by another: a resume), of the key a waiter waits behind, or of
//! any key of a semaphore's name (a wake-up).

use std::time::Duration;

use crate::raw::Client;
use crate::raw::etcdserverpb::watch_create_request::FilterType;
use crate::raw::etcdserverpb::{WatchCreateRequest, WatchResponse};
use crate::raw::mvccpb::event::EventType;
use crate::requests;
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
    /// A holder's own key, created at `revision` and last written by its
    /// grant at `modified`: a write after that (a resume taking it up under
    /// another identity) ends the grant as a deletion does. On compaction
    /// the key is read: a false loss would be worse than a read.
    Own {
        key: Vec<u8>,
        revision: i64,
        modified: i64,
        kv: Box<Client>,
    },
}

impl Watched {
    pub(crate) fn key(&self) -> &[u8] {
        match self {
            Self::Predecessor(key) | Self::Own { key, .. } => key,
            Self::AnyOf { start, .. } => start,
        }
    }

    /// The watch of deletions from revision `from` on; of every change,
    /// for a holder's own key.
    fn request(&self, from: i64) -> WatchCreateRequest {
        WatchCreateRequest {
            key: self.key().to_vec(),
            range_end: match self {
                Self::AnyOf { end, .. } => end.clone(),
                _ => Vec::new(),
            },
            start_revision: from,
            progress_notify: true,
            filters: match self {
                Self::Own { .. } => Vec::new(),
                _ => vec![FilterType::Noput as i32],
            },
        }
    }

    /// After a compaction past `from`: `Some(revision)` to watch again
    /// from, or `None` when the watch should end.
    async fn resume_after_compaction(&self) -> Option<i64> {
        let Self::Own {
            key,
            revision,
            modified,
            kv,
        } = self
        else {
            return None;
        };
        loop {
            match kv.range(requests::key(key.clone())).await {
                Ok(response) => {
                    let ours = response.kvs.first().is_some_and(|kv| {
                        kv.create_revision == *revision && kv.mod_revision == *modified
                    });
                    let read_at = response.header.map_or(0, |header| header.revision);
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

/// Waits until `watched` sees a deletion at a revision after `after` (or,
/// for a holder's own key, any write). A broken stream is opened again
/// from the last revision seen, so no deletion is missed.
pub(crate) async fn deleted(client: Client, watched: Watched, after: i64) {
    let mut from = after + 1;
    loop {
        let mut stream = match client.watch(watched.request(from)).await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "watching etcd failed; watching again");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        // Until the stream ends or fails; then it is opened again.
        while let Ok(Some(response)) = stream.message().await {
            if response.canceled {
                if response.compact_revision > 0 {
                    match watched.resume_after_compaction().await {
                        Some(revision) => from = revision,
                        None => return,
                    }
                }
                break;
            }
            match Seen::of(&response, &watched).advanced(from) {
                Some(next) => from = next,
                None => return,
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// What the watch loop reads of one response.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    /// The response that confirms the watch was made.
    created: bool,
    /// Whether one of its events ends the watch: a deletion, or any
    /// event on a holder's own key.
    ended: bool,
    /// The revision of its last event, if it has events.
    last_event: Option<i64>,
    /// The store's revision when it was sent.
    header: Option<i64>,
}

impl Seen {
    fn of(response: &WatchResponse, watched: &Watched) -> Self {
        let events = &response.events;
        let own = matches!(watched, Watched::Own { .. });
        Self {
            created: response.created,
            ended: events
                .iter()
                .any(|event| own || event.r#type == EventType::Delete as i32),
            last_event: events
                .iter()
                .filter_map(|event| event.kv.as_ref().map(|kv| kv.mod_revision))
                .max(),
            header: response.header.as_ref().map(|header| header.revision),
        }
    }

    /// The revision to watch from after this response, if the watch was
    /// watching from `from`; `None` once it reported an end.
    ///
    /// Only what the stream has delivered moves the start on: its events,
    /// or a progress notification, which etcd sends once every event up to
    /// its header's revision was sent. The header of the `created`
    /// response is the store's revision at that moment, before the events
    /// since `from` were sent: moving past it, a stream that broke before
    /// those events would reopen past a deletion it never saw.
    fn advanced(self, from: i64) -> Option<i64> {
        if self.ended {
            return None;
        }
        if self.created {
            return Some(from);
        }
        let seen = match self.last_event {
            Some(revision) => revision,
            None => self.header.unwrap_or(0),
        };
        Some(from.max(seen + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays `responses` to a watch started at `from`: the revision it
    /// would reopen from after the last one, or `None` after a deletion.
    fn play(from: i64, responses: &[Seen]) -> Option<i64> {
        responses
            .iter()
            .try_fold(from, |from, response| response.advanced(from))
    }

    const CREATED_AT_100: Seen = Seen {
        created: true,
        ended: false,
        last_event: None,
        header: Some(100),
    };

    #[test]
    fn a_stream_broken_after_created_reopens_where_it_began() {
        // The key was deleted at 60; the watch began at 50, etcd confirmed
        // it at 100, and the stream broke before the catch-up events came.
        assert_eq!(play(50, &[CREATED_AT_100]), Some(50));
        // Reopened from 50, the deletion is seen.
        let deletion = Seen {
            ended: true,
            last_event: Some(60),
            header: Some(100),
            ..Seen::default()
        };
        assert_eq!(play(50, &[CREATED_AT_100, deletion]), None);
    }

    #[test]
    fn events_and_progress_move_the_start_on() {
        let progress = Seen {
            header: Some(120),
            ..Seen::default()
        };
        assert_eq!(play(50, &[CREATED_AT_100, progress]), Some(121));
        // An event batch moves it past its last event, not past the header
        // (a later batch may still hold events below the header).
        let batch = Seen {
            last_event: Some(70),
            header: Some(100),
            ..Seen::default()
        };
        assert_eq!(play(50, &[CREATED_AT_100, batch]), Some(71));
        // Never backwards.
        assert_eq!(play(200, &[batch]), Some(200));
    }
}

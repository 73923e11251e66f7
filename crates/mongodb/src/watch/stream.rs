//! The release watcher: one change stream on the watched collection,
//! filtered to the names this process waits for, reopened as the names
//! change and resumed when it fails.

use std::collections::HashSet;
use std::time::Duration;

use distlock_core::LockName;
use distlock_core::backend::ReleaseHub;
use futures::StreamExt;
use mongodb::Collection;
use mongodb::bson::{Bson, Document, doc};
use mongodb::change_stream::event::{ChangeStreamEvent, ResumeToken};
use mongodb::options::ReadConcern;
use tokio::task::AbortHandle;

use super::subject::Subject;
use crate::document::{ID, PASSED_TO};
use crate::error::code;

/// Past this many names (or bytes of names), the stream watches every
/// release in the collection and this process drops the ones nobody here
/// waits for, rather than send an ever larger filter.
const MAX_FILTERED_NAMES: usize = 1000;
const MAX_FILTERED_BYTES: usize = 1 << 20;

/// How long to gather newly watched names before reopening the stream.
const SETTLE: Duration = Duration::from_millis(5);

/// The longest pause between attempts to reopen a failed stream.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// How long the server holds a poll of the stream that has no event to
/// return: the server answers as soon as an event comes, so this sets only
/// how often an idle stream asks again, one `getMore` each time. The
/// server's default, a second, made every waiting process a command a
/// second whatever the releases.
const AWAIT_EVENTS: Duration = Duration::from_secs(10);

/// How often an open stream checks whether anyone still waits, and closes
/// when nobody does.
const IDLE_CHECK: Duration = Duration::from_secs(30);

/// The server's codes for a change stream that cannot go on from where it
/// was: it refuses to resume from the token (ChangeStreamFatalError), or
/// the history the token points into is gone (ChangeStreamHistoryLost).
const CHANGE_STREAM_FATAL: i32 = 280;
const CHANGE_STREAM_HISTORY_LOST: i32 = 286;

/// The read concern of every change stream: MongoDB runs them only with
/// `majority` or none, and a handle's own (`local`, say) would be refused.
pub(crate) fn read_concern() -> ReadConcern {
    ReadConcern::majority()
}

/// Whether a stream that failed with the server's error `code` is resumed
/// after the last event it delivered, rather than replaced by a fresh one.
/// Not when the server said it cannot go on from there, nor when the
/// stream was itself resumed and failed before delivering anything: the
/// server may refuse that token on every `getMore`, and resuming from it
/// again would never end. A fresh stream misses what happened meanwhile, so
/// every waiter tries once more when it opens.
fn may_resume(code: Option<i32>, resumed: bool, delivered_any: bool) -> bool {
    let fatal = matches!(code, Some(CHANGE_STREAM_FATAL | CHANGE_STREAM_HISTORY_LOST));
    !fatal && (delivered_any || !resumed)
}

/// Stops the watching task when the backend is dropped.
#[derive(Debug)]
pub(crate) struct Watcher {
    task: AbortHandle,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watcher {
    /// Starts watching `collection` for releases of the names in `hub`.
    pub(crate) fn start(
        collection: Collection<Document>,
        hub: ReleaseHub,
        subject: Subject,
    ) -> Self {
        let task = tokio::spawn(supervise(collection, hub, subject)).abort_handle();
        Self { task }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs the watcher, and runs it again should it ever panic (in the
/// driver, say), so that waiters are not left without wake-ups.
async fn supervise(collection: Collection<Document>, hub: ReleaseHub, subject: Subject) {
    loop {
        let mut task = AbortOnDrop(tokio::spawn(run(
            collection.clone(),
            hub.clone(),
            subject.clone(),
        )));
        match (&mut task.0).await {
            Err(error) if error.is_panic() => {
                tracing::error!("the release watcher panicked; restarting it");
                // Releases may have been missed meanwhile.
                subject.notify_all(&hub);
                tokio::time::sleep(MAX_RETRY).await;
            }
            _ => return,
        }
    }
}

/// The change stream's filter: releases (the grant's identity, in the
/// field `lock_id`, removed), writes that say in the field `freed` that they
/// may let a waiter in, and deletions, of the documents `ids`, or of every
/// document when `ids` is `None`. Extensions and grants do not match, so
/// they wake nobody.
///
/// MongoDB may report a pipeline update as a `replace` event, with the new
/// document but no description of the change; so every write that neither
/// extends a lease nor removes the grant's identity either sets `freed`
/// afresh or removes it, and a `replace` with `freed` was a write that set
/// it. (An extension that left an older `freed` and is reported as a
/// `replace` wakes waiters for nothing: they try once, and their attempt
/// removes it.)
pub(crate) fn pipeline(
    lock_id: &str,
    freed: Option<&str>,
    places_of: Option<&str>,
    ids: Option<Vec<Bson>>,
) -> Vec<Document> {
    let mut released = vec![
        Bson::from(doc! { "operationType": "delete" }),
        doc! { "operationType": "update", "updateDescription.removedFields": lock_id }.into(),
        // Only a replacement that leaves no grant is a release; one that
        // installs a grant is an acquisition.
        doc! { "operationType": "replace", format!("fullDocument.{lock_id}"): { "$exists": false } }
            .into(),
    ];
    if let Some(freed) = freed {
        released.extend([
            Bson::from(doc! {
                "operationType": "update",
                format!("updateDescription.updatedFields.{freed}"): { "$exists": true },
            }),
            doc! { "operationType": "replace", format!("fullDocument.{freed}"): { "$exists": true } }
                .into(),
        ]);
    }
    if let Some(backend) = places_of {
        // A fair pass-on to one of our places: the place's identity begins
        // with the backend's, 16 hex digits, which need no escaping.
        let ours = doc! { "$regex": format!("^{backend}") };
        released.extend([
            Bson::from(doc! {
                "operationType": "update",
                format!("updateDescription.updatedFields.{PASSED_TO}"): ours.clone(),
            }),
            doc! { "operationType": "replace", format!("fullDocument.{PASSED_TO}"): ours }.into(),
        ]);
    }
    let released = doc! { "$or": released };
    let filter = match ids {
        Some(ids) => doc! {
            format!("documentKey.{ID}"): { "$in": ids },
            "$and": [released],
        },
        None => released,
    };
    vec![doc! { "$match": filter }]
}

/// What a write that passed a lock on wrote, as its change event tells:
/// the updated fields of an update, or the document a replacement left;
/// `None` for a write that passed nothing on. Either names the place in
/// `passedTo` and shows the grant it made.
fn pass_on(event: &ChangeStreamEvent<Document>) -> Option<&Document> {
    let names_a_place = |written: &&Document| written.get_str(PASSED_TO).is_ok();
    let updated = event
        .update_description
        .as_ref()
        .map(|change| &change.updated_fields)
        .filter(names_a_place);
    updated.or_else(|| event.full_document.as_ref().filter(names_a_place))
}

/// Whether `names` is small enough to filter on the server.
fn filter_on_server(names: &[LockName]) -> bool {
    names.len() <= MAX_FILTERED_NAMES
        && names.iter().map(|name| name.as_str().len()).sum::<usize>() <= MAX_FILTERED_BYTES
}

async fn run(collection: Collection<Document>, hub: ReleaseHub, subject: Subject) {
    let mut resume: Option<ResumeToken> = None;
    // The names the open (or last) stream's filter covers; `None` when it
    // covers every name.
    let mut covered: Option<HashSet<LockName>> = Some(HashSet::new());
    let mut retry = Duration::from_millis(50);
    loop {
        let names = hub.watched();
        if names.is_empty() {
            resume = None;
            covered = Some(HashSet::new());
            hub.changed().await;
            tokio::time::sleep(SETTLE).await;
            continue;
        }
        let on_server = filter_on_server(&names);
        let ids = on_server.then(|| {
            names
                .iter()
                .filter_map(|name| subject.id_of(name))
                .collect()
        });
        let resumed = resume.is_some();
        let opened = collection
            .watch()
            .pipeline(pipeline(
                subject.lock_id_field(),
                subject.freed_field(),
                subject.places_of(),
                ids,
            ))
            .read_concern(read_concern())
            .max_await_time(AWAIT_EVENTS)
            .resume_after(resume.clone())
            .await;
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(error) => {
                if resume.take().is_some() {
                    tracing::debug!(%error, "cannot resume the release stream; reopening it from now");
                } else {
                    tracing::warn!(%error, ?retry, "cannot open the release change stream; retrying");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(MAX_RETRY);
                }
                // Releases may have happened while no stream ran.
                subject.notify_all(&hub);
                covered = Some(HashSet::new());
                continue;
            }
        };
        retry = Duration::from_millis(50);
        // A name newly covered may have been released after its waiter's
        // last attempt but before this stream covered it: wake its waiters
        // once to try again.
        if let Some(previous) = &covered {
            for name in &names {
                if !previous.contains(name) {
                    subject.notify_name(&hub, name);
                }
            }
        }
        covered = on_server.then(|| names.iter().cloned().collect());
        // Where to resume a replacement stream: after the last event this one
        // delivered. The driver answers `resume_token` only between polls
        // (it panics while a `getMore` is in flight), so it is read right
        // after opening and after each event, never when the poll is
        // interrupted; events fetched by an interrupted poll are then
        // delivered again by the replacement.
        let mut delivered = stream.resume_token();
        let mut delivered_any = false;
        tracing::debug!(names = names.len(), on_server, "watching for releases");
        let mut idle_check = tokio::time::interval(IDLE_CHECK);
        idle_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        idle_check.tick().await;
        loop {
            tokio::select! {
                biased;
                _ = idle_check.tick() => {
                    if hub.watched().is_empty() {
                        tracing::debug!("nobody waits any more; closing the release stream");
                        resume = None;
                        covered = Some(HashSet::new());
                        break;
                    }
                }
                () = hub.changed() => {
                    tokio::time::sleep(SETTLE).await;
                    let uncovered = covered.as_ref().is_some_and(|covered| {
                        hub.watched().iter().any(|name| !covered.contains(name))
                    });
                    if uncovered {
                        resume = delivered.clone();
                        break;
                    }
                }
                event = stream.next() => {
                    match event {
                        Some(Ok(event)) => {
                            if let Some(id) = event.document_key.as_ref().and_then(|key| key.get(ID)) {
                                subject.notify(&hub, id, on_server, pass_on(&event));
                            }
                            delivered = stream.resume_token();
                            delivered_any = true;
                            continue;
                        }
                        Some(Err(error)) if may_resume(code(&error), resumed, delivered_any) => {
                            tracing::warn!(%error, "the release change stream failed; resuming it");
                            resume = stream.resume_token();
                        }
                        Some(Err(error)) => {
                            tracing::warn!(%error, "the release change stream cannot go on; starting afresh");
                            resume = None;
                            covered = Some(HashSet::new());
                        }
                        None => {
                            tracing::debug!("the release change stream ended; reopening it");
                            resume = None;
                            covered = Some(HashSet::new());
                        }
                    }
                    // The stream failed or ended: waiters try again while
                    // its replacement opens, after a growing pause.
                    subject.notify_all(&hub);
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(MAX_RETRY);
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::{FREED, LOCK_ID};

    #[test]
    fn the_filter_names_each_watched_lock_verbatim() {
        let names = [
            LockName::new("$$NOW").unwrap(),
            LockName::new("a.b").unwrap(),
        ];
        let ids = names
            .iter()
            .filter_map(|name| Subject::Locks.id_of(name))
            .collect();
        let pipeline = pipeline(LOCK_ID, Some(FREED), None, Some(ids));
        let filter = pipeline[0].get_document("$match").unwrap();
        let ids = filter
            .get_document("documentKey._id")
            .unwrap()
            .get_array("$in")
            .unwrap();
        assert_eq!(ids, &vec![Bson::from("$$NOW"), Bson::from("a.b")]);
    }

    #[test]
    fn a_stream_the_server_cannot_go_on_with_is_replaced_by_a_fresh_one() {
        // A passing failure of a stream that delivered events: resume.
        assert!(may_resume(None, false, false));
        assert!(may_resume(Some(6), true, true));
        // The server refuses to go on from the token, or lost its history.
        for code in [CHANGE_STREAM_FATAL, CHANGE_STREAM_HISTORY_LOST] {
            assert!(!may_resume(Some(code), false, true));
            assert!(!may_resume(Some(code), true, true));
        }
        // A resumed stream that failed before any event: its token may be
        // refused every time.
        assert!(!may_resume(Some(6), true, false));
        assert!(!may_resume(None, true, false));
    }

    #[test]
    fn a_pass_on_is_read_from_an_update_or_a_replacement() {
        use mongodb::bson::{DateTime, from_document};

        use crate::document::{EXPIRES_AT, FENCING_TOKEN};

        let event = |shape: Document| -> ChangeStreamEvent<Document> {
            let mut event = doc! {
                "_id": { "_data": "00" },
                "ns": { "db": "d", "coll": "c" },
                "documentKey": { ID: "n" },
            };
            event.extend(shape);
            from_document(event).unwrap()
        };
        let written = doc! {
            LOCK_ID: "p", PASSED_TO: "p", FENCING_TOKEN: 9_i64, EXPIRES_AT: DateTime::from_millis(5),
        };
        let update = event(doc! {
            "operationType": "update",
            "updateDescription": { "updatedFields": written.clone(), "removedFields": [] },
        });
        assert_eq!(pass_on(&update), Some(&written));
        let replace = event(doc! { "operationType": "replace", "fullDocument": written.clone() });
        assert_eq!(pass_on(&replace), Some(&written));
        let release = event(doc! {
            "operationType": "update",
            "updateDescription": { "updatedFields": { EXPIRES_AT: DateTime::from_millis(5) }, "removedFields": [LOCK_ID] },
        });
        assert_eq!(
            pass_on(&release),
            None,
            "a release to nobody passes nothing on"
        );
    }

    #[test]
    fn large_name_sets_are_filtered_here() {
        let names: Vec<LockName> = (0..=MAX_FILTERED_NAMES)
            .map(|i| LockName::new(i.to_string()).unwrap())
            .collect();
        assert!(!filter_on_server(&names));
        assert!(filter_on_server(&names[..10]));
    }
}

//! What the listening connection heard and its session has not handled
//! yet, in bounded memory.
//!
//! The connection's driver must never wait for the session: a driver that
//! stops reading lets the server's notification queue fill, and then every
//! release in the database goes without its notification. So the driver
//! only records, and a release is recorded once however often it is
//! announced before the session takes it: a burst for one name is one
//! wake-up. Past [`MAX_QUEUED`] distinct names the inbox forgets them all
//! and records that it overflowed, and the session wakes every waiter,
//! which then tries once more; none sleeps on a lost wake-up.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::channel::NameHash;

/// The most distinct names' releases kept for the session.
pub(crate) const MAX_QUEUED: usize = 1024;

/// The most probe answers kept: one probe is in flight at a time, so only
/// a stray one adds to it.
const MAX_PROBES: usize = 4;

/// What the session takes from the inbox, one at a time.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// A probe came back with this payload.
    Probe(String),
    /// These names' releases were announced.
    Releases(Vec<NameHash>),
    /// More names were announced than the inbox keeps: every waiter is to
    /// try again.
    Overflowed,
    /// The connection ended, for this reason; nothing follows.
    Ended(String),
}

/// How the inboxes of one backend's listening connections have fared, for
/// [`PostgresBackend::wake_up_queue`](crate::PostgresBackend::wake_up_queue).
#[derive(Debug, Default)]
pub(super) struct Gauges {
    most_queued: AtomicUsize,
    overflows: AtomicU64,
}

impl Gauges {
    pub(super) fn most_queued(&self) -> usize {
        self.most_queued.load(Ordering::Relaxed)
    }

    pub(super) fn overflows(&self) -> u64 {
        self.overflows.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
struct Pending {
    releases: HashSet<NameHash>,
    overflowed: bool,
    probes: VecDeque<String>,
    ended: Option<String>,
}

/// One listening connection's inbox: its driver records, its session
/// takes.
#[derive(Debug)]
pub(super) struct Inbox {
    pending: Mutex<Pending>,
    ready: Notify,
    gauges: Arc<Gauges>,
    /// Whether a notification other than a probe came since the session
    /// last asked (see [`take_heard`](Self::take_heard)).
    heard: AtomicBool,
}

impl Inbox {
    pub(super) fn new(gauges: Arc<Gauges>) -> Self {
        Self {
            pending: Mutex::new(Pending::default()),
            ready: Notify::new(),
            gauges,
            heard: AtomicBool::new(false),
        }
    }

    /// Records that a release's notification (not a probe) came over the
    /// connection: it delivers.
    pub(super) fn heard(&self) {
        self.heard.store(true, Ordering::Relaxed);
    }

    /// Whether a release's notification came since the last call.
    pub(super) fn take_heard(&self) -> bool {
        self.heard.swap(false, Ordering::Relaxed)
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a release of the names of `hash`.
    pub(super) fn release(&self, hash: NameHash) {
        {
            let mut pending = self.pending();
            if pending.overflowed || pending.releases.contains(&hash) {
                return;
            }
            if pending.releases.len() == MAX_QUEUED {
                // Everyone is woken instead: the names need not be kept.
                pending.releases = HashSet::new();
                pending.overflowed = true;
                self.gauges.overflows.fetch_add(1, Ordering::Relaxed);
            } else {
                pending.releases.insert(hash);
                self.gauges
                    .most_queued
                    .fetch_max(pending.releases.len(), Ordering::Relaxed);
            }
        }
        self.ready.notify_one();
    }

    /// Records a probe's answer.
    pub(super) fn probe(&self, payload: &str) {
        {
            let mut pending = self.pending();
            if pending.probes.len() == MAX_PROBES {
                pending.probes.pop_front();
            }
            pending.probes.push_back(payload.to_owned());
        }
        self.ready.notify_one();
    }

    /// Records that the connection ended, and why.
    pub(super) fn end(&self, why: String) {
        self.pending().ended.get_or_insert(why);
        self.ready.notify_one();
    }

    /// How many names' releases wait for the session now.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.pending().releases.len()
    }

    /// The next thing heard, once there is one: probes first, then
    /// releases, and the connection's end only once nothing else waits.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is taken unless it is returned.
    pub(super) async fn next(&self) -> Heard {
        loop {
            if let Some(heard) = self.take() {
                return heard;
            }
            self.ready.notified().await;
        }
    }

    fn take(&self) -> Option<Heard> {
        let mut pending = self.pending();
        if let Some(payload) = pending.probes.pop_front() {
            return Some(Heard::Probe(payload));
        }
        if std::mem::take(&mut pending.overflowed) {
            return Some(Heard::Overflowed);
        }
        if !pending.releases.is_empty() {
            let releases = std::mem::take(&mut pending.releases);
            return Some(Heard::Releases(releases.into_iter().collect()));
        }
        pending.ended.clone().map(Heard::Ended)
    }
}

#[cfg(test)]
mod tests {
    use distlock_core::LockName;

    use super::*;

    fn hash(i: usize) -> NameHash {
        NameHash::of(&LockName::new(format!("name-{i}")).unwrap())
    }

    fn inbox() -> Inbox {
        Inbox::new(Arc::default())
    }

    #[tokio::test]
    async fn a_burst_for_one_name_is_one_wake_up() {
        let inbox = inbox();
        for _ in 0..10_000 {
            inbox.release(hash(7));
        }
        assert_eq!(inbox.queued(), 1);
        assert_eq!(inbox.next().await, Heard::Releases(vec![hash(7)]));
        assert_eq!(inbox.queued(), 0);
    }

    #[tokio::test]
    async fn a_flood_of_names_stays_within_the_bound_and_wakes_everyone() {
        let inbox = inbox();
        for i in 0..100_000 {
            inbox.release(hash(i));
            assert!(inbox.queued() <= MAX_QUEUED);
        }
        assert!(inbox.gauges.most_queued() <= MAX_QUEUED);
        assert_eq!(inbox.gauges.most_queued(), MAX_QUEUED);
        assert_eq!(inbox.gauges.overflows(), 1);
        assert_eq!(inbox.next().await, Heard::Overflowed);
        // Releases after the overflow are heard again, one by one.
        inbox.release(hash(1));
        assert_eq!(inbox.next().await, Heard::Releases(vec![hash(1)]));
    }

    #[tokio::test]
    async fn probes_come_first_and_the_end_last() {
        let inbox = inbox();
        inbox.release(hash(1));
        inbox.end("closed".into());
        inbox.probe("nonce");
        assert_eq!(inbox.next().await, Heard::Probe("nonce".into()));
        assert_eq!(inbox.next().await, Heard::Releases(vec![hash(1)]));
        assert_eq!(inbox.next().await, Heard::Ended("closed".into()));
        assert_eq!(inbox.next().await, Heard::Ended("closed".into()));
    }

    #[tokio::test]
    async fn stray_probes_are_bounded() {
        let inbox = inbox();
        for i in 0..100 {
            inbox.probe(&i.to_string());
        }
        for i in 96..100 {
            assert_eq!(inbox.next().await, Heard::Probe(i.to_string()));
        }
    }

    #[test]
    fn a_release_heard_is_told_once() {
        let inbox = inbox();
        assert!(!inbox.take_heard(), "nothing heard yet");
        inbox.heard();
        inbox.heard();
        assert!(inbox.take_heard());
        assert!(!inbox.take_heard(), "told once");
    }
}

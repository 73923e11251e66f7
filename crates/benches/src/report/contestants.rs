//! What each contender of a contended table does between tries, and what
//! it promises: the table's *between tries* and *fencing token / lease*
//! cells. Every peer runs with its documented defaults; the values here
//! are read from each peer's own source (versions pinned in Cargo.lock and
//! `peers/requirements.txt`).

use distlock::LockOptions;

use super::{BackendResults, Contestant};

/// How `by` waits between two tries of the lock on `b`.
pub(super) fn between_tries(b: &BackendResults, by: Contestant) -> String {
    let text = match by {
        Contestant::Ours => return ours_between_tries(b),
        Contestant::MongoPeer => {
            "a fixed 10 ms sleep (`min_busy_wait_sleep_time`; its `max_busy_wait_sleep_time` \
             of 1 s is never used), no jitter"
        }
        Contestant::Tooz => {
            "1 s: tenacity's `wait_exponential(max=1)`, whose first wait is already its maximum"
        }
        Contestant::EtcdLockRpc => "none: `Lock` blocks in the server until granted",
        Contestant::PgAdvisoryLock => "none: `pg_advisory_lock` blocks in the server",
        Contestant::Rslock => {
            "a random 0–200 ms sleep after each of a call's first two tries; \
             `acquire_no_guard` then calls again at once"
        }
        Contestant::Redlock => {
            "a random 0–200 ms thread sleep after every try (three a call; we call again)"
        }
        Contestant::RawFlock => "none: `flock(LOCK_EX)` blocks in the kernel",
    };
    text.to_owned()
}

/// How our client waits on `b`: what wakes it, and its fallback.
fn ours_between_tries(b: &BackendResults) -> String {
    let jittered = format!(
        "a jittered {}–{} backoff",
        humantime::format_duration(LockOptions::DEFAULT_BACKOFF_MIN),
        humantime::format_duration(LockOptions::DEFAULT_BACKOFF_MAX),
    );
    let backoff = format!("{jittered}, never past the holder's lease");
    let woken = |by: &str| format!("woken by {by}; else {backoff}");
    match (b.kind, b.fair, b.advisory_mode) {
        ("MongoDB", true, _) => "none: a place in the document's line, woken by its pass-on".into(),
        ("MongoDB", false, _) => woken("the release on the change stream"),
        ("PostgreSQL", true, true) => "none: `pg_advisory_lock` blocks in the server".into(),
        ("PostgreSQL", false, true) => "woken by the release's `pg_notify`, or after 1 s".into(),
        ("PostgreSQL", true, false) => {
            "none: a place in the row's line, woken by the notification that grants it".into()
        }
        ("PostgreSQL", false, false) => woken("the release's `NOTIFY`"),
        ("etcd", fair, _) => format!(
            "none: a key per {} in line, woken by a watch on the key before it",
            if fair { "task" } else { "process" }
        ),
        ("Redis", ..) => woken("the release's `PUBLISH`"),
        // A file lock has no lease: it lasts as long as its holder's process.
        ("file", ..) => format!("woken by inotify on the release; else {jittered}"),
        ("memcached", ..) => format!("{backoff} (memcached has no notifications)"),
        _ => backoff,
    }
}

/// Whether `by` gives a fencing token, and what bounds its hold: the
/// table's *fencing token / lease* cell, where a peer that promises less
/// says so.
pub(super) fn promises(by: Contestant) -> &'static str {
    match by {
        Contestant::Ours => "yes / yes, extended in the background, with a loss signal",
        Contestant::MongoPeer => "**no** / 30 s expiry, **not extended**",
        Contestant::Tooz => {
            "**no** / 30 s expiry, extended only by the coordinator's heartbeat (not started)"
        }
        Contestant::EtcdLockRpc => {
            "the key's revision (not read here) / yes, its etcd lease kept alive"
        }
        Contestant::PgAdvisoryLock => "**no** / **no**: held as long as its connection",
        Contestant::Rslock | Contestant::Redlock => "**no** / 30 s `PX`, **not extended**",
        Contestant::RawFlock => "**no** / **no**: held as long as its open file",
    }
}

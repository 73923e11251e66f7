//! Release wake-ups across the processes of one machine.
//!
//! A releaser touches a signal file, `.<digest>.released`, after it drops
//! its lock. On Linux, waiters watch the directory with inotify and retry at
//! once when the signal of a name they wait for is written. Attempts
//! themselves never write signal files, so waiters cannot wake each other in
//! a loop. A holder that dies releases nothing: waiters then find the lock
//! free at their next timed retry.
//!
//! Elsewhere, or where [`PORTABLE`] forces it on Linux, there is no watch:
//! the backend reports no release wake-ups and core retries with the
//! client's backoff. Releases still write signal files, for the waiters of
//! other processes that do watch.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};

use distlock_core::LockName;
use distlock_core::backend::platform::PORTABLE;
use distlock_core::backend::{ReleaseHub, ReleaseWatch};

use crate::names;

#[cfg(target_os = "linux")]
mod inotify;

/// Where inotify does not exist, the watch is never started (see
/// [`watched`]); this keeps one code path above it on every system.
#[cfg(not(target_os = "linux"))]
mod inotify {
    pub(super) fn start(
        _dir: &std::path::Path,
        _hub: distlock_core::backend::ReleaseHub,
    ) -> std::io::Result<crate::wake::StopFlag> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

/// Whether waiters watch the directory: on Linux, unless [`PORTABLE`]
/// forces polling.
pub(crate) fn watched() -> bool {
    distlock_core::backend::platform::linux_only_calls()
}

/// The directory watcher of one backend, started when the first waiter
/// needs it.
#[derive(Debug, Default)]
pub(crate) struct DirWatch {
    hub: ReleaseHub,
    watcher: Mutex<Watcher>,
}

#[derive(Debug, Default)]
enum Watcher {
    #[default]
    NotStarted,
    /// Dropping the flag stops the watcher thread.
    Running {
        _stop: StopFlag,
    },
    Unavailable,
}

impl DirWatch {
    /// A watch on `name`, or `None` when the directory is not watched (the
    /// waiter then polls).
    pub(crate) fn watch(&self, dir: &Path, name: &LockName) -> Option<ReleaseWatch> {
        let mut watcher = self.watcher.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*watcher, Watcher::NotStarted) {
            *watcher = self.start(dir);
        }
        match *watcher {
            Watcher::Running { .. } => Some(self.hub.watch(name)),
            _ => None,
        }
    }

    fn start(&self, dir: &Path) -> Watcher {
        if !watched() {
            tracing::debug!(
                "no directory watch on this system or with {PORTABLE}; waiters will poll"
            );
            return Watcher::Unavailable;
        }
        match inotify::start(dir, self.hub.clone()) {
            Ok(stop) => Watcher::Running { _stop: stop },
            Err(error) => {
                tracing::debug!(%error, "no inotify; waiters will poll");
                Watcher::Unavailable
            }
        }
    }
}

/// Tells waiters in every process that `name` was released.
pub(crate) fn signal_release(dir: &Path, name: &LockName) {
    let path = dir.join(names::release_signal(name));
    let created = crate::files::no_follow()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path);
    if let Err(error) = created {
        tracing::debug!(%error, path = %path.display(), "could not signal a release");
    }
}

/// Set when the backend is dropped; the watcher thread then exits within a
/// second.
#[derive(Debug, Default)]
pub(crate) struct StopFlag(Arc<AtomicBool>);

impl Drop for StopFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

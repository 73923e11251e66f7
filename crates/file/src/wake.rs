//! Release wake-ups across the processes of one machine.
//!
//! A releaser touches a signal file, `.<digest>.released`, after it drops
//! its lock. Waiters watch the directory with inotify and retry at once when
//! the signal of a name they wait for is written. Attempts themselves never
//! write signal files, so waiters cannot wake each other in a loop. A holder
//! that dies releases nothing: waiters then find the lock free at their next
//! timed retry.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use distlock_core::{LockName, ReleaseHub, ReleaseWatch};
use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify;

use crate::names;

/// The directory watcher of one backend, started when the first waiter
/// needs it.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
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

impl Wakeups {
    /// A watch on `name`, or `None` when inotify cannot be used here (the
    /// waiter then polls).
    pub(crate) fn watch(&self, dir: &Path, name: &LockName) -> Option<ReleaseWatch> {
        let mut watcher = self.watcher.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*watcher, Watcher::NotStarted) {
            *watcher = match start(dir, self.hub.clone()) {
                Ok(stop) => Watcher::Running { _stop: stop },
                Err(error) => {
                    tracing::debug!(%error, "no inotify; waiters will poll");
                    Watcher::Unavailable
                }
            };
        }
        match *watcher {
            Watcher::Running { .. } => Some(self.hub.watch(name)),
            _ => None,
        }
    }
}

/// Tells waiters in every process that `name` was released.
pub(crate) fn signal_release(dir: &Path, name: &LockName) {
    let path = dir.join(names::release_signal(name));
    let created = crate::no_follow()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path);
    if let Err(error) = created {
        tracing::debug!(%error, path = %path.display(), "could not signal a release");
    }
}

/// How often the watcher thread checks whether its backend is gone.
const STOP_CHECK: rustix::time::Timespec = rustix::time::Timespec {
    tv_sec: 1,
    tv_nsec: 0,
};

fn start(dir: &Path, hub: ReleaseHub) -> std::io::Result<StopFlag> {
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
    inotify::add_watch(&fd, dir, inotify::WatchFlags::CLOSE_WRITE)?;
    let stop = StopFlag::default();
    let stopped = stop.0.clone();
    let dir = dir.to_path_buf();
    std::thread::Builder::new()
        .name("distlock-file-wakeups".into())
        .spawn(move || watch_dir(&fd, &dir, &hub, &stopped))?;
    Ok(stop)
}

/// Set when the backend is dropped; the watcher thread then exits within
/// [`STOP_CHECK`].
#[derive(Debug, Default)]
pub(crate) struct StopFlag(Arc<AtomicBool>);

impl Drop for StopFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn watch_dir(fd: &OwnedFd, dir: &Path, hub: &ReleaseHub, stopped: &AtomicBool) {
    let mut buffer = [MaybeUninit::<u8>::uninit(); 4096];
    while !stopped.load(Ordering::Relaxed) {
        let mut poll = [PollFd::new(fd, PollFlags::IN)];
        match rustix::event::poll(&mut poll, Some(&STOP_CHECK)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, dir = %dir.display(), "inotify failed; waiters fall back to polling");
                hub.notify_all();
                return;
            }
        }
        let mut released = Vec::new();
        let mut reader = inotify::Reader::new(fd, &mut buffer);
        loop {
            match reader.next() {
                Ok(event) => {
                    if event.events().contains(inotify::ReadFlags::QUEUE_OVERFLOW) {
                        hub.notify_all();
                    }
                    if let Some(digest) = event
                        .file_name()
                        .and_then(|n| names::signalled_digest(n.to_bytes()))
                    {
                        released.push(digest.to_owned());
                    }
                }
                Err(rustix::io::Errno::AGAIN) => break,
                Err(error) => {
                    tracing::warn!(%error, "reading inotify events failed");
                    break;
                }
            }
        }
        if !released.is_empty() {
            for name in hub.watched() {
                if released
                    .iter()
                    .any(|digest| *digest == names::digest(&name))
                {
                    hub.notify(&name);
                }
            }
        }
    }
}

//! The directory watch on Linux: inotify reports each signal file that a
//! releaser closes after writing.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use distlock_core::backend::ReleaseHub;
use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify;

use super::StopFlag;
use crate::names;

/// How often the watcher thread checks whether its backend is gone.
const STOP_CHECK: rustix::time::Timespec = rustix::time::Timespec {
    tv_sec: 1,
    tv_nsec: 0,
};

/// Starts a thread that wakes `hub`'s waiters when a signal file in `dir`
/// is written; it runs until the returned flag is dropped.
pub(super) fn start(dir: &Path, hub: ReleaseHub) -> std::io::Result<StopFlag> {
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

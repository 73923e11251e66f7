//! A raw blocking `flock(2)` beside the file backend: the physical limit of
//! a hand-off between processes on one machine. Each task opens the lock
//! file itself (a `flock` lock belongs to an open file description) and
//! takes it with `LOCK_EX`, which blocks in the kernel until the holder
//! unlocks and the kernel wakes the waiters. It has no lease, no token and
//! no wake-up of its own: nothing but the kernel's lock.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use distlock::BackendUrl;
use rustix::fs::{FlockOperation, flock};
use tokio::process::Command;

use crate::outcome::Outcome;
use crate::target::Target;
use crate::worker::{Layout, Take, Taker, WorkerArgs, drive, hold_then_release, report_worker};

/// The file the baseline locks, in the file backend's directory, apart from
/// the backend's own files.
fn lock_file(url: &str, lock: &str) -> Outcome<PathBuf> {
    match BackendUrl::parse(url) {
        Ok(BackendUrl::File(config)) => Ok(config.dir().join(format!("raw-flock-{lock}"))),
        Ok(_) => Err(format!(
            "the raw flock baseline needs a file:// URL, not {url}"
        )),
        Err(error) => Err(error.to_string()),
    }
}

/// The commands that start the baseline's contending workers.
pub(crate) fn workers(exe: &Path, target: &Target, lock: &str, layout: Layout) -> Vec<Command> {
    layout.commands(exe, "flock-worker", &target.url, lock)
}

/// One task's side of the baseline: its own open description of the file.
#[derive(Clone)]
struct FlockTaker {
    /// Every task's open file, by task.
    files: Arc<Vec<Arc<File>>>,
    file: Arc<File>,
}

fn open(path: &Path) -> Outcome<Arc<File>> {
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map(Arc::new)
        .map_err(|e| format!("{}: {e}", path.display()))
}

impl Taker for FlockTaker {
    async fn take_once(&self, left: Duration, work: Duration) -> Take {
        let file = self.file.clone();
        // The kernel's wait blocks a thread. A wait still blocked when the
        // window closes stays so until the worker exits, which ends it.
        let locked = tokio::task::spawn_blocking(move || {
            flock(&*file, FlockOperation::LockExclusive).map(|()| file)
        });
        let file = match tokio::time::timeout(left, locked).await {
            Err(_) => return Take::TimedOut,
            Ok(Ok(Ok(file))) => file,
            Ok(_) => return Take::Failed,
        };
        hold_then_release(work, 0, async move {
            flock(&*file, FlockOperation::Unlock).is_err()
        })
        .await
    }

    fn for_task(&self, task: u32) -> Self {
        Self {
            file: self.files[task as usize % self.files.len()].clone(),
            ..self.clone()
        }
    }
}

/// One worker process of the baseline: `tasks` tasks, each with its own
/// open file, taking the lock within the window; reports like ours.
pub(crate) async fn worker(args: &WorkerArgs) -> Outcome<()> {
    let path = lock_file(&args.backend, &args.lock)?;
    let files = (0..args.tasks.max(1))
        .map(|_| open(&path))
        .collect::<Outcome<Vec<_>>>()?;
    let taker = FlockTaker {
        file: files[0].clone(),
        files: Arc::new(files),
    };
    let log = drive(taker, args).await?;
    report_worker(log, None)
}

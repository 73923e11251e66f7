//! The scheduled job: while an instance leads, a tick every 200 ms,
//! written to a file fenced by the term, so that a deposed leader's late
//! tick is turned away rather than written over its successor's.

use std::io;
use std::path::PathBuf;

use distlock::file::fencing::FencedFile;
use tokio::time::MissedTickBehavior;

use crate::TICK_EVERY;
use crate::wire::Tick;

/// The job of one instance.
pub(crate) struct Job {
    file: FencedFile,
    instance: u64,
}

impl Job {
    pub(crate) fn new(path: PathBuf, instance: u64) -> Self {
        Self {
            file: FencedFile::new(path),
            instance,
        }
    }

    /// Runs the job for `term`, the first tick at once. It runs until a
    /// write is turned away, and then returns: a later term has written,
    /// so this instance no longer leads, whatever its lease says yet.
    ///
    /// # Errors
    /// An I/O error from the job's file.
    ///
    /// # Cancel safety
    /// Cancel safe: a tick being written completes in the background.
    pub(crate) async fn run(&self, term: u64) -> io::Result<()> {
        let mut every = tokio::time::interval(TICK_EVERY);
        every.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut tick = 0;
        loop {
            tick += 1;
            every.tick().await;
            let record = Tick {
                term,
                instance: self.instance,
                tick,
            };
            let contents = serde_json::to_vec(&record)?;
            let file = self.file.clone();
            // The fence flocks and syncs: blocking work, off the runtime.
            let written = tokio::task::spawn_blocking(move || file.write(term, &contents))
                .await
                .map_err(io::Error::other)??;
            if !written {
                return Ok(());
            }
        }
    }
}

/// The job's last tick, or `None` before the first.
///
/// # Errors
/// An I/O error, or a file that does not hold a tick.
pub(crate) fn last_tick(path: &std::path::Path) -> io::Result<Option<Tick>> {
    match std::fs::read(path) {
        Ok(contents) => Ok(Some(serde_json::from_slice(&contents)?)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

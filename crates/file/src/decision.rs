//! A name's decision lock, `.<SHA-256>.gate`: a file each process locks
//! exclusively for the moment it decides about the name.
//!
//! Readers and permits share the lock file, so whether they may go in, and
//! which fencing token they get, cannot be settled by that file's lock
//! alone: those decisions, and every look at who holds the lock file, are
//! made under the decision lock, one process at a time. An exclusive grant
//! that finds the lock file free needs no decision lock.

use std::fs::{File, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};

use distlock_core::{Error, Result};

use crate::files::{io_error, open_for_locking};

/// How long a process waits for a decision lock before it gives up: one
/// is held for a few system calls, so only a process stopped while holding
/// it keeps others out this long.
const PATIENCE: Duration = Duration::from_secs(5);

/// A decision lock, held until dropped (closing the file drops its lock).
#[derive(Debug)]
pub(crate) struct DecisionLock {
    _file: File,
}

impl DecisionLock {
    /// Waits for the decision lock at `path`.
    ///
    /// # Errors
    /// A backend error if the decision lock cannot be opened, or is held
    /// for longer than five seconds.
    ///
    /// # Cancel safety
    /// Cancel safe: a decision lock not yet taken is not held, and one taken is
    /// left when the future is dropped.
    pub(crate) async fn enter(path: &Path) -> Result<Self> {
        let file = open_for_locking(path)?;
        let started = Instant::now();
        let mut tries = 0u32;
        loop {
            tries += 1;
            match file.try_lock() {
                Ok(()) => return Ok(Self { _file: file }),
                Err(TryLockError::Error(e)) => {
                    return Err(io_error(format!("cannot lock {}", path.display()), e));
                }
                Err(TryLockError::WouldBlock) if started.elapsed() > PATIENCE => {
                    return Err(Error::Backend {
                        backend: "file",
                        message: format!(
                            "{} has been held for {PATIENCE:?}; a process may be stopped \
                             while it decides about that lock",
                            path.display()
                        ),
                        source: None,
                    });
                }
                // Most decision locks are free again within a few yields; past
                // that, the holder is slow, and spinning would only take its CPU.
                Err(TryLockError::WouldBlock) if tries < 64 => tokio::task::yield_now().await,
                Err(TryLockError::WouldBlock) => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
    }
}

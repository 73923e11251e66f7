//! A name's gate: a file each process locks exclusively for the moment it
//! decides about the name.
//!
//! Readers and permits share the lock file, so whether they may go in, and
//! which fencing token they get, cannot be settled by that file's lock
//! alone: those decisions, and every look at who holds the lock file, are
//! made inside the gate, one process at a time. An exclusive grant that
//! finds the lock file free needs no gate.

use std::fs::{File, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};

use distlock_core::{Error, Result};

use crate::{io_error, no_follow};

/// How long a process waits for a gate before it gives up: a gate is held
/// for a few system calls, so only a process stopped inside it keeps
/// others out this long.
const PATIENCE: Duration = Duration::from_secs(5);

/// A gate, held until dropped (closing the file drops its lock).
#[derive(Debug)]
pub(crate) struct Gate {
    _file: File,
}

impl Gate {
    /// Waits for the gate at `path`.
    ///
    /// # Errors
    /// A backend error if the gate cannot be opened, or is held for longer
    /// than five seconds.
    ///
    /// # Cancel safety
    /// Cancel safe: a gate not yet entered is not held, and one entered is
    /// left when the future is dropped.
    pub(crate) async fn enter(path: &Path) -> Result<Self> {
        let file = no_follow()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io_error(format!("cannot open {}", path.display()), e))?;
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
                // Most gates are free again within a few yields; past that,
                // the holder is slow, and spinning would only take its CPU.
                Err(TryLockError::WouldBlock) if tries < 64 => tokio::task::yield_now().await,
                Err(TryLockError::WouldBlock) => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
    }
}

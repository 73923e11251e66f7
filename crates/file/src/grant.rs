//! A grant's state: the files it holds locked, open until the grant is
//! released or its guard dropped, since closing them drops their locks.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use distlock_core::{LockName, Result};

use crate::files::{io_error, is_current};
use crate::record::Record;
use crate::wake::signal_release;

/// A locked file and where it was opened.
#[derive(Debug)]
pub(crate) struct LockedFile {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
}

impl LockedFile {
    fn is_current(&self) -> Result<bool> {
        is_current(&self.file, &self.path)
    }
}

/// What one grant holds: the lock file (exclusively for a writer, shared
/// for a reader or a permit) and, for a reader or a permit, its slot file.
#[derive(Debug)]
pub(crate) struct Held {
    locked: Mutex<Option<Locked>>,
    dir: PathBuf,
    name: LockName,
}

#[derive(Debug)]
struct Locked {
    lock_file: LockedFile,
    slot: Option<LockedFile>,
}

impl Held {
    pub(crate) fn new(
        dir: &Path,
        name: &LockName,
        lock_file: LockedFile,
        slot: Option<LockedFile>,
    ) -> Self {
        Self {
            locked: Mutex::new(Some(Locked { lock_file, slot })),
            dir: dir.to_owned(),
            name: name.clone(),
        }
    }

    fn locked(&self) -> MutexGuard<'_, Option<Locked>> {
        self.locked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `write` while the grant still holds its files, not released
    /// and not replaced by a forced release; `None` when it no longer
    /// does.
    pub(crate) fn while_held<T>(&self, write: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
        let locked = self.locked();
        match &*locked {
            Some(locked) if locked.is_current()? => write().map(Some),
            _ => Ok(None),
        }
    }

    /// Whether the grant is still ours: not released, and no forced release
    /// replaced its files.
    pub(crate) fn is_ours(&self) -> Result<bool> {
        match &*self.locked() {
            Some(locked) => locked.is_current(),
            None => Ok(false),
        }
    }

    /// Lets go of the files; returns whether the grant was still ours, or
    /// `false` when it had been released already.
    pub(crate) fn release(&self) -> bool {
        let Some(locked) = self.locked().take() else {
            return false;
        };
        let still_ours = locked.is_current().unwrap_or(false);
        locked.unlock();
        signal_release(&self.dir, &self.name);
        still_ours
    }
}

impl Held {
    /// Lets go of the files, leaving a marker in the lock file that keeps
    /// the lock held for `remaining` from now; returns whether the grant
    /// was still ours. The marker is written while the file is still
    /// locked, so whoever locks it next reads it whole.
    ///
    /// # Errors
    /// A backend error when the marker could not be written: the files are
    /// let go of all the same, and the lock is free at once.
    pub(crate) fn release_marked(&self, remaining: Duration) -> Result<bool> {
        let Some(mut locked) = self.locked().take() else {
            return Ok(false);
        };
        let still_ours = locked.is_current().unwrap_or(false);
        let marked = if still_ours {
            locked.mark(remaining)
        } else {
            Ok(())
        };
        locked.unlock();
        signal_release(&self.dir, &self.name);
        marked.map(|()| still_ours)
    }
}

impl Locked {
    /// Writes the marker of [`Held::release_marked`] into the lock file.
    fn mark(&mut self, remaining: Duration) -> Result<()> {
        let LockedFile { file, path } = &mut self.lock_file;
        let mut record = Record::read(file)
            .map_err(|e| io_error(format!("cannot read {}", path.display()), e))?;
        record.hold_for(remaining);
        record
            .write(file)
            .map_err(|e| io_error(format!("cannot write {}", path.display()), e))
    }

    fn is_current(&self) -> Result<bool> {
        Ok(self.lock_file.is_current()?
            && match &self.slot {
                Some(slot) => slot.is_current()?,
                None => true,
            })
    }

    /// Closing the files drops the locks; unlocking first drops them even
    /// if a duplicate of a descriptor were alive somewhere.
    fn unlock(self) {
        if let Some(slot) = &self.slot {
            let _ = slot.file.unlock();
        }
        let _ = self.lock_file.file.unlock();
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // A guard dropped where no release could run: the files close now,
        // which drops the locks; tell the waiters.
        if self.locked().take().is_some() {
            signal_release(&self.dir, &self.name);
        }
    }
}

//! Opening lock files safely, and taking or looking at their OS locks.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use distlock_core::{Error, Result};

/// How many times an attempt retries when the file was replaced between
/// opening and locking it.
const REPLACED_RETRIES: usize = 8;

/// How many times to try again for a slot that only someone looking at it
/// keeps us from.
const LOOKER_RETRIES: usize = 100;

/// How a file is locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The lock file, exclusively: by a writer.
    Exclusive,
    /// The lock file, shared: by a reader or a permit, to keep writers out.
    Shared,
    /// A slot file, exclusively. Only holders lock slot files exclusively;
    /// a shared lock on one is somebody looking, and never keeps us out.
    Slot,
}

/// Opens `path` and locks it in `mode` without waiting; `Ok(None)` when
/// somebody holds it. The file is checked to still be the one at `path`
/// once locked: a forced release replaces files, and a lock on a replaced
/// file protects nothing.
///
/// # Errors
/// A backend error if the file cannot be opened or locked, or keeps being
/// replaced.
pub(crate) fn open_locked(path: &Path, mode: Mode) -> Result<Option<File>> {
    for _ in 0..REPLACED_RETRIES {
        let file = open_for_locking(path)?;
        let locked = match mode {
            Mode::Exclusive => try_lock(file.try_lock()),
            Mode::Shared => try_lock(file.try_lock_shared()),
            Mode::Slot => lock_unless_looked_at(&file),
        }
        .map_err(|e| io_error(format!("cannot lock {}", path.display()), e))?;
        if !locked {
            return Ok(None);
        }
        if is_current(&file, path)? {
            return Ok(Some(file));
        }
    }
    Err(Error::Backend {
        backend: "file",
        message: format!("{} keeps being replaced while we lock it", path.display()),
        source: None,
    })
}

/// Opens `path` to be locked, made if missing, its contents kept; a
/// symbolic link is refused.
///
/// # Errors
/// A backend error if the file cannot be opened.
pub(crate) fn open_for_locking(path: &Path) -> Result<File> {
    no_follow()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io_error(format!("cannot open {}", path.display()), e))
}

fn try_lock(outcome: std::result::Result<(), TryLockError>) -> io::Result<bool> {
    match outcome {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// Takes the exclusive lock of a slot file; `Ok(false)` when a holder has
/// it. Where the exclusive lock fails but a shared one can be had, only
/// someone looking has it: try again.
fn lock_unless_looked_at(file: &File) -> io::Result<bool> {
    for _ in 0..LOOKER_RETRIES {
        if try_lock(file.try_lock())? {
            return Ok(true);
        }
        if !try_lock(file.try_lock_shared())? {
            return Ok(false);
        }
        file.unlock()?;
        std::thread::yield_now();
    }
    Ok(false)
}

/// Whether somebody holds `file` exclusively: a writer, for the lock file;
/// a holder, for a slot file. Looks with a shared lock of a moment.
pub(crate) fn is_held_exclusively(file: &File) -> io::Result<bool> {
    if try_lock(file.try_lock_shared())? {
        file.unlock()?;
        return Ok(false);
    }
    Ok(true)
}

/// Whether anybody holds `file`, shared or exclusively. Looks with an
/// exclusive lock of a moment, so only under the name's decision lock, where no
/// process takes the file meanwhile.
pub(crate) fn is_held_at_all(file: &File) -> io::Result<bool> {
    if try_lock(file.try_lock())? {
        file.unlock()?;
        return Ok(false);
    }
    Ok(true)
}

/// Options that refuse to open a symbolic link, so that nobody who can
/// write the lock directory can point a lock file at a file of ours.
pub(crate) fn no_follow() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.custom_flags(libc_flag(rustix::fs::OFlags::NOFOLLOW));
    options
}

fn libc_flag(flag: rustix::fs::OFlags) -> i32 {
    i32::try_from(flag.bits()).expect("open flags fit an int")
}

/// Puts a file holding `contents` at `path` in one step: written to
/// `temp` beside it, then renamed over it, so that readers see the old
/// file or the new one, never part of one. `temp` is removed on failure.
pub(crate) fn replace_whole(temp: &Path, path: &Path, contents: &[u8]) -> io::Result<()> {
    let write = || -> io::Result<()> {
        let mut file = no_follow()
            .write(true)
            .create(true)
            .truncate(true)
            .open(temp)?;
        io::Write::write_all(&mut file, contents)?;
        std::fs::rename(temp, path)
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(temp);
    })
}

/// Opens `path` to look at it, if it exists.
pub(crate) fn open_existing(path: &Path) -> Result<Option<File>> {
    match no_follow().read(true).open(path) {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(format!("cannot open {}", path.display()), e)),
    }
}

/// Whether `file` is still the file at `path`.
pub(crate) fn is_current(file: &File, path: &Path) -> Result<bool> {
    let ours = file
        .metadata()
        .map_err(|e| io_error(format!("cannot stat {}", path.display()), e))?;
    match std::fs::metadata(path) {
        Ok(there) => Ok(there.dev() == ours.dev() && there.ino() == ours.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(format!("cannot stat {}", path.display()), e)),
    }
}

pub(crate) fn io_error(message: String, error: io::Error) -> Error {
    let message = format!("{message}: {error}");
    if error.kind() == io::ErrorKind::PermissionDenied {
        // Stays so until someone changes the directory's permissions.
        return Error::denied("file", message, error);
    }
    Error::backend("file", message, error)
}

//! distlock's embedded default backend: one OS file lock per name, in a
//! directory shared by the processes of one machine.
//!
//! # How it works
//! - Each name maps to one file, `<readable prefix>-<SHA-256 of the name>.lock`,
//!   so any name is safe and distinct names never share a file.
//! - Taking the lock is a non-blocking exclusive `flock(2)` on that file.
//!   The kernel drops the lock when the holder's process dies, so a crashed
//!   holder frees its locks at once: locks here are *process-bound*, with
//!   no lease to expire.
//! - The file records the name, the last fencing token and the holder, so
//!   tokens persist across releases and restarts. A new token is
//!   `max(previous + 1, microseconds since the epoch)`, so tokens keep
//!   increasing even if the directory is wiped, as long as the clock does.
//! - A forced release atomically replaces the file (keeping its token). The
//!   holder's check at its next extension sees that its file is no longer
//!   the one at the path, and reports the lock lost.
//!
//! - A release touches a signal file, `.<SHA-256>.released`, and waiters in
//!   every process watch the directory with inotify, so they retry the
//!   moment a lock is released instead of polling.
//!
//! # Limits
//! Only processes that share the directory on one machine's local file
//! system are coordinated. `flock` over NFS is not reliable: use a network
//! backend across machines. Token writes are not fsynced; after a power loss
//! the clock-based floor keeps tokens increasing.

mod names;
mod record;
mod wake;

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use distlock_core::{
    AcquireRequest, Attempt, Backend, Capabilities, Claim, Error, GrantState, Lease, LockInfo,
    LockKind, LockName, ReleaseWatch, Result, WaitState, token_floor,
};

use crate::record::Record;
use crate::wake::{Wakeups, signal_release};

/// How many times an attempt retries when the file was replaced between
/// opening and locking it.
const REPLACED_RETRIES: usize = 8;

/// Locks held as OS file locks in one directory.
#[derive(Debug)]
pub struct FileBackend {
    dir: PathBuf,
    wakeups: Wakeups,
}

/// A grant's state: the locked file, open until the grant is released or
/// its guard dropped, since closing it drops the OS lock.
#[derive(Debug)]
struct HeldFile {
    file: Mutex<Option<File>>,
    path: PathBuf,
    dir: PathBuf,
    name: LockName,
}

impl HeldFile {
    fn file(&self) -> std::sync::MutexGuard<'_, Option<File>> {
        self.file.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for HeldFile {
    fn drop(&mut self) {
        // A guard dropped where no release could run: the file closes now,
        // which drops the lock; tell the waiters.
        if self.file().take().is_some() {
            signal_release(&self.dir, &self.name);
        }
    }
}

impl FileBackend {
    /// Uses `dir`, creating it (and its parents) if it is missing.
    ///
    /// # Errors
    /// A backend error if the directory cannot be created or is not a
    /// directory.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        // Private to this user when we create it.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                io_error(
                    format!("cannot create the lock directory {}", dir.display()),
                    e,
                )
            })?;
        let meta = std::fs::metadata(&dir).map_err(|e| {
            io_error(
                format!("cannot read the lock directory {}", dir.display()),
                e,
            )
        })?;
        if !meta.is_dir() {
            return Err(Error::config(
                "file backend directory",
                format!("{} is not a directory", dir.display()),
            ));
        }
        if dir == Self::default_dir() {
            check_private(&dir)?;
        }
        Ok(Self {
            dir,
            wakeups: Wakeups::default(),
        })
    }

    /// The default directory: `/tmp/distlock-<uid>`. It depends on nothing
    /// but the user, so that every process of the user finds the same
    /// locks: cron jobs and services have no `XDG_RUNTIME_DIR`, and `TMPDIR`
    /// differs between sessions. It sits in a directory every user can
    /// write, so [`open`](Self::open) refuses it unless it is a directory of
    /// this user's that nobody else can write.
    pub fn default_dir() -> PathBuf {
        PathBuf::from(format!(
            "/tmp/distlock-{}",
            rustix::process::getuid().as_raw()
        ))
    }

    /// The directory the locks live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, name: &LockName) -> PathBuf {
        self.dir.join(names::file_name(name))
    }

    fn try_lock_path(&self, path: &Path) -> Result<Option<File>> {
        for _ in 0..REPLACED_RETRIES {
            let file = no_follow()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(|e| io_error(format!("cannot open {}", path.display()), e))?;
            if !lock_unless_held(&file)
                .map_err(|e| io_error(format!("cannot lock {}", path.display()), e))?
            {
                return Ok(None);
            }
            // A forced release may have replaced the file between our open
            // and our lock; a lock on the old file protects nothing.
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
}

/// How many times to try again for a lock that only someone looking at it
/// keeps us from.
const LOOKER_RETRIES: usize = 100;

/// Takes the exclusive lock of `file`; `Ok(false)` when a holder has it.
///
/// Holders lock exclusively; `list` and a forced release take a shared lock
/// for a moment, to see whether a holder has it. Such a look must not make
/// the lock seem held to someone taking it, so where the exclusive lock
/// fails but a shared one can be had, nobody holds it: try again.
fn lock_unless_held(file: &File) -> io::Result<bool> {
    for _ in 0..LOOKER_RETRIES {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(TryLockError::Error(e)) => return Err(e),
            Err(TryLockError::WouldBlock) => {}
        }
        match file.try_lock_shared() {
            Ok(()) => {
                file.unlock()?;
                std::thread::yield_now();
            }
            Err(TryLockError::WouldBlock) => return Ok(false),
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
    Ok(false)
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

/// Refuses a directory in a place every user can write (the default one,
/// under `/tmp`) unless it is a real directory of this user's that nobody
/// else can write: another user could have made it first, and would then
/// control every lock in it.
fn check_private(dir: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| {
        io_error(
            format!("cannot read the lock directory {}", dir.display()),
            e,
        )
    })?;
    let uid = rustix::process::getuid().as_raw();
    let problem = if meta.file_type().is_symlink() {
        Some("is a symbolic link".to_owned())
    } else if meta.uid() != uid {
        Some(format!(
            "belongs to uid {}, not to this user (uid {uid})",
            meta.uid()
        ))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!(
            "can be written by others (mode {:o})",
            meta.mode() & 0o777
        ))
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(Error::config(
            "file backend directory",
            format!(
                "{} {problem}, so another user could control its locks; remove it (distlock \
                 makes it again, private), or name a directory of your own with file:///path",
                dir.display()
            ),
        )),
    }
}

/// Whether `file` is still the file at `path`.
fn is_current(file: &File, path: &Path) -> Result<bool> {
    let ours = file
        .metadata()
        .map_err(|e| io_error(format!("cannot stat {}", path.display()), e))?;
    match std::fs::metadata(path) {
        Ok(there) => Ok(there.dev() == ours.dev() && there.ino() == ours.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(format!("cannot stat {}", path.display()), e)),
    }
}

fn io_error(message: String, error: io::Error) -> Error {
    Error::backend("file", format!("{message}: {error}"), error)
}

#[async_trait]
impl Backend for FileBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
            .with_process_bound(true)
            .with_release_wakeups(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest, _: &mut WaitState) -> Result<Attempt> {
        if request.claim != Claim::Exclusive {
            return Err(Error::Unsupported(format!(
                "the file backend does not grant {} yet; the memory backend does",
                request.claim
            )));
        }
        let path = self.path_of(&request.name);
        let Some(mut file) = self.try_lock_path(&path)? else {
            return Ok(Attempt::Held { retry_after: None });
        };
        let previous = Record::read(&mut file).map_or(0, |record| record.fencing_token);
        // Only an edited or corrupt file holds the largest token; another
        // grant could not be given a larger one.
        let next = previous.checked_add(1).ok_or_else(|| Error::Backend {
            backend: "file",
            message: format!(
                "{} holds the largest possible fencing token, so no later grant could \
                 have a larger one; the file was edited or is corrupt",
                path.display()
            ),
            source: None,
        })?;
        let fencing_token = next.max(token_floor(SystemTime::now()));
        let record = Record {
            name: request.name.as_str().to_owned(),
            fencing_token,
            holder: Some(distlock_core::Holder::clone(&request.holder)),
            acquired_at_ms: Some(token_floor(SystemTime::now()) / 1000),
        };
        record
            .write(&mut file)
            .map_err(|e| io_error(format!("cannot write {}", path.display()), e))?;
        let state = GrantState::new(HeldFile {
            file: Mutex::new(Some(file)),
            path,
            dir: self.dir.clone(),
            name: request.name.clone(),
        });
        Ok(Attempt::Acquired {
            fencing_token,
            state,
        })
    }

    async fn extend(&self, lease: &Lease) -> Result<bool> {
        let Some(held) = lease.state.get::<HeldFile>() else {
            return Ok(false);
        };
        match &*held.file() {
            Some(file) => is_current(file, &held.path),
            None => Ok(false),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        // A grant lives in its state: a lease without one (an attempt whose
        // answer never came) holds nothing here.
        let Some(held) = lease.state.get::<HeldFile>() else {
            return Ok(false);
        };
        let Some(file) = held.file().take() else {
            return Ok(false);
        };
        let still_ours = is_current(&file, &held.path).unwrap_or(false);
        // Closing the file drops the lock; unlock first so the lock goes even
        // if a duplicate of the descriptor were alive somewhere.
        let _ = file.unlock();
        drop(file);
        signal_release(&self.dir, &lease.name);
        Ok(still_ours)
    }

    async fn list(&self) -> Result<Vec<LockInfo>> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| io_error(format!("cannot list {}", self.dir.display()), e))?;
        let mut locks = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if !names::is_lock_file(&path) {
                continue;
            }
            let Ok(mut file) = no_follow().read(true).open(&path) else {
                continue;
            };
            match file.try_lock_shared() {
                Ok(()) => continue,
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(_)) => continue,
            }
            let Ok(record) = Record::read(&mut file) else {
                continue;
            };
            let Ok(name) = LockName::new(&record.name) else {
                continue;
            };
            locks.push(LockInfo {
                name,
                kind: LockKind::Exclusive,
                permits: None,
                holder: record.holder,
                fencing_token: Some(record.fencing_token),
                expires_in: None,
            });
        }
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(locks)
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        let path = self.path_of(name);
        let mut old = match no_follow().read(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_error(format!("cannot open {}", path.display()), e)),
        };
        let was_held = matches!(old.try_lock_shared(), Err(TryLockError::WouldBlock));
        let fencing_token = Record::read(&mut old).map_or(0, |record| record.fencing_token);
        let replacement = Record {
            name: name.as_str().to_owned(),
            fencing_token,
            holder: None,
            acquired_at_ms: None,
        };
        let temp = self.dir.join(names::temp_name(name));
        let write = || -> io::Result<()> {
            let mut file = no_follow()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&temp)?;
            replacement.write(&mut file)?;
            std::fs::rename(&temp, &path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            io_error(format!("cannot replace {}", path.display()), e)
        })?;
        signal_release(&self.dir, name);
        Ok(was_held)
    }

    fn watch_releases(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.wakeups.watch(&self.dir, name)
    }
}

#[cfg(test)]
mod tests {
    use distlock_core::{Holder, LockOptions};

    use super::*;

    #[tokio::test]
    async fn a_file_at_the_largest_token_is_refused_not_wrapped() {
        let dir = tempfile::tempdir().unwrap();
        let backend = FileBackend::open(dir.path()).unwrap();
        let name = LockName::new("exhausted").unwrap();
        let mut file = File::create(backend.path_of(&name)).unwrap();
        Record {
            name: name.as_str().to_owned(),
            fencing_token: u64::MAX,
            holder: None,
            acquired_at_ms: None,
        }
        .write(&mut file)
        .unwrap();
        drop(file);
        match backend
            .try_acquire(&request(&name), &mut WaitState::new())
            .await
        {
            Err(Error::Backend { message, .. }) => {
                assert!(
                    message.contains("largest possible fencing token"),
                    "{message}"
                )
            }
            other => panic!("expected a backend error, got {other:?}"),
        }
    }

    fn request(name: &LockName) -> AcquireRequest {
        AcquireRequest::new(
            name.clone(),
            Claim::Exclusive,
            LockOptions::DEFAULT_LEASE,
            Holder::this_process(None).into(),
        )
    }

    #[tokio::test]
    async fn a_lock_file_planted_as_a_symbolic_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let backend = FileBackend::open(dir.path().join("locks")).unwrap();
        let name = LockName::new("planted").unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, backend.path_of(&name)).unwrap();
        assert!(
            backend
                .try_acquire(&request(&name), &mut WaitState::new())
                .await
                .is_err()
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn only_a_private_directory_of_ours_passes() {
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&private)
            .unwrap();
        assert!(check_private(&private).is_ok());

        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        let mut refused = vec![(open, "written by others"), (link, "symbolic link")];
        // Only root can give a directory away.
        if rustix::process::getuid().is_root() {
            let theirs = dir.path().join("theirs");
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&theirs)
                .unwrap();
            std::os::unix::fs::chown(&theirs, Some(4242), None).unwrap();
            refused.push((theirs, "belongs to uid 4242"));
        }
        for (path, why) in refused {
            match check_private(&path) {
                Err(Error::InvalidConfig { reason, .. }) => {
                    assert!(reason.contains(why), "{reason}")
                }
                other => panic!("{}: expected a refusal, got {other:?}", path.display()),
            }
        }
    }

    /// `list` looks at each lock file with a shared lock of a moment; that
    /// must never make a free lock look held to someone taking it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn looking_at_a_free_lock_never_makes_it_look_held() {
        let dir = tempfile::tempdir().unwrap();
        let backend = std::sync::Arc::new(FileBackend::open(dir.path()).unwrap());
        let name = LockName::new("looked-at").unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let looker = {
            let (backend, done) = (backend.clone(), done.clone());
            tokio::spawn(async move {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    backend.list().await.unwrap();
                }
            })
        };
        let mut refused = 0;
        for _ in 0..2000 {
            let request = request(&name);
            match backend
                .try_acquire(&request, &mut WaitState::new())
                .await
                .unwrap()
            {
                Attempt::Acquired {
                    fencing_token,
                    state,
                } => {
                    let lease = request.granted(fencing_token, state);
                    assert!(backend.release(&lease).await.unwrap());
                }
                Attempt::Held { .. } => refused += 1,
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        looker.await.unwrap();
        assert_eq!(refused, 0, "a free lock looked held {refused} times");
    }
}

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
//! - Readers and semaphore permits hold the lock file with a *shared*
//!   `flock`, which keeps writers out and is kept out by a writer, and each
//!   also holds a slot file of its own exclusively (`….r<i>.lock` for
//!   readers, `….p<i>.lock` for the `limit` permits of a semaphore), which
//!   counts it and records its holder and token. Whether a reader or a
//!   permit may go in, and its token, are decided one process at a time
//!   inside the name's gate, `.<SHA-256>.gate`, a file locked exclusively
//!   for a moment. A writer that waits holds a shared lock on
//!   `.<SHA-256>.writers`, and readers that come after it wait while
//!   anyone does. All of these are the kernel's locks, so a holder or a
//!   waiting writer that dies lets go at once.
//! - A forced release atomically replaces the lock file and every slot file
//!   (keeping the token). Each holder's check at its next extension sees
//!   that its files are no longer the ones at their paths, and reports the
//!   lock lost.
//!
//! - A release before the grant's
//!   [`min_hold`](distlock_core::AcquireOptions::min_hold) has passed
//!   writes a marker into the lock file, under its lock: the time the hold
//!   ends, on this machine's wall clock. Until then a writer, a reader or a
//!   permit that locks the file finds the marker and answers that the lock
//!   is held (with the time left), `list` shows it, and a forced release
//!   removes it. So the lock outlives its holder's process by at most
//!   `min_hold`, and a clock stepped back keeps it longer, one stepped
//!   forward frees it sooner.
//!
//! - A campaign's grant ([`Election`](distlock_core::Election)) also
//!   records its term in `.<SHA-256>.terms`, under the lock file's
//!   exclusive lock and before the grant is answered, keeping the last
//!   [`TERMS_KEPT`](distlock_core::TERMS_KEPT): the record observers read
//!   every term from. It is replaced whole, so readers need no lock. A
//!   process killed between its grant and that write leaves a grant that
//!   never led (its campaign never returned) and no term.
//!
//! - A release touches a signal file, `.<SHA-256>.released`, and on Linux
//!   waiters in every process watch the directory with inotify, so they
//!   retry the moment a lock is released instead of polling.
//!
//! # Platforms
//! The locks are `flock(2)`, which every Unix has; only the wake-ups are
//! Linux's. On macOS and the BSDs waiters poll instead, with the client's
//! backoff (between 5 ms and 500 ms by default): a release reaches a waiter
//! at its next retry rather than at once, and
//! [`Backend::wakeups`] is `None`. Setting the environment
//! variable `DISTLOCK_PORTABLE=1` makes a process on Linux poll the same
//! way, which is how the tests run that path. `docs/platforms.md` says what
//! is tested where.
//!
//! # Limits
//! Only processes that share the directory on one machine's local file
//! system are coordinated. `flock` over NFS is not reliable: use a network
//! backend across machines. Token writes are not fsynced; after a power loss
//! the clock-based floor keeps tokens increasing.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
pub mod fencing;
mod files;
mod gate;
mod held;
mod names;
mod privacy;
mod record;
mod shared;
mod terms;
mod wake;

use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, Claim, DelayedRelease, Error,
    Extended, GrantState, Holder, Lease, LockInfo, LockName, ReleaseWatch, Result, ServerInfo,
    Term, TermLog, WaitState, Wakeups,
};

use crate::files::{Mode, io_error, open_existing, open_locked};
use crate::gate::Gate;
use crate::held::{Held, LockedFile};
use crate::names::SlotKind;
use crate::record::{Record, SharedKind, next_token, now_ms};
use crate::shared::WriterMark;
use crate::terms::TermRecord;
use crate::wake::{DirWatch, signal_release};

pub(crate) use crate::files::no_follow;

/// Locks held as OS file locks in one directory.
#[derive(Debug)]
pub struct FileBackend {
    dir: PathBuf,
    wakeups: DirWatch,
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
            privacy::check_private(&dir)?;
        }
        Ok(Self {
            dir,
            wakeups: DirWatch::default(),
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

    /// Takes `request.name` exclusively: at once when nobody has the lock
    /// file; otherwise, inside the gate, finds out whether someone really
    /// holds it (a look may have had it for a moment), and if so whether as
    /// a semaphore, and marks a writer that will wait.
    async fn acquire_exclusive(
        &self,
        request: &AcquireRequest,
        wait: &mut WaitState,
    ) -> Result<Attempt> {
        let path = self.path_of(&request.name);
        if let Some(file) = open_locked(&path, Mode::Exclusive)? {
            return self.grant_exclusive(request, wait, file, path);
        }
        let _gate = Gate::enter(&self.dir.join(names::gate_name(&request.name))).await?;
        if let Some(file) = open_locked(&path, Mode::Exclusive)? {
            return self.grant_exclusive(request, wait, file, path);
        }
        let last = open_existing(&path)?.and_then(|mut file| Record::read(&mut file).ok());
        if let Some(SharedKind::Permit { limit }) = last.and_then(|record| record.shared)
            && !shared::live_slots(self, &request.name, SlotKind::Permit, limit)?.is_empty()
        {
            return Err(request
                .claim
                .conflict(&request.name, Claim::Permit { limit }));
        }
        if request.retries {
            shared::mark_writer(self, &request.name, wait)?;
        }
        Ok(Attempt::Held { retry_after: None })
    }

    fn grant_exclusive(
        &self,
        request: &AcquireRequest,
        wait: &mut WaitState,
        mut file: File,
        path: PathBuf,
    ) -> Result<Attempt> {
        let previous = Record::read(&mut file).ok();
        if let Some(left) = previous.as_ref().and_then(Record::held_for) {
            // Released before its min_hold had passed: held until then.
            // Returning closes the file, which lets go of it.
            return Ok(Attempt::Held {
                retry_after: Some(left),
            });
        }
        // A writer that waited stops keeping readers out only once it holds
        // the lock, which keeps them out itself.
        drop(wait.take::<WriterMark>());
        let previous = previous.map_or(0, |record| record.fencing_token);
        let mut fencing_token = next_token(previous, &path)?;
        let terms = request
            .records_term
            .then(|| TermRecord::of(&self.dir, &request.name));
        if let Some(terms) = &terms {
            // Terms increase even if the lock file was replaced since the
            // last one and the clock has stepped back.
            if let Some(last) = terms.last()? {
                fencing_token = fencing_token.max(last.saturating_add(1));
            }
        }
        let record = Record {
            name: request.name.as_str().to_owned(),
            fencing_token,
            holder: Some(distlock_core::Holder::clone(&request.holder)),
            acquired_at_ms: Some(now_ms()),
            shared: None,
            held_until_ms: None,
        };
        record
            .write(&mut file)
            .map_err(|e| io_error(format!("cannot write {}", path.display()), e))?;
        if let Some(terms) = &terms {
            // Under the lock, before the grant is answered: a campaign that
            // returns has its term recorded. Failing, the file closes and
            // the grant ends with it.
            terms.append(fencing_token, &request.holder)?;
        }
        let lock_file = LockedFile { file, path };
        Ok(Attempt::Acquired {
            fencing_token,
            state: GrantState::new(Held::new(&self.dir, &request.name, lock_file, None)),
        })
    }
}

#[async_trait]
impl Backend for FileBackend {
    fn store_name(&self) -> &'static str {
        "file"
    }

    async fn server_info(&self) -> Result<ServerInfo> {
        Ok(ServerInfo::default().with_feature(privacy::directory_feature(&self.dir)))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
            .with_process_bound(true)
            .with_shared(true)
            .with_semaphores(true)
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        match request.claim {
            Claim::Exclusive => self.acquire_exclusive(request, wait).await,
            Claim::Shared => shared::acquire(self, request, SharedKind::Reader).await,
            Claim::Permit { limit } => {
                shared::acquire(self, request, SharedKind::Permit { limit }).await
            }
        }
    }

    async fn end_wait(&self, request: &AcquireRequest, wait: WaitState) -> Result<()> {
        // Dropping the state drops a waiting writer's mark; the readers it
        // held back may go now.
        drop(wait);
        signal_release(&self.dir, &request.name);
        Ok(())
    }

    /// A flock needs no extension: each lease is still ours while its
    /// file is.
    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        let outcomes = leases
            .iter()
            .map(|lease| match lease.state.get::<Held>() {
                Some(held) => held.is_ours(),
                None => Ok(false),
            })
            .collect();
        Extended::new(outcomes, None)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        // A grant lives in its state: a lease without one (an attempt whose
        // answer never came) holds nothing here.
        Ok(lease.state.get::<Held>().is_some_and(Held::release))
    }

    async fn list(&self) -> Result<Vec<LockInfo>> {
        admin::list(self).await
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        admin::force_release(self, name).await
    }

    fn abilities(&self) -> Abilities<'_> {
        let abilities = Abilities::none()
            .with_delayed_release(self)
            .with_term_log(self);
        if wake::watched() {
            abilities.with_wakeups(self)
        } else {
            abilities
        }
    }
}

#[async_trait]
impl TermLog for FileBackend {
    async fn terms_after(&self, name: &LockName, after: u64) -> Result<Vec<Term>> {
        TermRecord::of(&self.dir, name).after(after)
    }

    /// Rewrites the record while the grant still holds its lock file
    /// exclusively, as every write of the record is made. A grant that no
    /// longer does, or whose answer never came (and so never held
    /// anything here), withdraws nothing.
    async fn withdraw(&self, lease: &Lease, holder: &Holder) -> Result<()> {
        let Some(held) = lease.state.get::<Held>() else {
            return Ok(());
        };
        let record = TermRecord::of(&self.dir, &lease.name);
        held.while_held(|| record.withdraw(lease.fencing_token, holder))?;
        Ok(())
    }
}

/// A flock ends with its process, so a release before `min_hold` has
/// passed leaves a marker in the lock file, judged by this machine's wall
/// clock: the lock outlives its holder's process by at most `min_hold`.
#[async_trait]
impl DelayedRelease for FileBackend {
    async fn release_after(&self, lease: &Lease, remaining: Duration) -> Result<bool> {
        if lease.claim != Claim::Exclusive {
            // A marker keeps the whole name: only a writer may leave one.
            return Err(Error::Unsupported(
                "the file backend keeps only an exclusive lock after its release (min_hold)".into(),
            ));
        }
        match lease.state.get::<Held>() {
            Some(held) => held.release_marked(remaining),
            None => Ok(false),
        }
    }
}

impl Wakeups for FileBackend {
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
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
            shared: None,
            held_until_ms: None,
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
                    // A list of free gates never awaits: without a yield
                    // this loop would hold its worker for good, and the
                    // runtime's timers and the other tasks with it.
                    tokio::task::yield_now().await;
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

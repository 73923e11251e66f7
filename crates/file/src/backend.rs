//! The backend: [`FileBackend`], its directory, and every trait it
//! implements; the operations on the files live in the modules below.

use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, DelayedRelease, Extended,
    GrantState, Lease, ReleaseWatch, ServerInfo, Term, TermLog, WaitState, Wakeups,
};
use distlock_core::{Claim, Error, Holder, LockInfo, LockName, Result};

use crate::decision::DecisionLock;
use crate::files::{Mode, io_error, open_existing, open_locked};
use crate::grant::{Held, LockedFile};
use crate::names::SlotKind;
use crate::record::{Record, SharedKind, next_token, now_ms};
use crate::shared::WriterMark;
use crate::terms::TermRecord;
use crate::wake::{DirWatch, signal_release};
use crate::{admin, names, privacy, shared, wake};

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
        names::lock_path(&self.dir, name)
    }

    /// Takes `request.name` exclusively: at once when nobody has the lock
    /// file; otherwise, under the decision lock, finds out whether someone really
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
        let _deciding =
            DecisionLock::enter(&self.dir.join(names::decision_lock_name(&request.name))).await?;
        if let Some(file) = open_locked(&path, Mode::Exclusive)? {
            return self.grant_exclusive(request, wait, file, path);
        }
        let last = open_existing(&path)?.and_then(|mut file| Record::read(&mut file).ok());
        if let Some(SharedKind::Permit { limit }) = last.and_then(|record| record.shared)
            && !shared::live_slots(&self.dir, &request.name, SlotKind::Permit, limit)?.is_empty()
        {
            return Err(request
                .claim
                .conflict(&request.name, Claim::Permit { limit }));
        }
        if request.retries {
            shared::mark_writer(&self.dir, &request.name, wait)?;
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

    /// Reads only this machine's directory: `limit` is core's to keep.
    async fn server_info(&self, _: Duration) -> Result<ServerInfo> {
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
            Claim::Shared => shared::acquire(&self.dir, request, SharedKind::Reader).await,
            Claim::Permit { limit } => {
                shared::acquire(&self.dir, request, SharedKind::Permit { limit }).await
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

    async fn list(&self, _: Duration) -> Result<Vec<LockInfo>> {
        admin::list(&self.dir).await
    }

    async fn force_release(&self, name: &LockName, _: Duration) -> Result<bool> {
        admin::force_release(&self.dir, name).await
    }

    fn abilities(&self) -> Abilities<'_> {
        let abilities = Abilities::none()
            .with_delayed_release(self)
            .with_term_log(self)
            .without_resumes(
                "a file lock is the open file of the process that took it, and ends with that process",
            );
        if wake::watched() {
            abilities.with_wakeups(self)
        } else {
            abilities
        }
    }
}

#[async_trait]
impl TermLog for FileBackend {
    async fn terms_after(&self, name: &LockName, after: u64, _: Duration) -> Result<Vec<Term>> {
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
                    backend.list(Duration::from_secs(5)).await.unwrap();
                    // A list of free decision locks never awaits: without a yield
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

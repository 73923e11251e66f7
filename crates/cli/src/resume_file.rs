//! `distlock run --resume-file PATH`: the handle of the held lock kept in
//! a file while CMD runs, so that a run restarted after being killed (by a
//! supervisor, a deploy, the OOM killer) takes its own grant up again
//! instead of queueing behind it until its lease runs out.

use std::io::Write;
use std::path::{Path, PathBuf};

use distlock::backend::Resuming;
use distlock::{Claim, Error, LockClient, LockGuard, LockName, ResumeHandle};

use crate::exit::Failure;
use crate::text;

/// The file a run keeps its handle in.
pub(crate) struct ResumeFile {
    path: PathBuf,
}

impl ResumeFile {
    /// The file at `path`, for a run of `names` on `client`'s backend:
    /// refused when the backend cannot resume, or for several locks.
    ///
    /// # Errors
    /// A usage failure that says why, before anything is taken.
    pub(crate) fn new(
        path: PathBuf,
        client: &LockClient,
        names: &[LockName],
    ) -> Result<Self, Failure> {
        let backend = client.backend();
        if let Resuming::Never(why) = backend.abilities().resumes {
            return Err(Failure::usage(format!(
                "--resume-file: {} cannot resume a lock: {why}",
                backend.store_name()
            )));
        }
        if names.len() != 1 {
            return Err(Failure::usage(
                "--resume-file keeps the handle of one lock; run with one name, or without it",
            ));
        }
        Ok(Self { path })
    }

    fn shown(&self) -> String {
        text::printable(&self.path.display().to_string())
    }

    /// The handle the file keeps, if there is one, checked to be of
    /// `name` and `claim`.
    ///
    /// # Errors
    /// A usage failure for a file that cannot be read or names another
    /// lock, saying what to do.
    fn read(&self, name: &LockName, claim: Claim) -> Result<Option<ResumeHandle>, Failure> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => {
                return Err(Failure::usage(format!(
                    "--resume-file {}: cannot read it: {error}",
                    self.shown()
                )));
            }
        };
        let handle: ResumeHandle = text.parse().map_err(|error| {
            Failure::usage(format!(
                "--resume-file {} holds no lock handle ({error}); give a file of its own, \
                 or remove it",
                self.shown()
            ))
        })?;
        if handle.name() != name || handle.claim() != claim {
            return Err(Failure::usage(format!(
                "--resume-file {} holds the handle of {} on lock {}, not of {claim} on {name}; \
                 give each lock a file of its own",
                self.shown(),
                handle.claim(),
                handle.name()
            )));
        }
        Ok(Some(handle))
    }

    /// Takes up the grant the file names, if the store still holds it;
    /// `None` when there is no file, or its grant is gone (said on stderr
    /// unless `quiet`), and the lock is then waited for as usual.
    ///
    /// # Errors
    /// As [`read`](Self::read), and the store's errors.
    pub(crate) async fn take_up(
        &self,
        client: &LockClient,
        name: &LockName,
        claim: Claim,
        quiet: bool,
    ) -> Result<Option<LockGuard>, Failure> {
        let Some(handle) = self.read(name, claim)? else {
            return Ok(None);
        };
        match client.resume(&handle).await {
            Ok(guard) => {
                if !quiet {
                    eprintln!(
                        "distlock: resumed lock {} (fencing token {}) from {}",
                        text::printable(name.as_str()),
                        guard.fencing_token(),
                        self.shown()
                    );
                }
                Ok(Some(guard))
            }
            Err(Error::Lost { .. }) => {
                if !quiet {
                    eprintln!(
                        "distlock: the grant in {} is no longer held; waiting for lock {} as usual",
                        self.shown(),
                        text::printable(name.as_str())
                    );
                }
                self.remove();
                Ok(None)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Writes `guard`'s handle, readable by this user alone, in one step
    /// (a new file renamed over the old), so that a run killed at any
    /// moment leaves the old handle or the new one, never half of one.
    /// The returned value removes the file when dropped.
    ///
    /// # Errors
    /// A runtime failure naming the file.
    pub(crate) fn keep(self, guard: &LockGuard) -> Result<KeptHandle, Failure> {
        let failed = |error: std::io::Error| {
            Failure::runtime(format!(
                "--resume-file {}: cannot write the lock's handle: {error}",
                self.shown()
            ))
        };
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut temp = tempfile::Builder::new()
            .prefix(".distlock-handle")
            .tempfile_in(dir)
            .map_err(failed)?;
        // tempfile creates it readable by its owner alone.
        writeln!(temp, "{}", guard.handle()).map_err(failed)?;
        temp.as_file().sync_all().map_err(failed)?;
        temp.persist(&self.path)
            .map_err(|error| failed(error.error))?;
        Ok(KeptHandle { file: self })
    }

    fn remove(&self) {
        if let Err(error) = std::fs::remove_file(&self.path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(%error, file = %self.shown(), "could not remove the resume file");
        }
    }
}

/// The handle written while the lock is held; removed on drop, which
/// every way out of `run` but being killed outright passes through.
pub(crate) struct KeptHandle {
    file: ResumeFile,
}

impl Drop for KeptHandle {
    fn drop(&mut self) {
        self.file.remove();
    }
}

//! The unfenced witness: a counter that exclusive holders read, pause on,
//! and write back plus one, with no token. Nothing turns a write away, so
//! an update lost there shows that two holders acted at once, whatever
//! the tokens say; the fenced counter, which refuses stale tokens by
//! design, can only show a repeated token.
//!
//! It lives in the fenced store's directory, behind a lock file of its
//! own, so that a read and the write after it are two steps, as a real
//! resource's would be.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

use crate::outcome::Outcome;

/// The witness of one run.
#[derive(Debug, Clone)]
pub(crate) struct Witness {
    dir: PathBuf,
}

impl Witness {
    /// The witness in `dir` (the fenced store's), 0 if never written.
    pub(crate) fn in_dir(dir: &Path) -> Witness {
        Witness {
            dir: dir.to_owned(),
        }
    }

    /// Its value.
    ///
    /// # Errors
    /// An I/O error, or a file that holds no number.
    pub(crate) fn read(&self) -> Outcome<u64> {
        let _lock = self.locked()?;
        match std::fs::read_to_string(self.path()) {
            Ok(text) => Ok(text.trim().parse()?),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(error) => Err(error.into()),
        }
    }

    /// Sets its value to `value`, whatever it is now.
    ///
    /// # Errors
    /// An I/O error.
    pub(crate) fn write(&self, value: u64) -> Outcome<()> {
        let _lock = self.locked()?;
        std::fs::write(self.path(), value.to_string())?;
        Ok(())
    }

    fn path(&self) -> PathBuf {
        self.dir.join("witness")
    }

    /// Its lock, held until the file returned closes.
    fn locked(&self) -> Outcome<File> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join("witness.lock"))?;
        flock(&file, FlockOperation::LockExclusive)?;
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_holders_that_act_at_once_lose_an_update() {
        let dir = tempfile::tempdir().unwrap();
        let witness = Witness::in_dir(dir.path());
        let (first, second) = (witness.read().unwrap(), witness.read().unwrap());
        witness.write(first + 1).unwrap();
        witness.write(second + 1).unwrap();
        // Two writes, one increment: what the judge counts as lost.
        assert_eq!(witness.read().unwrap(), 1);
    }
}

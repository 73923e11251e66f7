//! Fencing on the protected side, for a local file: a write that a stale
//! lock holder cannot make.
//!
//! A lock's fencing token is only as good as the store that checks it.
//! [`FencedFile`] keeps, beside the file, the highest token that wrote it
//! (`<file>.fence`), and writes the file only for a token at least that
//! high, checking and writing under an exclusive `flock(2)` of the fence.
//! A holder that paused past its lock, and whose lock went to someone who
//! has written since, then writes nothing.
//!
//! ```
//! use distlock_file::fencing::FencedFile;
//!
//! # fn main() -> std::io::Result<()> {
//! # let dir = tempfile::tempdir()?;
//! let report = FencedFile::new(dir.path().join("report.json"));
//! assert!(report.write(7, b"{\"rows\": 10}")?);  // the holder of token 7
//! assert!(report.write(9, b"{\"rows\": 12}")?);  // the next holder
//! assert!(!report.write(7, b"{\"rows\": 11}")?); // the first, late: refused
//! assert_eq!(std::fs::read(dir.path().join("report.json"))?, b"{\"rows\": 12}");
//! # Ok(())
//! # }
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

/// A file written only by the holder of the highest fencing token seen.
#[derive(Debug, Clone)]
pub struct FencedFile {
    path: PathBuf,
    fence: PathBuf,
}

impl FencedFile {
    /// The file at `path`, fenced by `<path>.fence` beside it.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let mut fence = path.clone().into_os_string();
        fence.push(".fence");
        Self {
            path,
            fence: fence.into(),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's contents with `contents` if `token` is at least
    /// the highest token that wrote it, and records `token`: `Ok(true)`
    /// when written, `Ok(false)` when a higher token has written. The
    /// contents are replaced whole (written beside the file, then renamed
    /// over it), so readers see the old contents or the new.
    ///
    /// It blocks while another writer of the same file checks and writes.
    /// The token is recorded before the contents are renamed into place,
    /// so a crash in between leaves the old contents and a fence that still
    /// refuses every older token.
    ///
    /// # Errors
    /// An I/O error from the fence or the file; a fence that does not hold
    /// a token is [`io::ErrorKind::InvalidData`].
    pub fn write(&self, token: u64, contents: &[u8]) -> io::Result<bool> {
        let mut fence = self.open_fence()?;
        flock(&fence, FlockOperation::LockExclusive)?;
        if read_token(&mut fence)?.is_some_and(|highest| highest > token) {
            return Ok(false);
        }
        fence.set_len(0)?;
        fence.rewind()?;
        fence.write_all(format!("{token}\n").as_bytes())?;
        fence.sync_data()?;
        let mut staged = self.path.clone().into_os_string();
        staged.push(format!(".{token}.{}.tmp", std::process::id()));
        let staged = PathBuf::from(staged);
        let mut file = File::create(&staged)?;
        file.write_all(contents)?;
        file.sync_data()?;
        std::fs::rename(&staged, &self.path)?;
        // The flock ends as the fence closes.
        Ok(true)
    }

    /// The highest token that has written the file, if any has.
    ///
    /// # Errors
    /// As for [`write`](Self::write).
    pub fn token(&self) -> io::Result<Option<u64>> {
        let mut fence = match File::open(&self.fence) {
            Ok(fence) => fence,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        flock(&fence, FlockOperation::LockShared)?;
        read_token(&mut fence)
    }

    fn open_fence(&self) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&self.fence)
    }
}

/// The token a fence holds; `None` for a new, empty one.
fn read_token(fence: &mut File) -> io::Result<Option<u64>> {
    let mut text = String::new();
    fence.rewind()?;
    fence.read_to_string(&mut text)?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the fence holds `{text}`, not a fencing token"),
        )
    })
}

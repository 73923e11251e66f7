//! The fenced resource: a counter in a file that every holder of the lock
//! under test reads and increments, accepting an operation only with a
//! fencing token at least as high as the highest it has seen.
//!
//! Processes share it through an exclusive `flock` on its state file, which
//! has nothing to do with the lock under test. Every operation, accepted or
//! rejected, is appended to its log.
//!
//! **Kinds.** A writer (an exclusive holder) is accepted when its token is
//! at least the highest token seen of any kind, and raises it. A reader
//! only reads: it is accepted when its token is at least the highest
//! *writer* token seen, so readers whose grants overlap share a range of
//! tokens (every reader token since the last writer's), and a reader
//! granted before a later writer is turned away once that writer has been
//! seen. Semaphore holders are not fenced against each other (permits are
//! held side by side by design); they are judged by how many hold at once.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};
use serde::{Deserialize, Serialize};

use crate::clock::now_ns;
use crate::outcome::Outcome;

/// The store's state, rewritten by every accepted operation.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    /// The highest token seen in an accepted operation, of any kind.
    pub(crate) highest: u64,
    /// The highest token seen in an accepted writer's operation.
    pub(crate) highest_writer: u64,
    /// The counter.
    pub(crate) value: u64,
    /// The last accepted operation's entry, and the log's length once it
    /// is appended: a process killed between writing the state and its
    /// log line leaves the log short of an operation that took effect,
    /// and the next one to take the store's lock appends that line.
    #[serde(default)]
    pub(crate) last: Option<Entry>,
    #[serde(default)]
    pub(crate) log_len: u64,
}

/// What an operation was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Op {
    /// A writer's read of the counter, before it writes.
    Read,
    /// A writer's write of the counter.
    Write,
    /// A reader's read.
    SharedRead,
}

/// One line of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) op: Op,
    pub(crate) token: u64,
    pub(crate) accepted: bool,
    /// The value read, or written.
    pub(crate) value: u64,
    /// When, on the machine's monotonic clock.
    pub(crate) at_ns: u64,
    pub(crate) pid: u32,
}

/// A fenced counter in a directory.
#[derive(Debug, Clone)]
pub(crate) struct FencedStore {
    dir: PathBuf,
}

impl FencedStore {
    /// The store in `dir`, created empty if it is not there.
    ///
    /// # Errors
    /// An I/O error.
    pub(crate) fn open(dir: &Path) -> Outcome<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// The run's unfenced witness, beside the counter.
    pub(crate) fn witness(&self) -> crate::witness::Witness {
        crate::witness::Witness::in_dir(&self.dir)
    }

    /// A writer's read, with `token`: the counter if accepted.
    ///
    /// # Errors
    /// An I/O error.
    pub(crate) fn read(&self, token: u64) -> Outcome<Option<u64>> {
        self.apply(Op::Read, token, |state| {
            (token >= state.highest).then(|| {
                state.highest = token;
                state.highest_writer = token;
                state.value
            })
        })
    }

    /// A writer's write of `value`, with `token`: whether it was accepted.
    ///
    /// # Errors
    /// An I/O error.
    pub(crate) fn write(&self, token: u64, value: u64) -> Outcome<bool> {
        let accepted = self.apply(Op::Write, token, |state| {
            (token >= state.highest).then(|| {
                state.highest = token;
                state.highest_writer = token;
                state.value = value;
                value
            })
        })?;
        Ok(accepted.is_some())
    }

    /// A reader's read, with `token`: the counter if accepted.
    ///
    /// # Errors
    /// An I/O error.
    pub(crate) fn shared_read(&self, token: u64) -> Outcome<Option<u64>> {
        self.apply(Op::SharedRead, token, |state| {
            (token >= state.highest_writer).then(|| {
                state.highest = state.highest.max(token);
                state.value
            })
        })
    }

    /// The state now.
    ///
    /// # Errors
    /// An I/O error, or a state file that cannot be read.
    pub(crate) fn state(&self) -> Outcome<State> {
        let mut file = self.locked()?;
        read_state(&mut file)
    }

    /// Whether some process is inside an operation on the store now (holds
    /// its lock), as a holder stopped mid-operation would be.
    ///
    /// # Errors
    /// An I/O error.
    pub(crate) fn is_busy(&self) -> Outcome<bool> {
        // Ours for a moment, if free: let go at once, as the file closes.
        Ok(self.try_locked()?.is_none())
    }

    /// The state file, made if missing and not yet locked.
    fn state_file(&self) -> Outcome<File> {
        Ok(OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(self.dir.join("state.json"))?)
    }

    /// The state file under the store's lock, if no process holds it.
    fn try_locked(&self) -> Outcome<Option<File>> {
        let file = self.state_file()?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(file)),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Every entry of the log, in the order they were made.
    ///
    /// # Errors
    /// An I/O error, or a line that cannot be read.
    pub(crate) fn log(&self) -> Outcome<Vec<Entry>> {
        // Mended only when no process is inside an operation: one may be
        // stopped there, and the log is read while it is.
        if let Some(mut file) = self.try_locked()? {
            self.mend_log(&read_state(&mut file)?)?;
        }
        let text = match std::fs::read_to_string(self.log_path()) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error.into()),
        };
        let mut entries = Vec::new();
        for line in text.lines() {
            entries.push(serde_json::from_str(line)?);
        }
        Ok(entries)
    }

    /// Runs `decide` on the state under the store's lock; an accepted
    /// operation (`Some` value) writes the state back. Either way the
    /// operation is logged before the lock is let go.
    fn apply(
        &self,
        op: Op,
        token: u64,
        decide: impl FnOnce(&mut State) -> Option<u64>,
    ) -> Outcome<Option<u64>> {
        let mut file = self.locked()?;
        let mut state = read_state(&mut file)?;
        self.mend_log(&state)?;
        let outcome = decide(&mut state);
        let entry = Entry {
            op,
            token,
            accepted: outcome.is_some(),
            value: outcome.unwrap_or(0),
            at_ns: now_ns(),
            pid: std::process::id(),
        };
        let line = log_line(&entry)?;
        if outcome.is_some() {
            state.last = Some(entry);
            state.log_len = self.log_len()? + line.len() as u64;
            let text = serde_json::to_vec(&state)?;
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            file.write_all(&text)?;
        }
        self.append(&line)?;
        // The flock ends when `file` closes.
        Ok(outcome)
    }

    /// Appends the last accepted operation's line if its process was
    /// killed before it could (cutting off a torn start of it first).
    /// Called under the store's lock.
    fn mend_log(&self, state: &State) -> Outcome<()> {
        let Some(last) = &state.last else {
            return Ok(());
        };
        if self.log_len()? >= state.log_len {
            return Ok(());
        }
        let line = log_line(last)?;
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.log_path())?
            .set_len(state.log_len - line.len() as u64)?;
        self.append(&line)
    }

    fn append(&self, line: &[u8]) -> Outcome<()> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        log.write_all(line)?;
        Ok(())
    }

    fn log_len(&self) -> Outcome<u64> {
        match std::fs::metadata(self.log_path()) {
            Ok(meta) => Ok(meta.len()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(error) => Err(error.into()),
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("log.jsonl")
    }

    /// The state file under the store's lock, waiting for it.
    fn locked(&self) -> Outcome<File> {
        let file = self.state_file()?;
        flock(&file, FlockOperation::LockExclusive)?;
        Ok(file)
    }
}

fn log_line(entry: &Entry) -> Outcome<Vec<u8>> {
    let mut line = serde_json::to_vec(entry)?;
    line.push(b'\n');
    Ok(line)
}

fn read_state(file: &mut File) -> Outcome<State> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_string(&mut text)?;
    if text.is_empty() {
        return Ok(State::default());
    }
    Ok(serde_json::from_str(&text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_writer_is_turned_away_after_a_newer_one_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = FencedStore::open(dir.path()).unwrap();
        assert_eq!(store.read(5).unwrap(), Some(0));
        assert_eq!(store.read(6).unwrap(), Some(0));
        assert!(!store.write(5, 1).unwrap(), "5 is behind 6");
        assert!(store.write(6, 1).unwrap());
        assert_eq!(store.state().unwrap().value, 1);
        let log = store.log().unwrap();
        assert_eq!(log.len(), 4);
        assert_eq!(log.iter().filter(|entry| !entry.accepted).count(), 1);
    }

    #[test]
    fn a_line_lost_with_its_killed_writer_is_mended_from_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let store = FencedStore::open(dir.path()).unwrap();
        assert!(store.write(1, 1).unwrap());
        assert!(store.write(1, 2).unwrap());
        let whole = store.log().unwrap();
        // Killed after the state, mid-line: a torn start of the last line.
        let log = dir.path().join("log.jsonl");
        let len = std::fs::metadata(&log).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(len - 5)
            .unwrap();
        assert_eq!(store.log().unwrap(), whole, "mended when read");
        // Killed before any of it: the next operation mends it.
        let len = std::fs::metadata(&log).unwrap().len();
        let last = serde_json::to_vec(&whole[1]).unwrap().len() as u64 + 1;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(len - last)
            .unwrap();
        assert_eq!(store.read(2).unwrap(), Some(2));
        let mended = store.log().unwrap();
        assert_eq!(mended.len(), 3);
        assert_eq!(mended[..2], whole[..]);
    }

    #[test]
    fn readers_share_a_range_until_a_writer_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let store = FencedStore::open(dir.path()).unwrap();
        assert!(store.shared_read(3).unwrap().is_some());
        assert!(store.shared_read(4).unwrap().is_some());
        assert!(store.shared_read(3).unwrap().is_some(), "readers overlap");
        assert!(store.read(5).unwrap().is_some());
        assert!(store.shared_read(4).unwrap().is_none(), "behind the writer");
        assert!(store.shared_read(7).unwrap().is_some());
    }
}

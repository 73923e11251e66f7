//! A fenced counter in a file: it takes an operation only with a token at
//! least as high as the highest it has seen, so a holder that lost its
//! lock to a later one is turned away. The file is `VALUE TOKEN`, and each
//! operation holds an exclusive lock on it for its read and write.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// What a holder asks of the counter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Read,
    Write(u64),
}

pub(crate) struct Fenced {
    path: PathBuf,
}

impl Fenced {
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
        }
    }

    /// Applies `op` with `token`: the value read or written, or `None` when
    /// a higher token has been seen.
    pub(crate) fn apply(&self, op: Op, token: u64) -> Option<u64> {
        let mut file = self.open();
        file.lock().expect("lock the counter");
        let (value, highest) = read(&mut file);
        let answer = if token < highest {
            None
        } else {
            let value = match op {
                Op::Read => value,
                Op::Write(value) => value,
            };
            write(&mut file, value, token);
            Some(value)
        };
        file.unlock().expect("unlock the counter");
        answer
    }

    /// The value stored.
    pub(crate) fn value(&self) -> u64 {
        let mut file = self.open();
        file.lock().expect("lock the counter");
        read(&mut file).0
    }

    fn open(&self) -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .expect("open the counter")
    }
}

fn read(file: &mut File) -> (u64, u64) {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).expect("seek");
    file.read_to_string(&mut text).expect("read the counter");
    let mut fields = text
        .split_whitespace()
        .map(|field| field.parse().expect("a number"));
    (fields.next().unwrap_or(0), fields.next().unwrap_or(0))
}

fn write(file: &mut File, value: u64, token: u64) {
    file.set_len(0).expect("truncate");
    file.seek(SeekFrom::Start(0)).expect("seek");
    write!(file, "{value} {token}").expect("write the counter");
    file.flush().expect("flush");
}

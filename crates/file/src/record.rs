//! What a lock file says: the name, the last fencing token and the holder.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};

use distlock_core::Holder;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) name: String,
    pub(crate) fencing_token: u64,
    #[serde(default)]
    pub(crate) holder: Option<Holder>,
    #[serde(default)]
    pub(crate) acquired_at_ms: Option<u64>,
}

impl Record {
    pub(crate) fn read(file: &mut File) -> io::Result<Self> {
        let mut text = String::new();
        file.seek(SeekFrom::Start(0))?;
        file.read_to_string(&mut text)?;
        serde_json::from_str(&text).map_err(io::Error::other)
    }

    pub(crate) fn write(&self, file: &mut File) -> io::Result<()> {
        let text = serde_json::to_vec(self).map_err(io::Error::other)?;
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&text)
    }
}

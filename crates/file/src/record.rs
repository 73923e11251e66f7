//! What a lock file says: the name, the last fencing token and the holder.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

use distlock_core::backend::token_floor;
use distlock_core::{Claim, Error, Holder, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) name: String,
    pub(crate) fencing_token: u64,
    #[serde(default)]
    pub(crate) holder: Option<Holder>,
    #[serde(default)]
    pub(crate) acquired_at_ms: Option<u64>,
    /// What the last grant was: absent for an exclusive lock, and in
    /// files written before readers and semaphores existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) shared: Option<SharedKind>,
    /// The marker of a release before the grant's `min_hold` had passed:
    /// until this time, in milliseconds since the epoch on this machine's
    /// clock, the lock counts as held though nobody has the file locked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) held_until_ms: Option<u64>,
}

/// The kind of a grant that shares its name with others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SharedKind {
    /// A reader.
    Reader,
    /// A permit of a semaphore of `limit`.
    Permit {
        /// The semaphore's limit.
        limit: u32,
    },
}

impl SharedKind {
    pub(crate) fn claim(self) -> Claim {
        match self {
            Self::Reader => Claim::Shared,
            Self::Permit { limit } => Claim::Permit { limit },
        }
    }
}

impl Record {
    /// What the record's grant claimed.
    pub(crate) fn claim(&self) -> Claim {
        self.shared.map_or(Claim::Exclusive, SharedKind::claim)
    }

    /// How long a marker left at a release keeps the lock held yet, by
    /// this machine's clock; `None` when there is none, or it has passed.
    pub(crate) fn held_for(&self) -> Option<Duration> {
        let left = self.held_until_ms?.checked_sub(now_ms())?;
        (left > 0).then(|| Duration::from_millis(left))
    }

    /// Marks the lock held for `remaining` from now, by this machine's
    /// clock. Milliseconds are rounded up, and one more is added, since
    /// [`now_ms`] rounds down: the mark lasts at least `remaining`.
    pub(crate) fn hold_for(&mut self, remaining: Duration) {
        let millis = u64::try_from(remaining.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        self.held_until_ms = Some(now_ms().saturating_add(millis).saturating_add(1));
    }

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

/// The token of the next grant of a name whose last token was `previous`:
/// `max(previous + 1, microseconds since the epoch)`, so tokens keep
/// increasing even if the directory is wiped, as long as the clock does.
///
/// # Errors
/// A backend error when `previous` is the largest token: only an edited or
/// corrupt file at `path` holds it, and no later grant could be given a
/// larger one.
pub(crate) fn next_token(previous: u64, path: &Path) -> Result<u64> {
    let next = previous.checked_add(1).ok_or_else(|| Error::Backend {
        backend: "file",
        message: format!(
            "{} holds the largest possible fencing token, so no later grant could \
             have a larger one; the file was edited or is corrupt",
            path.display()
        ),
        source: None,
    })?;
    Ok(next.max(token_floor(SystemTime::now())))
}

/// Now, in milliseconds since the epoch, for a record's `acquired_at_ms`.
pub(crate) fn now_ms() -> u64 {
    token_floor(SystemTime::now()) / 1000
}

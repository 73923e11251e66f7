//! What a store says about a lock: who holds it, and how.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::claim::{LockKind, Permits};
use crate::name::LockName;

/// Who holds a lock, for inspection only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// The label from [`LockOptions::label`](crate::LockOptions::label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

// distlock is for Unix: the host name below is uname(2)'s, and the file
// backend and the command stand on flock(2), signals and exec. Elsewhere,
// one clear error instead of rustix's missing modules.
#[cfg(not(unix))]
compile_error!(
    "distlock builds on Unix only (Linux, macOS and the BSDs); Windows is not supported"
);

impl Holder {
    /// This process, with an optional label.
    pub fn this_process(label: Option<&str>) -> Self {
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        Self {
            host,
            pid: std::process::id(),
            label: label.map(str::to_owned),
        }
    }
}

/// One holder of a lock, as [`Backend::list`](crate::backend::Backend::list) sees it. A name held by
/// several readers, or by several permits of a semaphore, has one entry per
/// holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock's name, exactly as given.
    pub name: LockName,
    /// The holder's kind.
    pub kind: LockKind,
    /// For a semaphore, the permits in use out of its limit.
    pub permits: Option<Permits>,
    /// Who holds it, when known.
    pub holder: Option<Holder>,
    /// The fencing token of the current grant, when known.
    pub fencing_token: Option<u64>,
    /// How long until the lease ends unless extended; `None` when it lasts as
    /// long as the holder's process.
    pub expires_in: Option<Duration>,
}

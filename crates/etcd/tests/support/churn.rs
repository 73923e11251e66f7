//! What the churn test of `cluster.rs` and its worker program
//! (tests/helpers/churn_worker.rs) exchange, as JSON files.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What a churn worker is told.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Settings {
    pub(crate) url: String,
    pub(crate) name: String,
    pub(crate) counter: PathBuf,
    pub(crate) results: PathBuf,
    pub(crate) until_ns: u64,
}

/// One holding, as a worker saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Holding {
    pub(crate) token: u64,
    pub(crate) granted_ns: u64,
    /// When it was released, or when its `lost()` fired if that was first.
    pub(crate) ended_ns: u64,
    pub(crate) lost: bool,
    /// Whether the counter took its read and its write.
    pub(crate) read_accepted: bool,
    pub(crate) write_accepted: bool,
}

/// What a worker process reports.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Report {
    pub(crate) holdings: Vec<Holding>,
    pub(crate) failed_waits: usize,
    /// The first few errors that ended waits, for the log.
    pub(crate) errors: Vec<String>,
}

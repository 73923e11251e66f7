//! What each run has of its own: a lock name no other run uses, and a
//! directory under its server's scratch space.

use std::path::PathBuf;

use crate::campaign::Server;
use crate::outcome::Outcome;

/// A lock name of its own for each run.
pub(crate) fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), crate::clock::now_ns())
}

/// A directory of its own under the server's scratch space.
///
/// # Errors
/// It cannot be made.
pub(crate) fn run_dir(server: &Server, name: &str) -> Outcome<PathBuf> {
    let dir = server.scratch().join(name);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

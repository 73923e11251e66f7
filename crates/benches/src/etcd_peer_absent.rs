//! The etcd Lock RPC peer, in a build without it (feature
//! `etcd-client-peer` off): nothing can be opened, and the run says that
//! the peer's rows are left out.

use std::path::Path;
use std::time::Duration;

use distlock::LockName;
use tokio::process::Command;

use crate::outcome::Outcome;
use crate::target::Target;
use crate::worker::{Layout, WorkerArgs};

/// Whether this build has the peer.
pub(crate) const BUILT: bool = false;

/// Why the peer's rows are missing, for the report and the terminal.
pub(crate) const NOT_BUILT: &str = "etcd's Lock RPC peer (etcd-client): not built; build \
     distlock-benches with `--features etcd-client-peer` (scripts/bench does)";

/// Never made: no value of it exists in this build.
pub(crate) enum LockService {}

impl LockService {
    /// `None`: this build has no peer.
    pub(crate) async fn open(_target: &Target) -> Outcome<Option<Self>> {
        Ok(None)
    }

    pub(crate) async fn cycles(&self, _name: &LockName, _seconds: Duration) -> Outcome<u64> {
        match *self {}
    }

    pub(crate) async fn close(self) {
        match self {}
    }
}

/// No workers: this build has no peer.
pub(crate) fn workers(_exe: &Path, _target: &Target, _lock: &str, _layout: Layout) -> Vec<Command> {
    Vec::new()
}

/// A worker asked for by a parent of another build.
pub(crate) async fn worker(_args: &WorkerArgs) -> Outcome<()> {
    Err(NOT_BUILT.to_owned())
}

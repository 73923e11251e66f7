//! How a campaign runs: the binaries, the short form, the lease.

use std::path::PathBuf;
use std::time::Duration;

/// The time a scenario gives an administrative call (a listing, a forced
/// release, a read of the server's clock) it makes on a backend directly,
/// as a client gives its operation timeout.
pub(crate) const ADMIN_LIMIT: Duration = Duration::from_secs(30);

/// How a campaign runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The `distlock-chaos` binary, which runs the holders.
    pub(crate) exe: PathBuf,
    /// The `distlock` binary, for the `distlock run` checks, when built.
    pub(crate) cli: Option<PathBuf>,
    /// The short form, for CI: fewer runs and cycles, the same invariants.
    pub(crate) short: bool,
    /// The lease of every holder.
    pub(crate) lease: Duration,
}

impl Settings {
    /// `full`, or `short` in the short form.
    pub(crate) fn pick<T>(&self, full: T, short: T) -> T {
        if self.short { short } else { full }
    }

    /// How often a holder extends its lease (the default, a third).
    pub(crate) fn cadence(&self) -> Duration {
        self.lease / 3
    }
}

//! What `distlock` does only on Linux, and the switch that turns it off
//! there, so that the tests run the path other systems take.
//!
//! On Linux, `run` makes itself a child subreaper and finds CMD's processes
//! through `/proc` ([`crate::tree`]), and CMD's trampoline asks for SIGKILL
//! when distlock dies ([`crate::exec`]). macOS and the BSDs have neither, so
//! there `run` knows CMD alone and CMD outlives a distlock killed outright.
//! `docs/platforms.md` says what that changes for users.

use std::sync::LazyLock;

/// The environment variable that forces the portable fallbacks on Linux:
/// set to anything but `0` or nothing, `distlock` behaves as on macOS and
/// the BSDs. The file backend reads the same variable.
pub(crate) const PORTABLE: &str = "DISTLOCK_PORTABLE";

/// Whether [`PORTABLE`] is set, read once per process.
fn portable_forced() -> bool {
    static FORCED: LazyLock<bool> = LazyLock::new(|| {
        std::env::var_os(PORTABLE).is_some_and(|value| !value.is_empty() && value != "0")
    });
    *FORCED
}

/// Whether distlock uses Linux's process controls: the parent-death signal,
/// the child subreaper and `/proc`. On Linux, unless [`PORTABLE`] is set.
pub(crate) fn linux_process_controls() -> bool {
    cfg!(target_os = "linux") && !portable_forced()
}

//! The switch that runs the portable fallbacks of Linux-only calls on
//! Linux, so that they are tested where CI runs.

use std::sync::LazyLock;

/// The environment variable that forces the portable fallbacks on Linux:
/// set to anything but `0` or nothing, the file backend polls instead of
/// watching with inotify, and the `distlock` command controls CMD alone, as
/// on macOS and the BSDs (see `docs/platforms.md`).
pub const PORTABLE: &str = "DISTLOCK_PORTABLE";

/// Whether Linux-only calls are to be used: on Linux, unless [`PORTABLE`]
/// is set. Read once per process.
pub fn linux_only_calls() -> bool {
    static FORCED: LazyLock<bool> = LazyLock::new(|| {
        std::env::var_os(PORTABLE).is_some_and(|value| !value.is_empty() && value != "0")
    });
    cfg!(target_os = "linux") && !*FORCED
}

//! What `distlock` does only on Linux, and the switch that turns it off
//! there, so that the tests run the path other systems take.
//!
//! On Linux, `run` makes itself a child subreaper and finds CMD's processes
//! through `/proc` ([`crate::tree`]), and CMD's trampoline asks for SIGKILL
//! when distlock dies ([`crate::exec`]). macOS and the BSDs have neither, so
//! there `run` knows CMD alone and CMD outlives a distlock killed outright.
//! `docs/platforms.md` says what that changes for users.
/// Whether distlock uses Linux's process controls: the parent-death signal,
/// the child subreaper and `/proc`. On Linux, unless
/// [`PORTABLE`](distlock::backend::platform::PORTABLE) is set.
pub(crate) fn linux_process_controls() -> bool {
    distlock::backend::platform::linux_only_calls()
}

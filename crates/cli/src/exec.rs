//! `distlock __exec`: the trampoline that ties CMD's life to distlock's.
//!
//! `distlock run` starts CMD as `distlock __exec --parent-pid PID -- CMD`.
//! On Linux this process asks the kernel for SIGKILL when its parent dies
//! (`PR_SET_PDEATHSIG`, kept across `exec`), checks that the parent did not
//! die before that request, and then replaces itself with CMD. So even a
//! distlock killed by SIGKILL, which cannot release anything, takes CMD
//! with it, and CMD never runs on without the lock.
//!
//! Other systems have no such request (FreeBSD's `procctl` is not used), and
//! neither does Linux with [`PORTABLE`](distlock::backend::platform::PORTABLE) set: the
//! parent is still checked, but CMD outlives a distlock killed outright,
//! without the lock.
//!
//! All of this is safe code: rustix wraps `prctl`, and std's
//! [`CommandExt::exec`] wraps `execvp`.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use rustix::process::getppid;

use crate::cli::ExecArgs;
use crate::exit::{CANNOT_EXECUTE, NOT_FOUND, RUNTIME};
use crate::text;

/// Becomes CMD; returns an exit code only if that failed.
pub(crate) fn exec(args: ExecArgs) -> u8 {
    if let Err(message) = die_with_parent(args.parent_pid) {
        text::say(&format!(
            "{message}; not running {}",
            text::program(&args.command)
        ));
        return RUNTIME;
    }
    let Some((program, rest)) = args.command.split_first() else {
        text::say("no command to run");
        return RUNTIME;
    };
    // `exec` returns only on failure.
    let error = Command::new(program).args(rest).exec();
    let shown = text::program(&args.command);
    match error.kind() {
        io::ErrorKind::NotFound => {
            text::say(&format!("{shown}: command not found"));
            NOT_FOUND
        }
        io::ErrorKind::PermissionDenied => {
            text::say(&format!("{shown}: permission denied"));
            CANNOT_EXECUTE
        }
        _ => {
            text::say(&format!("cannot run {shown}: {error}"));
            CANNOT_EXECUTE
        }
    }
}

/// Asks for SIGKILL when the parent dies, where Linux's process controls
/// are used, and checks that the parent is still `expected`: if it died
/// before the request, no signal would come.
///
/// The signal is tied to the parent *thread* that spawned this process, so
/// parents must spawn from a thread that lives as long as they do (distlock
/// spawns from its main thread).
pub(crate) fn die_with_parent(expected: u32) -> Result<(), String> {
    #[cfg(target_os = "linux")]
    if crate::platform::linux_process_controls() {
        use rustix::process::{Signal, set_parent_process_death_signal};
        set_parent_process_death_signal(Some(Signal::KILL))
            .map_err(|error| format!("cannot ask for the parent-death signal: {error}"))?;
    }
    let parent = getppid().map(|pid| pid.as_raw_nonzero().get());
    if parent != i32::try_from(expected).ok() {
        return Err("distlock exited before the command started".into());
    }
    Ok(())
}

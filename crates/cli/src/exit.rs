//! Exit codes, and how failures become one line on stderr.

use std::ffi::OsString;
use std::process::ExitStatus;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// Runtime failure: the backend failed, a file could not be written, the
/// demo found a violation.
pub(crate) const RUNTIME: u8 = 1;
/// Bad input and configuration: arguments, durations, lock names, backend
/// URLs, refused credentials or permissions.
pub(crate) const USAGE: u8 = 2;
/// The backend could not be reached, or kept failing until the wait ended:
/// worth trying again later. `EX_UNAVAILABLE` of sysexits.h.
pub(crate) const UNAVAILABLE: u8 = 69;
/// The lock was not acquired (`--no-wait` found it held, or `--wait` timed
/// out); CMD did not run. `EX_TEMPFAIL` of sysexits.h; `run
/// --conflict-exit-code` sets another.
pub(crate) const NOT_ACQUIRED: u8 = 75;
/// The lock was lost while CMD ran.
pub(crate) const LOST: u8 = 76;
/// CMD was found but could not be executed, as in shells.
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// CMD was not found, as in shells.
pub(crate) const NOT_FOUND: u8 = 127;
/// Added to the number of the signal that killed CMD, or that interrupted
/// distlock while it waited for the lock.
pub(crate) const SIGNAL_BASE: u8 = 128;

/// The exit codes of every command, for `distlock --help`.
pub(crate) const EXIT_CODES_HELP: &str = "\
Exit codes:
  0        success (for run: CMD's own exit code is passed through)
  1        runtime error (I/O error, a failed demo check)
  2        bad input or configuration: arguments, duration, lock name,
           backend URL, refused credentials or permissions
  69       the backend could not be reached, or kept failing (run: until
           its wait ended); worth trying again later
  75       run: the lock was held and not acquired (--no-wait or --wait);
           CMD did not run; --conflict-exit-code N sets another code
  76       run: the lock was lost while CMD ran; CMD was stopped
  126      run: CMD could not be executed (permission denied)
  127      run: CMD was not found
  128+N    run: CMD died of signal N, or distlock got signal N while waiting";

/// The exit codes of `distlock run`, for `distlock run --help`.
pub(crate) const RUN_EXIT_CODES_HELP: &str = "\
Exit codes:
  CMD's    CMD ran: its exit code is passed through (so CMD may also return
           75 or 76 itself)
  1        runtime error (I/O error)
  2        bad input or configuration: arguments, duration, lock name,
           backend URL, refused credentials or permissions
  69       the backend could not be reached, or kept failing until the wait
           ended (a server that refuses or drops connections is tried
           again for as long as the lock would be waited for, once with
           --no-wait); CMD did not run
  75       the lock was held and not acquired (--no-wait found it held, or
           --wait ran out); CMD did not run. --conflict-exit-code N makes
           it N (0: a cron job skips its turn without failing)
  76       the lock was lost while CMD ran: CMD got SIGTERM, then SIGKILL
           after --kill-grace; also when the lock turned out lost just as
           CMD finished
  126      CMD could not be executed (permission denied)
  127      CMD was not found
  128+N    CMD died of signal N, or distlock got signal N (SIGINT, SIGTERM)
           while waiting for the lock";

/// How to use `run`, for messages about its arguments.
const RUN_USAGE: &str = "distlock run NAME [OPTIONS] [--] CMD [ARGS...]";

/// Why distlock stops early: the exit code and one line for stderr.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The exit code.
    pub(crate) code: u8,
    /// What went wrong, without the `distlock: ` prefix.
    pub(crate) message: String,
}

impl Failure {
    /// A failure with `code`.
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Bad input (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    /// A runtime failure (exit 1).
    pub(crate) fn runtime(message: impl Into<String>) -> Self {
        Self::new(RUNTIME, message)
    }

    /// A backend out of reach (exit 69).
    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(UNAVAILABLE, message)
    }
}

impl From<distlock::Error> for Failure {
    fn from(error: distlock::Error) -> Self {
        let code = match error {
            distlock::Error::InvalidConfig { .. }
            | distlock::Error::InvalidName { .. }
            | distlock::Error::Unsupported(_)
            | distlock::Error::Denied { .. }
            | distlock::Error::KindConflict { .. } => USAGE,
            // A server that refuses, drops or does not answer: try later.
            _ if error.is_transient() => UNAVAILABLE,
            _ => RUNTIME,
        };
        Self::new(code, with_causes(&error))
    }
}

/// `error`'s message followed by its causes, as `message: cause: cause`;
/// a cause whose text the message already holds is not said twice.
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = cause.source();
    }
    message
}

/// The exit code that reports how a child ended: its own code, or 128 plus
/// the signal that killed it.
pub(crate) fn code_of(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        // The kernel keeps only the low 8 bits anyway.
        return (code & 0xff) as u8;
    }
    match status.signal() {
        Some(signal) => signal_code(signal),
        None => RUNTIME,
    }
}

/// 128 plus `signal`.
pub(crate) fn signal_code(signal: i32) -> u8 {
    u8::try_from(i32::from(SIGNAL_BASE) + signal).unwrap_or(u8::MAX)
}

/// Turns a clap error other than help or version into one clear line.
/// `argv` is the whole command line, used to recognise a `run` without its
/// command.
pub(crate) fn from_clap(error: &clap::Error, argv: &[OsString]) -> Failure {
    let is_run = argv.get(1).is_some_and(|sub| sub == "run");
    let invalid = invalid_args(error);
    if is_run
        && error.kind() == ErrorKind::MissingRequiredArgument
        && invalid.iter().any(|arg| arg.contains("CMD"))
    {
        return Failure::usage(format!(
            "give the command to run (after `--` if it starts with `-`): {RUN_USAGE}"
        ));
    }
    if error.kind() == ErrorKind::MissingRequiredArgument && !invalid.is_empty() {
        return Failure::usage(format!("missing {}; see --help", invalid.join(", ")));
    }
    let shown = first_lines(&error.render().to_string());
    match error.kind() {
        // These already say what a good value looks like.
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => Failure::usage(shown),
        _ => Failure::usage(format!("{shown}; see --help")),
    }
}

fn invalid_args(error: &clap::Error) -> Vec<String> {
    match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => vec![arg.clone()],
        Some(ContextValue::Strings(args)) => args.clone(),
        _ => Vec::new(),
    }
}

/// The first line of clap's rendering, with its tip if it has one.
fn first_lines(rendered: &str) -> String {
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("invalid arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    match lines.find_map(|line| line.strip_prefix("tip: ")) {
        Some(tip) => format!("{first} ({tip})"),
        None => first.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_said_with_its_causes_once_each() {
        let cause = distlock::Error::Backend {
            backend: "postgres",
            message: "connection refused".into(),
            source: None,
        };
        let error = distlock::Error::Timeout {
            name: "job".into(),
            waited: std::time::Duration::from_secs(2),
            last_error: Some(Box::new(cause)),
        };
        let failure = Failure::from(error);
        assert_eq!(
            failure.message,
            "timed out after 2s waiting for lock job: postgres backend: connection refused"
        );
        assert_eq!(failure.code, UNAVAILABLE, "a backend that kept failing");
    }

    #[test]
    fn clap_renderings_become_one_line() {
        let rendered = "error: unexpected argument '--wiat' found\n\n  tip: a similar argument exists: '--wait'\n\nUsage: distlock run\n";
        assert_eq!(
            first_lines(rendered),
            "unexpected argument '--wiat' found (a similar argument exists: '--wait')"
        );
    }

    #[test]
    fn signals_add_to_128() {
        assert_eq!(signal_code(15), 143);
        assert_eq!(signal_code(9), 137);
    }
}

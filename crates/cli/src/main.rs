//! The `distlock` command: run a command under a lock, list locks, release
//! one by force, and demonstrate the lock on the embedded default backend.
//!
//! ```text
//! distlock run NAME [--backend URL] [--wait D | --no-wait] [--lease D] [--kill-grace D] -- CMD [ARGS...]
//! distlock list [--backend URL] [--json]
//! distlock release --force NAME [--backend URL]
//! distlock demo [--backend URL] [--workers N] [--duration D] [--lock NAME]
//! ```
//!
//! The backend comes from `--backend`, else `DISTLOCK_URL`, else
//! [`distlock::default_url`]. URLs are shown only through
//! [`distlock::redact`]. Logs go to stderr, filtered by `DISTLOCK_LOG`
//! (default `warn`). Errors are one line on stderr, starting `distlock: `.
//!
//! # Exit codes
//! | code    | meaning |
//! |---------|---------|
//! | 0       | success; for `run`, CMD's own exit code is passed through |
//! | 1       | runtime error: I/O error, a failed demo check |
//! | 2       | bad input or configuration: arguments, duration, lock name, backend URL, refused credentials or permissions |
//! | 69      | the backend could not be reached, or kept failing (for `run`, until its wait ended) |
//! | 75      | `run`: the lock was held and not acquired (`--no-wait`, or `--wait` ran out); CMD did not run; `-E N` makes it N |
//! | 76      | `run`: the lock was lost while CMD ran (CMD got SIGTERM, then SIGKILL after `--kill-grace`), or turned out lost just as CMD finished |
//! | 126     | `run`: CMD could not be executed |
//! | 127     | `run`: CMD was not found |
//! | 128 + N | `run`: CMD died of signal N, or distlock got signal N while waiting for the lock |
//!
//! # Processes
//! `run` starts CMD through a hidden `__exec` subcommand of this same
//! binary, which sets the parent-death signal (on Linux) and then becomes
//! CMD (see [`exec`]); `demo` starts its workers as a hidden
//! `__demo-worker` subcommand. Both are spawned from the main thread, which
//! the current-thread runtime guarantees. What differs off Linux, and the
//! `DISTLOCK_PORTABLE` switch that forces it there, is in [`platform`].

mod campaign;
mod check;
mod cli;
mod demo;
mod docs;
mod exec;
mod exit;
mod held;
mod leader;
mod list;
mod open;
mod platform;
mod release;
mod resume_file;
mod run;
mod text;
mod tree;
mod waiting;

use std::ffi::OsString;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};

/// Leaves the library's warnings of a lost lock out of the log (the
/// keeper's, and a backend's report), since the command says it once: by
/// the modules that log them.
const LOSS_SAID_ONCE: [&str; 2] = [
    "distlock_core::engine::held=error",
    "distlock_core::backend::loss=error",
];

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let mut cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(error) => return ExitCode::from(parse_failure(&error, &argv)),
    };
    if let Command::Run(args) = &mut cli.command {
        // CMD is the tail of the arguments: what stands right before it
        // tells whether the parser took a `--` there.
        let before = argv.len().checked_sub(args.command.len() + 1);
        args.dashes_before_command = before.is_some_and(|index| argv[index] == "--");
    }
    let code = match cli.command {
        // The trampoline only becomes CMD: no runtime, no logging.
        Command::Exec(args) => exec::exec(args),
        Command::Completions(args) => docs::completions(args.shell),
        Command::Man(args) => docs::man(args.subcommand.as_deref()),
        command => {
            // `check` reports what the library would warn of as findings.
            let quiet = matches!(command, Command::Check(_));
            init_logging(if quiet { "error" } else { "warn" });
            dispatch(command)
        }
    };
    ExitCode::from(code)
}

/// Prints help or version as asked, or the parse error as one line.
fn parse_failure(error: &clap::Error, argv: &[OsString]) -> u8 {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            exit::USAGE
        }
        _ => {
            let failure = exit::from_clap(error, argv);
            text::report(&failure);
            failure.code
        }
    }
}

/// Runs a command on a current-thread runtime, so that every child is
/// spawned from the main thread (the parent-death signal follows the
/// spawning thread).
#[tokio::main(flavor = "current_thread")]
async fn dispatch(command: Command) -> u8 {
    let outcome = match command {
        Command::Run(args) => run::run(args).await,
        Command::List(args) => list::list(args).await,
        Command::Leader(args) => leader::leader(args).await,
        Command::Campaign(args) => campaign::campaign(args).await,
        Command::Check(args) => check::check(args).await,
        Command::Release(args) => release::release(args).await,
        Command::Demo(args) => demo::demo(args).await,
        Command::DemoWorker(args) => demo::work(args).await,
        Command::Exec(args) => Ok(exec::exec(args)),
        Command::Completions(args) => Ok(docs::completions(args.shell)),
        Command::Man(args) => Ok(docs::man(args.subcommand.as_deref())),
    };
    outcome.unwrap_or_else(|failure| {
        text::report(&failure);
        failure.code
    })
}

/// Logs to stderr, filtered by `DISTLOCK_LOG` (default `default`: `warn`,
/// or `error` for `check`).
///
/// A lost lock is reported once, by the command's own error line (exit
/// 76), not a second time by the library's warning, unless `DISTLOCK_LOG`
/// says what it wants of `distlock_core`.
fn init_logging(default: &str) {
    let given = std::env::var("DISTLOCK_LOG").ok();
    let mut filter = given
        .as_deref()
        .and_then(|given| EnvFilter::try_new(given).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    if !given.is_some_and(|given| given.contains("distlock_core")) {
        for directive in LOSS_SAID_ONCE {
            filter = filter.add_directive(directive.parse().expect("a valid directive"));
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

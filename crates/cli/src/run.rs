//! `distlock run`: hold a lock while a command runs.
//!
//! The lock is released on every way out: CMD exits, CMD is killed by a
//! forwarded signal, the lock is lost, or something fails after the lock
//! was taken. Only a distlock killed outright cannot release; then, on
//! Linux, the kernel kills CMD (see [`crate::exec`]), and the lock ends with
//! the process (file backend) or when its lease runs out (server backends).
//! Elsewhere CMD runs on without the lock.

use std::ffi::OsString;
use std::future::Future;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{AcquireOptions, Claim, LockClient, LockName, LockOptions, LockSet, LossReason};
use rustix::fs::{Mode, OFlags};
use rustix::process::{Pid, Signal, getpgid, kill_process};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;

use crate::cli::RunArgs;
use crate::exit::{self, Failure, LOST, NOT_ACQUIRED, UNAVAILABLE};
use crate::held::{self, Held};
use crate::open;
use crate::resume_file::ResumeFile;
use crate::text;
use crate::tree::{self, Tree};
use crate::waiting::WaitingLine;

/// Runs `distlock run`; returns the exit code.
pub(crate) async fn run(args: RunArgs) -> Result<u8, Failure> {
    let (names, command) =
        held::names_and_command(&args.name, &args.command, args.dashes_before_command)
            .map_err(Failure::usage)?;
    let names = names
        .iter()
        .map(LockName::new)
        .collect::<distlock::Result<Vec<_>>>()?;
    if let [name] = names.as_slice()
        && name.as_str().contains('\0')
    {
        return Err(Failure::usage(format!(
            "the lock name {name} has a NUL byte, which cannot be passed to CMD in DISTLOCK_NAME"
        )));
    }
    if let (Some(min_hold), Some(max_hold)) = (args.min_hold, args.max_hold)
        && min_hold > max_hold
    {
        return Err(Failure::usage(format!(
            "--min-hold {} is longer than --max-hold {}, which gives the lock up first; \
             make --min-hold at most --max-hold",
            humantime::format_duration(min_hold),
            humantime::format_duration(max_hold)
        )));
    }
    // "lock a", or "locks a, b", for messages.
    let shown = match names.as_slice() {
        [one] => format!("lock {one}"),
        many => format!(
            "locks {}",
            many.iter()
                .map(LockName::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let program = text::program(&command);
    let mut options = LockOptions::builder().label(format!("distlock run {program}"));
    if let Some(lease) = args.lease {
        options = options.lease(lease);
    }
    let options = options.build()?;
    let url = open::url_or_default(args.backend.backend);
    let wait = if args.no_wait {
        Wait::Once
    } else {
        args.wait.map_or(Wait::Forever, Wait::AtMost)
    };
    let opening = std::time::Instant::now();
    let backend = open::open_backend_waiting(&url, wait.patience()).await?;
    // Time spent reaching the server counts against the wait.
    let (asked, wait) = (wait, wait.less(opening.elapsed()));
    let client = LockClient::new(backend, options);
    // Every way out below, the client's session goes with it (see `close`).
    let outcome: Result<u8, Failure> = async {
        // From here on SIGINT, SIGTERM and SIGHUP no longer kill distlock: they are
        // handled, so that the lock is always released.
        let mut signals = Signals::new()?;

        let claim = match (args.shared, args.permits) {
            (true, _) => Claim::Shared,
            (false, Some(limit)) => Claim::Permit { limit },
            (false, None) => Claim::Exclusive,
        };
        tracing::debug!(names = %shown, ?claim, "taking the lock");
        // A first signal cancels the wait, which then ends holding nothing: an
        // attempt in flight is answered and a grant it brings released, since
        // nothing in the background outlives distlock. A second signal leaves
        // at once.
        let (cancel, cancelled) = oneshot::channel::<()>();
        let mut cancel = Some(cancel);
        let each = LockRequest {
            claim,
            max_hold: args.max_hold,
            min_hold: args.min_hold,
            label: args.label.clone(),
            // Only `distlock campaign` gives a label: its value, whose grant
            // is a term of the election.
            records_term: args.label.is_some(),
        };
        let resume_file = args
            .resume_file
            .map(|path| ResumeFile::new(path, &client, &names))
            .transpose()?;
        let resumed = match &resume_file {
            Some(file) => file.take_up(&client, &names[0], claim, args.quiet).await?,
            None => None,
        };
        let acquiring = async {
            if let Some(guard) = resumed {
                return Ok(Taken::Held(Held::new(guard.into())));
            }
            acquire(&client, &names, each, wait, &program, async {
                let _ = cancelled.await;
            })
            .await
        };
        tokio::pin!(acquiring);
        let waiting = WaitingLine::start(&client, &names, args.quiet);
        let mut interrupted = None;
        let acquired = loop {
            tokio::select! {
                acquired = &mut acquiring => break acquired,
                signal = signals.recv() => {
                    if interrupted.is_some() {
                        return Err(interrupted_waiting(signal, &shown, &program));
                    }
                    tracing::debug!(signal = signal.as_raw(), "cancelling the wait");
                    interrupted = Some(signal);
                    if let Some(cancel) = cancel.take() {
                        let _ = cancel.send(());
                    }
                }
            }
        };
        drop(waiting);
        if let Some(signal) = interrupted {
            if let Ok(Taken::Held(held)) = acquired {
                // Granted as the signal came: not ours to use any more.
                let _ = held.release().await;
            }
            return Err(interrupted_waiting(signal, &shown, &program));
        }
        let held = match acquired? {
            Taken::Held(held) => held,
            Taken::Busy(busy) => {
                let waited = match asked {
                    Wait::AtMost(limit) => {
                        format!(" after waiting {}", humantime::format_duration(limit))
                    }
                    Wait::Once | Wait::Forever => String::new(),
                };
                let of_set = if names.len() > 1 {
                    format!(" (of {shown}; none is held now)")
                } else {
                    String::new()
                };
                return Err(Failure::new(
                    args.conflict_exit_code.unwrap_or(NOT_ACQUIRED),
                    format!("lock {busy}{of_set} is held elsewhere{waited}; did not run {program}"),
                ));
            }
        };
        tracing::debug!(names = %held.names(), "acquired; starting the command");
        // Removed when this block ends, the lock released or lost.
        let _kept = match resume_file {
            Some(file) => Some(file.keep(held.first())?),
            None => None,
        };

        let warnings = held.warn_of_dangers();
        let ended = supervise(&held, &command, args.kill_grace, &mut signals).await;
        drop(warnings);
        let lost_one = held.lost_one().cloned();
        let released = held.release().await;
        conclude(&shown, lost_one, &program, args.kill_grace, ended, released)
    }
    .await;
    close(&client).await;
    outcome
}

/// Gives back what the backend keeps for this process (an etcd session),
/// so that nothing of it outlives the process: a session left behind
/// would keep the keys of a failed release until it expires, and under
/// elections, which renew every session, perhaps never. A failure is only
/// logged: the server ends the session by itself.
async fn close(client: &LockClient) {
    if let Err(error) = client.close().await {
        tracing::warn!(%error, "could not close the backend; its session ends when it expires");
    }
}

/// What `run` asks of each lock beside its name.
struct LockRequest {
    claim: Claim,
    max_hold: Option<Duration>,
    min_hold: Option<Duration>,
    /// Recorded with the grant in place of the command's label.
    label: Option<String>,
    /// Whether the grant is an election's term (`distlock campaign`).
    records_term: bool,
}

/// What waiting for the locks came to, short of a failure.
enum Taken {
    /// Every lock is held.
    Held(Held),
    /// This lock was held elsewhere until the wait ended or was cancelled,
    /// and nothing is held.
    Busy(String),
}

/// How long to wait for the lock.
#[derive(Debug, Clone, Copy)]
enum Wait {
    Once,
    AtMost(Duration),
    Forever,
}

impl Wait {
    /// How long opening the backend may keep trying: `None` for ever.
    fn patience(self) -> Option<Duration> {
        match self {
            Self::Once => Some(Duration::ZERO),
            Self::AtMost(limit) => Some(limit),
            Self::Forever => None,
        }
    }

    /// What is left of this wait after `spent`; a wait used up still tries
    /// once.
    fn less(self, spent: Duration) -> Self {
        match self {
            Self::AtMost(limit) if limit > spent => Self::AtMost(limit - spent),
            Self::AtMost(_) | Self::Once => Self::Once,
            Self::Forever => Self::Forever,
        }
    }
}

/// Takes the lock, or every lock of several, all or nothing; `Busy` when
/// one is held elsewhere and waiting ran out, or the wait was cancelled. A
/// wait that ran out while the backend kept failing is the backend's
/// unavailability (exit 69), and says why.
async fn acquire(
    client: &LockClient,
    names: &[LockName],
    request: LockRequest,
    wait: Wait,
    program: &str,
    cancel: impl Future<Output = ()> + Send,
) -> Result<Taken, Failure> {
    let mut options = AcquireOptions::new().claim(request.claim).cancel_on(cancel);
    if let Some(max_hold) = request.max_hold {
        options = options.max_hold(max_hold);
    }
    if let Some(min_hold) = request.min_hold {
        options = options.min_hold(min_hold);
    }
    let options = match wait {
        // A zero timeout tries exactly once.
        Wait::Once => options.timeout(Duration::ZERO),
        Wait::AtMost(timeout) => options.timeout(timeout),
        Wait::Forever => options,
    };
    let taken = match (request.label, names) {
        // `distlock campaign`: the grant is a term of the election, with
        // the label as the leader's value.
        (Some(value), [name]) if request.records_term => {
            let campaign = client.election(name)?.campaign(value, options).await;
            campaign.map(|leadership| LockSet::from(leadership.into_guard()))
        }
        (label, names) => {
            let options = match label {
                Some(label) => options.label(label),
                None => options,
            };
            client.acquire_all(names, options).await
        }
    };
    match taken {
        Ok(set) => Ok(Taken::Held(Held::new(set))),
        Err(distlock::Error::Timeout {
            name,
            last_error: Some(error),
            ..
        }) => Err(Failure::new(
            UNAVAILABLE,
            format!(
                "could not take lock {name}, as the backend kept failing ({error}); did not run {program}"
            ),
        )),
        Err(distlock::Error::Timeout { name, .. } | distlock::Error::Cancelled { name, .. }) => {
            Ok(Taken::Busy(name))
        }
        Err(error) => Err(error.into()),
    }
}

fn interrupted_waiting(signal: Signal, names: &str, program: &str) -> Failure {
    Failure::new(
        exit::signal_code(signal.as_raw()),
        format!("interrupted while waiting for {names}; did not run {program}"),
    )
}

/// How CMD ended.
enum Ended {
    /// CMD exited on its own (or of a signal passed on to it).
    Exited(ExitStatus),
    /// The lock was lost and CMD was stopped.
    Lost {
        /// The lock lost first.
        name: LockName,
        reason: LossReason,
        /// Whether CMD needed SIGKILL after the grace period.
        killed: bool,
    },
}

/// Starts CMD and waits for it, and then for what it left running, passing
/// signals on and stopping all of it if the lock is lost.
async fn supervise(
    held: &Held,
    command: &[OsString],
    grace: Duration,
    signals: &mut Signals,
) -> Result<Ended, Failure> {
    let tree = Tree::start();
    let mut child = spawn(held, command)?;
    let status = loop {
        tokio::select! {
            status = child.wait() => {
                break status.map_err(|error| {
                    Failure::runtime(format!("cannot wait for {}: {error}", text::program(command)))
                })?;
            }
            signal = signals.recv() => {
                if signal == Signal::INT && terminal_interrupted(&child) {
                    tracing::debug!("the terminal sent SIGINT to the command too; not passing it on");
                } else {
                    tracing::debug!(signal = signal.as_raw(), "passing a signal on to the command");
                    send(&child, signal);
                }
            }
            (name, reason) = held.lost() => {
                let name = name.clone();
                let killed = stop(tree, Some(&mut child), grace).await?;
                return Ok(Ended::Lost { name, reason, killed });
            }
        }
    };
    Ok(
        match wait_for_leftovers(tree, held, grace, signals).await? {
            None => Ended::Exited(status),
            Some((name, reason, killed)) => Ended::Lost {
                name,
                reason,
                killed,
            },
        },
    )
}

/// How often to look whether the processes CMD left running have ended.
const LEFTOVER_POLL: Duration = Duration::from_millis(50);

/// Waits, with the lock held, until the processes CMD left running have
/// ended, passing signals on to them; stops them if the lock is lost, and
/// then returns the reason and whether SIGKILL was needed.
async fn wait_for_leftovers(
    tree: Tree,
    held: &Held,
    grace: Duration,
    signals: &mut Signals,
) -> Result<Option<(LockName, LossReason, bool)>, Failure> {
    let mut told = false;
    loop {
        let running = tree.reap_adopted();
        if running == 0 {
            return Ok(None);
        }
        if !told {
            tracing::info!(
                running,
                "CMD exited but left processes running; the lock is held until they end"
            );
            told = true;
        }
        tokio::select! {
            () = tokio::time::sleep(LEFTOVER_POLL) => {}
            signal = signals.recv() => {
                tracing::debug!(signal = signal.as_raw(), "passing a signal on to what CMD left running");
                tree::signal(&tree.all(None), signal);
            }
            (name, reason) = held.lost() => {
                let name = name.clone();
                let killed = stop(tree, None, grace).await?;
                return Ok(Some((name, reason, killed)));
            }
        }
    }
}

/// Starts CMD through the `__exec` trampoline, with the locks' names and
/// fencing tokens in its environment. Must run on the main thread: the
/// parent-death signal follows the thread that spawned the child.
fn spawn(held: &Held, command: &[OsString]) -> Result<Child, Failure> {
    let exe = std::env::current_exe().map_err(|error| {
        Failure::runtime(format!("cannot find distlock's own executable: {error}"))
    })?;
    Command::new(exe)
        .arg("__exec")
        .arg("--parent-pid")
        .arg(std::process::id().to_string())
        .arg("--")
        .args(command)
        .envs(held.environment())
        // Should distlock fail while CMD runs, CMD must not outlive it.
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| {
            Failure::runtime(format!("cannot start {}: {error}", text::program(command)))
        })
}

/// Sends SIGTERM to CMD, if it still runs, and to every process it started
/// that `tree` knows of, then SIGKILL to those left after `grace`, and
/// waits for all of them; returns whether SIGKILL was needed.
async fn stop(tree: Tree, mut child: Option<&mut Child>, grace: Duration) -> Result<bool, Failure> {
    let command = child.as_deref().and_then(pid_of);
    tree::signal(&tree.all(command), Signal::TERM);
    match tokio::time::timeout(grace, all_ended(tree, child.as_deref_mut())).await {
        Ok(ended) => ended.map(|()| false),
        Err(_) => {
            let command = child.as_deref().and_then(pid_of);
            tree::signal(&tree.all(command), Signal::KILL);
            if let Some(child) = child.as_deref_mut() {
                let _ = child.start_kill();
            }
            all_ended(tree, child).await.map(|()| true)
        }
    }
}

/// Resolves once CMD, if given, and every process distlock adopted have
/// ended and been reaped.
async fn all_ended(tree: Tree, child: Option<&mut Child>) -> Result<(), Failure> {
    if let Some(child) = child {
        child
            .wait()
            .await
            .map_err(|error| Failure::runtime(format!("cannot wait for the command: {error}")))?;
    }
    while tree.reap_adopted() > 0 {
        tokio::time::sleep(LEFTOVER_POLL).await;
    }
    Ok(())
}

/// Whether a SIGINT just received came, most likely, from the terminal's
/// Ctrl-C, which the terminal sends to its whole foreground process group:
/// then CMD has it already if CMD is in that group, and passing it on would
/// interrupt CMD twice, which many programs take as "quit now". CMD is in
/// distlock's group unless it moved to one of its own (`timeout` does);
/// then it did not get the Ctrl-C, and it is passed on.
///
/// Without a controlling terminal (cron, systemd, CI), or in the
/// background, the signal was meant for distlock alone and is passed on.
/// A `kill -INT` aimed at a distlock in a terminal's foreground cannot be
/// told apart from Ctrl-C, so it is not passed on; SIGTERM always is.
fn terminal_interrupted(child: &Child) -> bool {
    let foreground = rustix::fs::open(
        "/dev/tty",
        OFlags::RDONLY | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .and_then(rustix::termios::tcgetpgrp)
    .ok();
    let command_group = pid_of(child).and_then(|pid| getpgid(Some(pid)).ok());
    command_group.is_some_and(|group| in_foreground(foreground, group))
}

/// Whether the process group `group` is the terminal's foreground group.
fn in_foreground(foreground: Option<Pid>, group: Pid) -> bool {
    foreground == Some(group)
}

/// The child's pid, unless it has already been reaped (its pid may then
/// belong to someone else).
fn pid_of(child: &Child) -> Option<Pid> {
    child.id().and_then(|id| Pid::from_raw(id as i32))
}

/// Sends `signal` to the child unless it has already been reaped (its pid
/// may then belong to someone else).
fn send(child: &Child, signal: Signal) {
    let Some(pid) = pid_of(child) else {
        return;
    };
    if let Err(error) = kill_process(pid, signal) {
        tracing::debug!(%error, "could not signal the command");
    }
}

/// The exit code and message once CMD ended and the release was tried.
fn conclude(
    names: &str,
    lost_one: Option<LockName>,
    program: &str,
    grace: Duration,
    ended: Result<Ended, Failure>,
    released: distlock::Result<bool>,
) -> Result<u8, Failure> {
    match ended? {
        Ended::Lost {
            name,
            reason,
            killed,
        } => {
            let how = if killed {
                format!(
                    "SIGTERM, then SIGKILL after {}",
                    humantime::format_duration(grace)
                )
            } else {
                "SIGTERM".to_owned()
            };
            Err(Failure::new(
                LOST,
                format!(
                    "lost the lock {name} while {program} ran ({reason}); stopped it with {how}"
                ),
            ))
        }
        Ended::Exited(status) => match released {
            Ok(true) => Ok(exit::code_of(status)),
            // CMD finished, but the lock was no longer ours: part of CMD's
            // work may have run unprotected, and the caller must know.
            Ok(false) => Err(Failure::new(
                LOST,
                format!(
                    "lost the {} before {program} finished ({program} exited with code {})",
                    lost_one.map_or_else(|| names.to_owned(), |name| format!("lock {name}")),
                    exit::code_of(status)
                ),
            )),
            Err(error) => {
                text::say(&format!(
                    "warning: could not release {names}: {error}; what was not released ends when its lease runs out"
                ));
                Ok(exit::code_of(status))
            }
        },
    }
}

/// SIGINT, SIGTERM and SIGHUP, received instead of killing distlock. A
/// SIGHUP (the terminal or SSH session went away) would otherwise end
/// distlock at once, the parent-death signal would SIGKILL CMD with no
/// grace, and the lock would not be released.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self, Failure> {
        let handle = |kind| {
            signal(kind)
                .map_err(|error| Failure::runtime(format!("cannot handle signals: {error}")))
        };
        Ok(Self {
            interrupt: handle(SignalKind::interrupt())?,
            terminate: handle(SignalKind::terminate())?,
            hangup: handle(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    ///
    /// # Cancel safety
    /// Cancel safe, as `tokio::signal::unix::Signal::recv`.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::INT,
            _ = self.terminate.recv() => Signal::TERM,
            _ = self.hangup.recv() => Signal::HUP,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pid(raw: i32) -> Pid {
        Pid::from_raw(raw).unwrap()
    }

    #[test]
    fn an_interrupt_in_the_foreground_already_reached_the_command() {
        assert!(in_foreground(Some(pid(42)), pid(42)));
    }

    #[test]
    fn an_interrupt_in_the_background_or_without_a_terminal_is_passed_on() {
        assert!(!in_foreground(Some(pid(7)), pid(42)));
        assert!(!in_foreground(None, pid(42)));
    }

    #[tokio::test]
    async fn without_a_controlling_terminal_every_interrupt_is_passed_on() {
        // Checked where the tests run without a controlling terminal, as
        // under CI; in a terminal, the answer depends on the shell's job.
        if rustix::fs::open("/dev/tty", OFlags::RDONLY | OFlags::NOCTTY, Mode::empty()).is_err() {
            let mut child = Command::new("sleep")
                .arg("5")
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            assert!(!terminal_interrupted(&child));
            child.kill().await.unwrap();
        }
    }
}

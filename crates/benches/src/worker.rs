//! The workers' vocabulary: what a contending worker process is told
//! ([`WorkerArgs`], which the parent's [`Layout`] writes), how its tasks
//! take the lock ([`Taker`], [`drive`]), and the JSON [`Line`]s it reports
//! with.
//!
//! Workers of every kind (ours, the Rust peers, the Python peer) print one
//! [`Line`] per event on standard output; the parent reads them all (see
//! [`crate::gather`]).

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use clap::Args as ClapArgs;
use distlock::LockKind;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::asking;
use crate::clock::{now_ns, sleep_until_ns};
use crate::commands::Counts;
use crate::outcome::Outcome;

/// What a contending worker process is told, whichever contender it runs:
/// the command line that [`Layout::commands`] writes.
#[derive(Debug, ClapArgs)]
pub(crate) struct WorkerArgs {
    #[arg(long)]
    pub(crate) backend: String,
    #[arg(long)]
    pub(crate) lock: String,
    #[arg(long)]
    pub(crate) tasks: u32,
    #[arg(long)]
    pub(crate) process: u32,
    /// When the tasks begin to ask, before the window opens when it has
    /// a warm-up (by default, as it opens).
    #[arg(long)]
    pub(crate) begin_ns: Option<u64>,
    #[arg(long)]
    pub(crate) start_ns: u64,
    #[arg(long)]
    pub(crate) until_ns: u64,
    /// Take the lock once per task per round, a round starting at each
    /// `go` line on standard input.
    #[arg(long)]
    pub(crate) rounds: bool,
    /// In rounds, hold the lock this long before releasing it.
    #[arg(long, requires = "rounds", value_parser = humantime::parse_duration)]
    pub(crate) work: Option<Duration>,
}

impl WorkerArgs {
    pub(crate) fn window(&self) -> Window {
        Window {
            begin_ns: self.begin_ns.unwrap_or(self.start_ns),
            start_ns: self.start_ns,
            until_ns: self.until_ns,
        }
    }

    pub(crate) fn workload(&self) -> Workload {
        if self.rounds {
            Workload::Rounds {
                work: self.work.unwrap_or_default(),
            }
        } else {
            Workload::TightLoop
        }
    }
}

/// When the contending processes begin, and when what they do is
/// measured, by the wall clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    /// When the tasks begin to ask: at `start_ns`, or before it when the
    /// run has a warm-up, whose grants and commands are not counted.
    pub(crate) begin_ns: u64,
    pub(crate) start_ns: u64,
    pub(crate) until_ns: u64,
}

impl Window {
    /// A window of `seconds` that opens after `startup`, time for the
    /// workers to start and connect.
    pub(crate) fn after(startup: Duration, seconds: Duration) -> Self {
        Self::after_warm_up(startup, Duration::ZERO, seconds)
    }

    /// A window of `seconds` that opens `warm_up` after the tasks begin,
    /// which is after `startup`: what a worker does once (connect, open a
    /// stream, prepare its statements, take its place) is then done before
    /// the window opens, and the window sees the steady state.
    pub(crate) fn after_warm_up(startup: Duration, warm_up: Duration, seconds: Duration) -> Self {
        let begin_ns = now_ns() + startup.as_nanos() as u64;
        let start_ns = begin_ns + warm_up.as_nanos() as u64;
        Self {
            begin_ns,
            start_ns,
            until_ns: start_ns + seconds.as_nanos() as u64,
        }
    }

    pub(crate) fn length(&self) -> Duration {
        Duration::from_nanos(self.until_ns - self.start_ns)
    }

    pub(crate) fn contains(&self, at_ns: u64) -> bool {
        (self.start_ns..=self.until_ns).contains(&at_ns)
    }
}

/// What the tasks of a contended run do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workload {
    /// Every task takes the lock over and over, releasing it at once.
    TightLoop,
    /// Every task takes the lock once per round and holds it for `work`
    /// (zero: releases it at once), a round starting at each `go` line on
    /// standard input.
    Rounds { work: Duration },
}

impl Workload {
    /// The rounds workload without work.
    pub(crate) const ROUNDS: Self = Self::Rounds {
        work: Duration::ZERO,
    };

    /// The workloads of a run, in order: the tight loop, rounds, and rounds
    /// with `work` unless it is zero.
    pub(crate) fn all(work: Duration) -> Vec<Self> {
        let mut all = vec![Self::TightLoop, Self::ROUNDS];
        if !work.is_zero() {
            all.push(Self::Rounds { work });
        }
        all
    }

    /// Whether the parent runs it in rounds.
    pub(crate) fn rounds(self) -> bool {
        matches!(self, Self::Rounds { .. })
    }

    /// How long each task holds the lock before it releases it.
    pub(crate) fn work(self) -> Duration {
        match self {
            Self::TightLoop => Duration::ZERO,
            Self::Rounds { work } => work,
        }
    }

    /// Its name in progress lines and goals.
    pub(crate) fn label(self) -> String {
        match self {
            Self::TightLoop => "tight loop".to_owned(),
            Self::Rounds { work } if work.is_zero() => "rounds".to_owned(),
            Self::Rounds { work } => {
                format!("rounds with {} of work", humantime::format_duration(work))
            }
        }
    }
}

/// How a contended run is laid out: its processes, their tasks, its
/// window, and its workload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub(crate) processes: u32,
    pub(crate) tasks: u32,
    pub(crate) window: Window,
    pub(crate) workload: Workload,
}

impl Layout {
    /// The arguments that tell worker `process` of our binary its part.
    pub(crate) fn worker_args(&self, process: u32) -> Vec<String> {
        let mut args = vec![
            "--tasks".to_owned(),
            self.tasks.to_string(),
            "--process".to_owned(),
            process.to_string(),
            "--begin-ns".to_owned(),
            self.window.begin_ns.to_string(),
            "--start-ns".to_owned(),
            self.window.start_ns.to_string(),
            "--until-ns".to_owned(),
            self.window.until_ns.to_string(),
        ];
        if let Workload::Rounds { work } = self.workload {
            args.push("--rounds".to_owned());
            if !work.is_zero() {
                args.push("--work".to_owned());
                args.push(humantime::format_duration(work).to_string());
            }
        }
        args
    }

    /// The commands that start this run's worker processes: `subcommand`
    /// of our binary `exe`, each told the backend `url`, the `lock` and its
    /// part (see [`WorkerArgs`]).
    pub(crate) fn commands(
        &self,
        exe: &Path,
        subcommand: &str,
        url: &str,
        lock: &str,
    ) -> Vec<Command> {
        (0..self.processes)
            .map(|process| {
                let mut command = Command::new(exe);
                command
                    .args([subcommand, "--backend", url, "--lock", lock])
                    .args(self.worker_args(process));
                command
            })
            .collect()
    }
}

/// One time a worker held the lock, by the machine's wall clock (which all
/// workers on one machine share).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Tenure {
    /// When the task called acquire; 0 where the worker does not say (the
    /// Python peer).
    #[serde(default)]
    pub(crate) asked_at_ns: u64,
    /// When the wait's first attempt was sent, and when its first answer
    /// that the lock is held came back (see [`crate::asking`]); 0 where
    /// the worker does not say, or (`in_line_ns`) the first attempt was
    /// granted.
    #[serde(default)]
    pub(crate) sent_ns: u64,
    #[serde(default)]
    pub(crate) in_line_ns: u64,
    pub(crate) acquired_at_ns: u64,
    pub(crate) released_at_ns: u64,
    /// The fencing token, or 0 for a lock that has none.
    #[serde(default)]
    pub(crate) token: u64,
    /// Which worker process held it.
    #[serde(default)]
    pub(crate) process: u32,
    /// Which task (or thread) of that process held it.
    #[serde(default)]
    pub(crate) task: u32,
    /// Which round it belongs to, in the rounds scenario (0 otherwise).
    /// Only holds of the same round are laid end to end.
    #[serde(default)]
    pub(crate) round: u32,
    /// What was held: the whole lock (the peers, which report none), a
    /// reader's share, or a semaphore's permit.
    #[serde(default = "exclusive")]
    pub(crate) kind: LockKind,
}

fn exclusive() -> LockKind {
    LockKind::Exclusive
}

/// One line a contending worker prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Line {
    /// One hold.
    Hold(Tenure),
    /// The server commands this process sent while it contended, by name,
    /// counted by the driver's command monitoring.
    Commands(Counts),
    /// Acquire or release calls that failed; the worker went on.
    Errors(u64),
    /// In the rounds scenario: every task of this process has had its
    /// turn in the round just started (or the window closed).
    RoundDone(u32),
}

/// What one task's attempt to take the lock once came to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Take {
    /// It held the lock from `acquired_at_ns` to `released_at_ns`.
    Held {
        acquired_at_ns: u64,
        released_at_ns: u64,
        token: u64,
        /// The release failed (the hold still counts).
        release_failed: bool,
    },
    /// The window closed before it got the lock.
    TimedOut,
    /// The acquire call failed; the task may try again.
    Failed,
}

/// Takes a lock once, waiting at most `left`, holds it for `work` (see
/// [`hold_then_release`]) and releases it: one per contender (our client,
/// the Rust peer).
pub(crate) trait Taker: Clone + Send + Sync + 'static {
    fn take_once(&self, left: Duration, work: Duration) -> impl Future<Output = Take> + Send;

    /// The taker of task `task` of its process: this one, unless the
    /// tasks of a process take different claims.
    fn for_task(&self, _task: u32) -> Self {
        self.clone()
    }

    /// What this taker holds, as its holds report it.
    fn kind(&self) -> LockKind {
        LockKind::Exclusive
    }
}

/// Holds a lock just granted for `work` (a sleep standing for the work a
/// lock protects), then releases it with `release`, which says whether the
/// release failed: one hold, timed from the grant to the release call, so
/// that a hand-off still runs from the release call to the next grant.
pub(crate) async fn hold_then_release(
    work: Duration,
    token: u64,
    release: impl Future<Output = bool>,
) -> Take {
    let acquired_at_ns = now_ns();
    if !work.is_zero() {
        tokio::time::sleep(work).await;
    }
    let released_at_ns = now_ns();
    let release_failed = release.await;
    Take::Held {
        acquired_at_ns,
        released_at_ns,
        token,
        release_failed,
    }
}

/// One task's holds and failed calls.
type TaskLog = (Vec<Tenure>, u64);

/// Runs the worker's tasks, which take the lock through `taker` within
/// its window: over and over (the tight loop), or, in rounds, exactly once
/// per round, a round starting at each `go` line on standard input and
/// ending with a [`Line::RoundDone`] on standard output, each holding the
/// lock for the workload's work. Returns every hold and the number of
/// failed calls.
pub(crate) async fn drive<T: Taker>(taker: T, args: &WorkerArgs) -> Outcome<TaskLog> {
    if !args.rounds {
        sleep_until_ns(args.window().begin_ns).await;
        return run_tasks(&taker, args, 0).await;
    }
    let (mut holds, mut errors) = (Vec::new(), 0);
    let mut commands = BufReader::new(tokio::io::stdin()).lines();
    let mut round = 0;
    while let Some(command) = commands.next_line().await.map_err(|e| e.to_string())? {
        if command.trim() != "go" {
            break;
        }
        round += 1;
        let (round_holds, round_errors) = run_tasks(&taker, args, round).await?;
        holds.extend(round_holds);
        errors += round_errors;
        print_line(&Line::RoundDone(round))?;
    }
    Ok((holds, errors))
}

/// Runs every task of the worker once through, each in a Tokio task of its
/// own: until the window closes, or, in `round` (counted from 1; 0 in the
/// tight loop), until it has held the lock once.
async fn run_tasks<T: Taker>(taker: &T, args: &WorkerArgs, round: u32) -> Outcome<TaskLog> {
    let (window, work, process) = (args.window(), args.workload().work(), args.process);
    let handles: Vec<_> = (0..args.tasks)
        .map(|task| {
            let taker = taker.for_task(task);
            tokio::spawn(async move {
                take_until(&taker, process, task, round, window, round > 0, work).await
            })
        })
        .collect();
    let (mut holds, mut errors) = (Vec::new(), 0);
    for handle in handles {
        let (task_holds, task_errors) = handle.await.map_err(|e| e.to_string())?;
        holds.extend(task_holds);
        errors += task_errors;
    }
    Ok((holds, errors))
}

/// How long a wait goes on after the window closes: the end of the waits
/// the close cuts short (a place left, a mark removed) then comes after
/// the counts are read at the close, not in a race with the reading. A
/// grant in that time is not counted either.
const CLOSING_GRACE: Duration = Duration::from_millis(250);

/// One task: takes the lock until the window closes, or (`once`) until it
/// has held it once, holding it for `work` each time.
async fn take_until<T: Taker>(
    taker: &T,
    process: u32,
    task: u32,
    round: u32,
    window: Window,
    once: bool,
    work: Duration,
) -> TaskLog {
    let (mut holds, mut errors) = (Vec::new(), 0);
    loop {
        // When this task asks: the order in which tasks asked is what a
        // first come, first served lock serves them in.
        let now = now_ns();
        if now >= window.until_ns {
            break;
        }
        let left = Duration::from_nanos(window.until_ns - now) + CLOSING_GRACE;
        let (take, first_ask) = asking::timed(taker.take_once(left, work)).await;
        match take {
            Take::Held {
                acquired_at_ns,
                released_at_ns,
                token,
                release_failed,
            } => {
                errors += u64::from(release_failed);
                holds.push(Tenure {
                    asked_at_ns: now,
                    sent_ns: first_ask.sent_ns(),
                    in_line_ns: first_ask.in_line_ns(),
                    acquired_at_ns,
                    released_at_ns,
                    token,
                    process,
                    task,
                    round,
                    kind: taker.kind(),
                });
                if once {
                    break;
                }
            }
            Take::TimedOut => break,
            Take::Failed => {
                errors += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    (holds, errors)
}

/// Prints one line of a worker's report.
pub(crate) fn print_line(line: &Line) -> Outcome<()> {
    println!(
        "{}",
        serde_json::to_string(line).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// What `count` counts within `window`, read as it opens and as it
/// closes in a task of its own: what a worker sends before (starting,
/// warming up) or after (ending the waits the close cut short, closing) is
/// left out, as it is where the server counts (read by the parent at the
/// same two moments). `None` where `count` has nothing.
pub(crate) fn count_within<F, Fut>(
    window: Window,
    count: F,
) -> tokio::task::JoinHandle<Outcome<Option<Counts>>>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Outcome<Option<Counts>>> + Send,
{
    tokio::spawn(async move {
        sleep_until_ns(window.start_ns).await;
        let opened = count().await?;
        sleep_until_ns(window.until_ns).await;
        let closed = count().await?;
        Ok(opened
            .zip(closed)
            .map(|(opened, closed)| closed.since(&opened)))
    })
}

/// Prints a worker's final report: its holds, the commands it counted
/// itself (if any), and its failed calls.
pub(crate) fn report_worker((holds, errors): TaskLog, commands: Option<Counts>) -> Outcome<()> {
    for hold in holds {
        print_line(&Line::Hold(hold))?;
    }
    if let Some(commands) = commands {
        print_line(&Line::Commands(commands))?;
    }
    print_line(&Line::Errors(errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_what_the_python_worker_prints() {
        let line: Line = serde_json::from_str(
            r#"{"hold": {"acquired_at_ns": 5, "released_at_ns": 9, "process": 2, "task": 3}}"#,
        )
        .unwrap();
        let Line::Hold(hold) = line else {
            panic!("not a hold: {line:?}")
        };
        assert_eq!((hold.token, hold.process, hold.task), (0, 2, 3));
        assert_eq!(hold.kind, LockKind::Exclusive);
        let line: Line = serde_json::from_str(r#"{"errors": 4}"#).unwrap();
        assert!(matches!(line, Line::Errors(4)));
    }
}

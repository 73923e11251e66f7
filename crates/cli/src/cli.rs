//! The command line, as clap parses it. Nothing here does any work.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit::{EXIT_CODES_HELP, RUN_EXIT_CODES_HELP};

/// distlock: distributed locks from the shell.
#[derive(Debug, Parser)]
#[command(
    name = "distlock",
    version,
    about = "Distributed locks from the shell: run a command under a lock, list and release locks.",
    long_about = "Distributed locks from the shell: run a command under a lock, list and release locks.\n\n\
        The backend comes from --backend URL, else from the environment variable DISTLOCK_URL, \
        else it is the embedded default: file locks in a directory of this machine (file://). \
        Log output goes to stderr; set DISTLOCK_LOG (for example DISTLOCK_LOG=debug) to see more.",
    after_help = EXIT_CODES_HELP,
)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding a lock, like flock(1) across processes
    /// and machines.
    #[command(
        long_about = "Run CMD while holding the lock NAME, then release it.\n\n\
            By default distlock waits for the lock as long as it takes. CMD gets the environment \
            variables DISTLOCK_NAME and DISTLOCK_FENCING_TOKEN; pass the token to anything that \
            can turn away stale writers. On Linux the lock covers CMD and every process it \
            starts: if CMD exits leaving processes running, the lock is held until they end \
            too, as flock(1) holds its lock. If the lock is in danger of being lost (an \
            extension failed, or went unanswered with little of the lease left), distlock says \
            so on stderr, and again once the lock is confirmed; CMD runs on. If the lock is \
            lost, CMD and everything it started get SIGTERM, then SIGKILL after --kill-grace. SIGINT, SIGTERM and SIGHUP sent to \
            distlock are passed on to CMD, and distlock waits for it; a Ctrl-C at the terminal \
            already reaches CMD, so it is not passed on a second time. If distlock itself dies, \
            even by SIGKILL, the kernel kills CMD (Linux's parent-death signal; not for \
            set-user-ID programs, and only CMD itself, not processes it started: use `exec` in \
            shell scripts).\n\n\
            On macOS and the BSDs, or on Linux with DISTLOCK_PORTABLE=1, distlock knows CMD \
            alone: the lock is released when CMD exits, whatever CMD left running; a lost lock's \
            SIGTERM and SIGKILL reach CMD only; and CMD outlives a distlock killed by SIGKILL, \
            without the lock.",
        after_help = RUN_EXIT_CODES_HELP
    )]
    Run(RunArgs),
    /// List the locks held now, and who waits for them.
    #[command(
        long_about = "List the locks held now: one row per holder (a reader or a permit each \
            has one), with its kind, holder (host, pid, label), fencing token, how many wait \
            (WAITING) and the time left on its lease. Where the store keeps its waiters (etcd; \
            the fair modes of MongoDB and of both PostgreSQL modes, which keep the waits for the \
            whole lock; Redis and PostgreSQL's lease mode without fair mode, which keep their \
            waiting writers' marks but no line, so list them in the order they began: WAITING \
            is n+), a second table lists them in the order they \
            will be served; elsewhere WAITING is ?, unknown, not nobody. With --json, an array of \
            objects with `waiters` and `waiters_complete`."
    )]
    List(ListArgs),
    /// Say who leads an election, and with --watch every new leader.
    #[command(
        long_about = "Print the current leader of the election NAME: its value, its term (the \
            leader's fencing token) and its holder. With --watch, keep printing each new \
            leader, in term order, none skipped, until interrupted: a term that began and ended \
            between two looks is printed too, from the record of terms the backend keeps with \
            each campaign's grant (without its time left). A watcher that falls more than 32 \
            terms behind says so on stderr and goes on. With --json, one JSON object per leader \
            (null when nobody leads). Backends whose list shows only this process's locks \
            (memcached) cannot say who leads elsewhere, and Redis in quorum mode keeps no \
            record of terms to watch: exit 2."
    )]
    Leader(LeaderArgs),
    /// Run a command while this instance leads an election.
    #[command(
        long_about = "Campaign in the election NAME with --value V (an instance's URL, say, which \
            `distlock leader` shows), and run CMD once elected, as `distlock run` runs it: CMD \
            gets DISTLOCK_NAME and DISTLOCK_FENCING_TOKEN (the term). When the leadership is \
            lost, CMD is stopped and distlock exits 76; with --again it campaigns again \
            instead, and runs CMD anew once re-elected. When CMD exits, the leadership is \
            given up and distlock exits with CMD's code.",
        after_help = RUN_EXIT_CODES_HELP
    )]
    Campaign(CampaignArgs),
    /// Take a lock away from whoever holds it (needs --force).
    #[command(
        long_about = "Take the lock NAME away from whoever holds it. The holder learns at its \
            next lease extension that the lock is lost (distlock run then stops its command and \
            exits 76). Prints whether the lock was held."
    )]
    Release(ReleaseArgs),
    /// Show the lock at work: worker processes contend for one lock and
    /// update a shared counter under it.
    #[command(
        long_about = "Show the lock at work. N worker processes contend for one lock for the \
            given duration. Under the lock each does a deliberately unsafe read-modify-write of \
            a shared counter file, fenced by the fencing token, and watches for another holder \
            with a marker file. The report shows acquisitions, hand-off latency (from one \
            release to the next grant), overlaps (must be 0), whether every fencing token \
            increased, and whether the counter equals the number of acquisitions. Exits 1 if \
            any check fails."
    )]
    Demo(DemoArgs),
    /// Check a deployment: reach the backend, take and release a probe
    /// lock, measure the round trip.
    #[command(
        long_about = "Check that the backend can carry distlock's locks, one line per check with \
            a verdict (ok, warn or FAIL): that it can be reached; that a probe lock can be taken \
            and released (the permissions distlock needs); that fencing tokens increase; that \
            locks can be listed; whether releases wake waiters; the round trip of a take and \
            release (p50, p99); and whether the lease leaves room for it. Exits 0 unless a \
            check failed: 69 when the backend cannot be reached, 2 for configuration, \
            credentials or permissions, 1 otherwise."
    )]
    Check(CheckArgs),
    /// Print a completion script for a shell.
    #[command(
        long_about = "Print the completion script for SHELL on stdout, made from this \
            command's own definition. For bash: `distlock completions bash > \
            /etc/bash_completion.d/distlock`; for zsh, put it in a directory of $fpath as \
            `_distlock`; for fish, in ~/.config/fish/completions/distlock.fish."
    )]
    Completions(CompletionsArgs),
    /// Print a manual page (roff) on stdout.
    #[command(
        long_about = "Print distlock's manual page, or with a subcommand's name that \
            subcommand's page (distlock-run(1), …), in roff, on stdout, made from this command's \
            own definition: `distlock man > /usr/local/share/man/man1/distlock.1`, or \
            `distlock man run | man -l -` to read one now."
    )]
    Man(ManArgs),
    /// Internal: becomes CMD, tied to distlock's lifetime.
    #[command(name = "__exec", hide = true)]
    Exec(ExecArgs),
    /// Internal: one worker process of `distlock demo`.
    #[command(name = "__demo-worker", hide = true)]
    DemoWorker(WorkerArgs),
}

/// Where the locks live.
#[derive(Debug, Clone, Args)]
pub(crate) struct BackendArg {
    /// The backend URL (file://, file:///dir, memory://, …); default: the
    /// embedded file backend.
    #[arg(long, value_name = "URL", env = "DISTLOCK_URL", hide_env_values = true)]
    pub(crate) backend: Option<String>,
}

/// `distlock run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lock to hold while CMD runs. To hold several, name them all and
    /// put `--` before CMD: `distlock run A B C -- CMD`. They are taken in
    /// one canonical order, all or none, and released together.
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// Wait at most this long for the lock, then exit 75 or -E's code (default: wait as
    /// long as it takes). As flock(1) takes it, bare seconds work too.
    #[arg(short, long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,
    /// Try once; if the lock is held, exit 75 (or -E's code) without running CMD.
    #[arg(short, long)]
    pub(crate) no_wait: bool,
    /// Take the read side of NAME: readers hold it together, never beside a
    /// writer. Without it (or --permits), `run` takes the write side, which
    /// excludes everyone else.
    #[arg(short, long, conflicts_with = "permits")]
    pub(crate) shared: bool,
    /// Take one of N permits of the semaphore NAME, so that at most N
    /// commands run at once (N from 1 to 1000). Every holder must give the
    /// same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) permits: Option<u32>,
    /// The lease on backends whose locks expire unless extended (default
    /// 30s); the lease is extended every third of it.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) lease: Option<Duration>,
    /// Hold the lock for at most this long: then it is given up, CMD is
    /// stopped as for a lost lock, and `run` exits 76, so that a stuck job
    /// loses its lock in time.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) max_hold: Option<Duration>,
    /// Keep the lock at least this long after it was taken: a CMD that
    /// ends sooner leaves it held until then (judged by the server's clock;
    /// on the file backend by this machine's), so that the same job fired
    /// a moment later elsewhere finds it held. With --no-wait, the cron
    /// recipe. At most --max-hold.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) min_hold: Option<Duration>,
    /// After the lock is lost and CMD got SIGTERM, how long to wait before
    /// SIGKILL.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub(crate) kill_grace: Duration,
    /// Say nothing while waiting. Without it, on a terminal, `run` shows
    /// a line that names the lock, its holder and the holder's lease left.
    #[arg(short, long)]
    pub(crate) quiet: bool,
    /// The exit code when the lock is held and not acquired (default 75),
    /// as flock(1) has `-E`: 0 lets a cron job that finds its lock held
    /// skip its turn without failing.
    #[arg(short = 'E', long, value_name = "N", value_parser = clap::value_parser!(u8))]
    pub(crate) conflict_exit_code: Option<u8>,
    /// Keep the lock's handle in PATH while CMD runs, and at the start take
    /// up the grant PATH names if the store still holds it, with its
    /// fencing token: a run killed outright and restarted (by a supervisor,
    /// a deploy) carries on instead of waiting for its own lease to run
    /// out. PATH is written readable by you alone and removed once the lock
    /// is released. One lock only; not on backends whose locks end with
    /// their process (file, PostgreSQL's advisory mode).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["max_hold", "min_hold"])]
    pub(crate) resume_file: Option<std::path::PathBuf>,
    /// The command and its arguments. Put `--` before it when it starts
    /// with `-`; every argument after it is the command's.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
    /// Whether the parser took a `--` right before CMD (`run A -- CMD`),
    /// so that every later `--` is CMD's; set from the raw arguments.
    #[arg(skip)]
    pub(crate) dashes_before_command: bool,
    /// The label recorded with the grant in place of the command's, for
    /// `distlock campaign`'s value.
    #[arg(skip)]
    pub(crate) label: Option<String>,
}

/// `distlock leader`.
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// The election.
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// Keep printing each new leader until interrupted.
    #[arg(long)]
    pub(crate) watch: bool,
    /// One JSON object per leader: {"value", "term", "host", "pid",
    /// "expires_in_ms" (null where the lock lasts as long as the leader's
    /// process, and for a leader read from the record of terms)}, or null
    /// when nobody leads.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `distlock campaign`.
#[derive(Debug, Args)]
pub(crate) struct CampaignArgs {
    /// The election.
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// The value others read while this instance leads: one line of text,
    /// at most 1 KiB.
    #[arg(long, value_name = "V")]
    pub(crate) value: String,
    /// Campaign again when the leadership is lost, instead of exiting 76.
    #[arg(long)]
    pub(crate) again: bool,
    /// The lease on backends whose locks expire unless extended (default
    /// 30s); the lease is extended every third of it.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) lease: Option<Duration>,
    /// After the leadership is lost and CMD got SIGTERM, how long to wait
    /// before SIGKILL.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub(crate) kill_grace: Duration,
    /// Say nothing while waiting to be elected.
    #[arg(short, long)]
    pub(crate) quiet: bool,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// `distlock list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// Print a JSON array with one object per holder: {"name", "kind"
    /// ("exclusive", "shared" or "semaphore"), "permits": {"in_use",
    /// "limit"} or null, "holder": {"host", "pid", "label"} or null,
    /// "fencing_token" or null, "expires_in_ms" or null (the lock lasts as
    /// long as its holder's process), "waiters": [{"kind", "holder",
    /// "waiting_for_ms"}, …] in the order they will be served (on Redis
    /// and PostgreSQL's lease mode without fair mode, which keep no line,
    /// in the order they began), or null where the
    /// store keeps no waiters, "waiters_complete": true (every
    /// wait), false (only waits for the whole lock) or null}.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `distlock release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The lock to release.
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// Confirm taking the lock from whoever holds it.
    #[arg(long)]
    pub(crate) force: bool,
}

/// `distlock demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// How many worker processes contend for the lock.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) workers: u32,
    /// How long the workers contend.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "3s")]
    pub(crate) duration: Duration,
    /// The lock the workers contend for.
    #[arg(long, value_name = "NAME", default_value = "distlock-demo")]
    pub(crate) lock: String,
}

/// `distlock check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// The lease your clients use (default 30s), to judge against the
    /// measured round trip.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) lease: Option<Duration>,
    /// Print a JSON array of {"check", "verdict", "detail"} objects.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `distlock completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub(crate) shell: Shell,
}

/// `distlock man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// The subcommand whose page to print (run, list, release, demo,
    /// completions, man); without it, distlock's own.
    #[arg(value_name = "SUBCOMMAND")]
    pub(crate) subcommand: Option<String>,
}

/// The shells `distlock completions` writes for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// `distlock __exec`: the trampoline between distlock and CMD.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The pid of the distlock that must still be our parent.
    #[arg(long)]
    pub(crate) parent_pid: u32,
    /// The command to become.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}

/// `distlock __demo-worker`: one worker of the demo.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// The pid of the demo that must still be our parent.
    #[arg(long)]
    pub(crate) parent_pid: u32,
    /// This worker's number, for the report.
    #[arg(long)]
    pub(crate) worker: u32,
    /// The lock to contend for.
    #[arg(long)]
    pub(crate) lock: String,
    /// The directory with the counter and marker files.
    #[arg(long)]
    pub(crate) dir: PathBuf,
    /// When to stop, in milliseconds since the Unix epoch.
    #[arg(long)]
    pub(crate) until_unix_ms: u64,
}

/// Parses "30s", "500ms", "2m", "1h 30m", or bare seconds ("5", "0.5"),
/// as flock(1) takes them.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let hint = "write a duration like 30s, 500ms, 2m or bare seconds";
    match text.trim().parse::<f64>() {
        Ok(seconds) => Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("`{text}` is not a duration of 0 or more seconds; {hint}")),
        Err(_) => humantime::parse_duration(text).map_err(|error| format!("{error}; {hint}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_take_units_or_bare_seconds() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["-1", "NaN", "inf", "soon", "5 parsecs"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.contains("like 30s"), "{bad}: {error}");
        }
    }

    #[test]
    fn run_takes_flocks_short_flags() {
        let cli = Cli::try_parse_from(["distlock", "run", "x", "-s", "-w", "0.5", "--", "true"])
            .expect("parsed");
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        assert!(args.shared);
        assert_eq!(args.wait, Some(Duration::from_millis(500)));
        let cli =
            Cli::try_parse_from(["distlock", "run", "x", "-n", "--", "true"]).expect("parsed");
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        assert!(args.no_wait);
    }
}

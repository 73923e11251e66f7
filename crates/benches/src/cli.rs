//! The command line: the options of a run, and the hidden subcommands that
//! start one contending worker process of each contender.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::mix::MixArgs;
use crate::worker::WorkerArgs;

// The options of a run, or the subcommand of one worker process (a plain
// comment: a doc comment here would become the long help).
#[derive(Debug, Parser)]
#[command(
    name = "distlock-bench",
    about = "Benchmarks distlock's backends side by side, with peers in the same run"
)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub(crate) worker: Option<WorkerCommand>,
    /// A backend to measure; repeat for several. Default: file:// in a temp dir.
    #[arg(long = "backend", value_name = "URL")]
    pub(crate) backends: Vec<String>,
    /// How long each contended run lasts.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub(crate) seconds: Duration,
    /// How long the uncontended scenario lasts, all contenders together.
    #[arg(long, default_value = "12s", value_parser = humantime::parse_duration)]
    pub(crate) uncontended_seconds: Duration,
    /// Worker processes in the contention scenario.
    #[arg(long, default_value_t = 4)]
    pub(crate) processes: u32,
    /// Tasks (threads, for the Python peer) per worker process.
    #[arg(long, default_value_t = 4)]
    pub(crate) tasks: u32,
    /// Worker processes of one task each in the fourth contention
    /// workload, rounds in which every hand-off goes to another process;
    /// 0 skips that workload.
    #[arg(long, default_value_t = 16)]
    pub(crate) single_task_processes: u32,
    /// How long each task holds the lock in the third contention workload,
    /// rounds with work; 0s skips that workload.
    #[arg(long, default_value = "5ms", value_parser = humantime::parse_duration)]
    pub(crate) work: Duration,
    /// The waiters curve's points: processes of one task each, all
    /// taking one name in a tight loop.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    pub(crate) waiters: Vec<usize>,
    /// How long each point of the waiters curve lasts.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub(crate) waiters_seconds: Duration,
    /// The names curve's points: distinct names, each taken once.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000,100000")]
    pub(crate) names: Vec<usize>,
    /// The held-locks curve's points: locks held at once by one process
    /// (`--many`, one point, as before the curve).
    #[arg(
        long,
        alias = "many",
        value_delimiter = ',',
        default_value = "100,1000,10000,100000"
    )]
    pub(crate) held: Vec<usize>,
    /// How long the locks of each held-locks point are held: three
    /// cadences of the default lease.
    #[arg(long, alias = "many-seconds", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) held_seconds: Duration,
    /// The lease of the held locks (extended every third of it): the
    /// default, as users run it. A shorter one lets a short hold span
    /// several cadences, and asks the server for more extensions per
    /// second; the report scales what a cadence costs to the default lease.
    #[arg(long, alias = "many-lease", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) held_lease: Duration,
    /// How long a held-locks point may take its locks. Past it, the point
    /// is reported with how many it took, and how many leases a second the
    /// keeper was extending meanwhile: a server that spends itself keeping
    /// the locks held takes the next ever more slowly.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub(crate) held_take_within: Duration,
    /// How long a waiter's requests are counted while another client holds
    /// the lock, on an object store (whose waiters poll): three of the
    /// holder's extension cadences at the default lease.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) polling_seconds: Duration,
    /// Skip the peers (distributed-lock-mongo, tooz, sqlx's advisory lock,
    /// etcd's lock service, rslock, redlock).
    #[arg(long)]
    pub(crate) no_peers: bool,
    /// The Python peer's script (crates/benches/peers/tooz_bench.py); tooz
    /// runs against memcached only when given.
    #[arg(long, value_name = "SCRIPT")]
    pub(crate) tooz: Option<String>,
    /// The Python that runs the tooz script.
    #[arg(long, default_value = "python3")]
    pub(crate) python: String,
    /// etcd's command-line client; `etcdctl lock` runs in the uncontended
    /// scenario on etcd only when given.
    #[arg(long, value_name = "ETCDCTL")]
    pub(crate) etcdctl: Option<String>,
    /// Measure only the backends of this kind (file, MongoDB, memcached,
    /// etcd, PostgreSQL, which takes lease and advisory mode alike, Redis,
    /// objectstore, for `s3://`, `gs://` and `az://` URLs; any case);
    /// repeat for several. `scale-out`: only the scale-out forms given and
    /// their single-server forms, in the uncontended and contended
    /// scenarios, without peers. Default: every backend given,
    /// in every scenario. With `--write`, a run of some kinds merges into
    /// the file as a part of its own, "Partial run: KIND…", replacing an
    /// earlier run's part of no other kinds; a full run writes the file
    /// whole.
    #[arg(long = "only", value_name = "KIND")]
    pub(crate) only: Vec<String>,
    /// A line for the report's list of versions, e.g. "SecantusDB: secantusd-rs 0.5.3".
    #[arg(long = "note", value_name = "TEXT")]
    pub(crate) notes: Vec<String>,
    /// A line of the report's durability settings: a kind of backend (or
    /// `disk`), its servers' settings, and what a cycle waits for on disk
    /// (empty for a line that is not a backend's); repeat for each.
    #[arg(
        long = "durability",
        num_args = 3,
        allow_hyphen_values = true,
        value_names = ["KIND", "SETTINGS", "WAITS"]
    )]
    pub(crate) durability: Vec<String>,
    /// Also run distlock's `LockClient` in the uncontended rounds of the
    /// backend given as BACKEND, on the server at URL, started with
    /// SETTINGS (a measured-only row, e.g. durability off); repeat for
    /// several.
    #[arg(
        long = "measured-server",
        num_args = 3,
        allow_hyphen_values = true,
        value_names = ["BACKEND", "SETTINGS", "URL"]
    )]
    pub(crate) measured_servers: Vec<String>,
    /// The command shown in the report (default: this one).
    #[arg(long, value_name = "TEXT")]
    pub(crate) command: Option<String>,
    /// Write the Markdown report here instead of printing it.
    #[arg(long, value_name = "FILE")]
    pub(crate) write: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum WorkerCommand {
    /// One contending worker process of ours (started by the contention
    /// scenario, and by the semaphore and reader-writer scenario).
    #[command(hide = true)]
    Worker {
        #[command(flatten)]
        args: WorkerArgs,
        /// What its tasks take: the whole lock unless told otherwise.
        #[command(flatten)]
        mix: MixArgs,
    },
    /// One contending worker process of distributed-lock-mongo, with its
    /// defaults.
    #[command(hide = true)]
    PeerWorker {
        #[command(flatten)]
        args: WorkerArgs,
    },
    /// One contending worker process of etcd's own lock service (the
    /// `Lock` and `Unlock` RPCs).
    #[command(hide = true)]
    EtcdPeerWorker {
        #[command(flatten)]
        args: WorkerArgs,
    },
    /// One contending worker process of sqlx's `PgAdvisoryLock`.
    #[command(hide = true)]
    PgAdvisoryWorker {
        #[command(flatten)]
        args: WorkerArgs,
    },
    /// One contending worker process of the raw blocking `flock(2)`
    /// baseline, beside the file backend.
    #[command(hide = true)]
    FlockWorker {
        #[command(flatten)]
        args: WorkerArgs,
    },
    /// One contending worker process of rslock (Redis).
    #[command(hide = true)]
    RslockWorker {
        #[command(flatten)]
        args: WorkerArgs,
    },
    /// One contending worker process of redlock (Redis).
    #[command(hide = true)]
    RedlockWorker {
        #[command(flatten)]
        args: WorkerArgs,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds;
    use crate::mix::Mix;
    use crate::worker::{Layout, Window, Workload};

    /// A worker's command line, with `rest` after its backend and lock.
    fn worker_command(rest: impl IntoIterator<Item = String>) -> Vec<String> {
        [
            "distlock-bench",
            "worker",
            "--backend",
            "file:///x",
            "--lock",
            "l",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain(rest)
        .collect()
    }

    fn parsed_with(layout: Layout, process: u32, mix: Mix) -> (WorkerArgs, Mix) {
        let args = worker_command(
            layout
                .worker_args(process)
                .into_iter()
                .chain(mix.worker_args()),
        );
        match Args::try_parse_from(args).unwrap().worker {
            Some(WorkerCommand::Worker { args, mix }) => (args, mix.mix()),
            other => panic!("not a worker: {other:?}"),
        }
    }

    fn parsed(layout: Layout, process: u32) -> WorkerArgs {
        let (args, mix) = parsed_with(layout, process, Mix::Exclusive);
        assert_eq!(mix, Mix::Exclusive);
        args
    }

    #[test]
    fn workers_are_told_their_mix() {
        let layout = Layout {
            processes: 4,
            tasks: 4,
            window: Window {
                begin_ns: 1,
                start_ns: 1,
                until_ns: 2,
            },
            workload: Workload::Rounds {
                work: Duration::from_millis(5),
            },
        };
        for mix in kinds::MEASURED {
            let (w, told) = parsed_with(layout, 1, mix);
            assert_eq!(told, mix);
            assert_eq!(w.workload(), layout.workload);
        }
        let both = worker_command(
            layout
                .worker_args(0)
                .into_iter()
                .chain(["--permits", "4", "--writers", "1"].map(str::to_owned)),
        );
        assert!(Args::try_parse_from(both).is_err());
    }

    #[test]
    fn workers_are_told_their_workload() {
        let window = Window {
            begin_ns: 3,
            start_ns: 5,
            until_ns: 9,
        };
        for workload in Workload::all(Duration::from_micros(2500)) {
            let layout = Layout {
                processes: 4,
                tasks: 3,
                window,
                workload,
            };
            let w = parsed(layout, 2);
            assert_eq!(w.workload(), workload);
            assert_eq!((w.tasks, w.process), (3, 2));
            assert_eq!((w.start_ns, w.until_ns), (5, 9));
            assert_eq!(w.window().begin_ns, 3, "the warm-up");
        }
        assert_eq!(Workload::all(Duration::ZERO).len(), 2);
    }

    #[test]
    fn work_needs_rounds() {
        let rest = [
            "--tasks",
            "1",
            "--process",
            "0",
            "--start-ns",
            "0",
            "--until-ns",
            "1",
            "--work",
            "5ms",
        ];
        let args = worker_command(rest.into_iter().map(str::to_owned));
        assert!(Args::try_parse_from(args).is_err());
    }
}

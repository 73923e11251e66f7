//! `distlock-bench`: measures distlock on one or more backends, with peers
//! against the same servers in the same run, and writes the results as
//! Markdown.
//!
//! ```text
//! distlock-bench [--backend URL]… [--seconds S] [--uncontended-seconds S]
//!                [--processes P] [--tasks T] [--work D]
//!                [--many N] [--many-seconds S] [--many-lease L] [--no-peers] [--peer-sleep D]
//!                [--tooz SCRIPT] [--python PYTHON] [--etcdctl ETCDCTL] [--only KIND]…
//!                [--note TEXT]… [--write FILE]
//! ```
//!
//! Every scenario runs against every backend in the same run, so that the
//! ratios between them are meaningful on a noisy machine; the semaphore and
//! the reader-writer lock run on every backend whose capabilities grant
//! them. A backend spread over several servers (an etcd cluster, memcached
//! in quorum mode) is a scale-out form of its kind: it runs the uncontended
//! and contended scenarios only, without peers, beside its single-server
//! form. PostgreSQL's advisory mode (`?mode=advisory`) is a target of its
//! own, with sqlx's advisory lock beside it as beside lease mode, but
//! without the many-locks scenario: each lock it holds is a server
//! connection. Redis is measured against the raw pair issued directly
//! (`SET NX PX` and an owner-checked delete script), with rslock and
//! redlock beside it. `scripts/bench` starts the servers and runs this with
//! every backend.

mod asking;
mod commands;
mod counting;
mod etcd_metrics;
// etcd's Lock RPC peer needs etcd-client, whose build needs protoc: a
// build without it has a stand-in that says so.
#[cfg(feature = "etcd-client-peer")]
mod etcd_peer;
#[cfg(not(feature = "etcd-client-peer"))]
#[path = "etcd_peer_absent.rs"]
mod etcd_peer;
mod etcdctl;
mod flock_baseline;
mod kinds;
mod markdown;
mod mix;
mod order;
mod peers;
mod pg_peer;
mod pg_stats;
mod quiet;
mod redis_peers;
mod report;
mod scale_out;
mod scenarios;
mod target;
mod timeline;
mod variants;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args as ClapArgs, Parser, Subcommand};

use crate::kinds::{KindOutcome, KindRun, KindSummary};
use crate::mix::MixArgs;
use crate::peers::Tooz;
use crate::report::{BackendResults, Contended, Contestant, Run, Settings};
use crate::scale_out::ScaleOut;
use crate::scenarios::{Layout, Window, Workload, bench_name};
use crate::target::{Server, Target, kind_of_url};

#[derive(Debug, Parser)]
#[command(
    name = "distlock-bench",
    about = "Benchmarks distlock's backends side by side, with peers in the same run"
)]
struct Args {
    #[command(subcommand)]
    worker: Option<WorkerCommand>,
    /// A backend to measure; repeat for several. Default: file:// in a temp dir.
    #[arg(long = "backend", value_name = "URL")]
    backends: Vec<String>,
    /// How long each contended run lasts.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    seconds: Duration,
    /// How long the uncontended scenario lasts, all contenders together.
    #[arg(long, default_value = "12s", value_parser = humantime::parse_duration)]
    uncontended_seconds: Duration,
    /// Worker processes in the contention scenario.
    #[arg(long, default_value_t = 4)]
    processes: u32,
    /// Tasks (threads, for the Python peer) per worker process.
    #[arg(long, default_value_t = 4)]
    tasks: u32,
    /// How long each task holds the lock in the third contention workload,
    /// rounds with work; 0s skips that workload.
    #[arg(long, default_value = "5ms", value_parser = humantime::parse_duration)]
    work: Duration,
    /// Locks held at once in the many-locks scenario.
    #[arg(long, default_value_t = 10_000)]
    many: usize,
    /// How long the many locks are held.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    many_seconds: Duration,
    /// The lease of the many locks (extended every third of it).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    many_lease: Duration,
    /// Skip the peers (distributed-lock-mongo, tooz, sqlx's advisory lock,
    /// etcd's lock service, rslock, redlock).
    #[arg(long)]
    no_peers: bool,
    /// The second setting of distributed-lock-mongo: its sleep between
    /// tries (min = max), besides its defaults.
    #[arg(long, default_value = "400ms", value_parser = humantime::parse_duration)]
    peer_sleep: Duration,
    /// The Python peer's script (crates/benches/peers/tooz_bench.py); tooz
    /// runs against memcached only when given.
    #[arg(long, value_name = "SCRIPT")]
    tooz: Option<String>,
    /// The Python that runs the tooz script.
    #[arg(long, default_value = "python3")]
    python: String,
    /// etcd's command-line client; `etcdctl lock` runs in the uncontended
    /// scenario on etcd only when given.
    #[arg(long, value_name = "ETCDCTL")]
    etcdctl: Option<String>,
    /// Measure only the backends of this kind (file, MongoDB, memcached,
    /// etcd, PostgreSQL, which takes lease and advisory mode alike, Redis;
    /// any case); repeat for several. `scale-out`: only the scale-out forms
    /// given and their single-server forms, in the uncontended and
    /// contended scenarios, without peers. Default: every backend given,
    /// in every scenario.
    #[arg(long = "only", value_name = "KIND")]
    only: Vec<String>,
    /// A line for the report's list of versions, e.g. "SecantusDB: secantusd-rs 0.5.3".
    #[arg(long = "note", value_name = "TEXT")]
    notes: Vec<String>,
    /// The command shown in the report (default: this one).
    #[arg(long, value_name = "TEXT")]
    command: Option<String>,
    /// Write the Markdown report here instead of printing it.
    #[arg(long, value_name = "FILE")]
    write: Option<PathBuf>,
}

/// What a contending worker process is told.
#[derive(Debug, ClapArgs)]
struct WorkerArgs {
    #[arg(long)]
    backend: String,
    #[arg(long)]
    lock: String,
    #[arg(long)]
    tasks: u32,
    #[arg(long)]
    process: u32,
    #[arg(long)]
    start_ns: u64,
    #[arg(long)]
    until_ns: u64,
    /// Take the lock once per task per round, a round starting at each
    /// `go` line on standard input.
    #[arg(long)]
    rounds: bool,
    /// In rounds, hold the lock this long before releasing it.
    #[arg(long, requires = "rounds", value_parser = humantime::parse_duration)]
    work: Option<Duration>,
}

impl WorkerArgs {
    fn window(&self) -> Window {
        Window {
            start_ns: self.start_ns,
            until_ns: self.until_ns,
        }
    }

    fn workload(&self) -> Workload {
        if self.rounds {
            Workload::Rounds {
                work: self.work.unwrap_or_default(),
            }
        } else {
            Workload::TightLoop
        }
    }
}

#[derive(Debug, Subcommand)]
enum WorkerCommand {
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
    /// One contending worker process of distributed-lock-mongo.
    #[command(hide = true)]
    PeerWorker {
        #[command(flatten)]
        args: WorkerArgs,
        /// Its sleep between tries (min = max); its defaults when absent.
        #[arg(long, value_parser = humantime::parse_duration)]
        sleep: Option<Duration>,
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

/// The `--only` value that selects the scale-out forms.
const SCALE_OUT: &str = "scale-out";

/// Time for Rust workers to start and connect before the window opens.
const RUST_STARTUP: Duration = Duration::from_millis(1500);
/// Time for Python workers to start (importing tooz takes a while).
const PYTHON_STARTUP: Duration = Duration::from_secs(3);

/// The longest wait for a quiet machine before an uncontended scenario.
const QUIET_PATIENCE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let outcome = match &args.worker {
        Some(WorkerCommand::Worker { args: w, mix }) => {
            scenarios::worker(
                &w.backend,
                &w.lock,
                w.tasks,
                w.process,
                w.window(),
                w.workload(),
                mix.mix(),
            )
            .await
        }
        Some(WorkerCommand::PeerWorker { args: w, sleep }) => {
            peers::mongo_worker(
                &w.backend,
                &w.lock,
                w.tasks,
                w.process,
                w.window(),
                w.workload(),
                *sleep,
            )
            .await
        }
        Some(WorkerCommand::EtcdPeerWorker { args: w }) => {
            etcd_peer::worker(
                &w.backend,
                &w.lock,
                w.tasks,
                w.process,
                w.window(),
                w.workload(),
            )
            .await
        }
        Some(WorkerCommand::PgAdvisoryWorker { args: w }) => {
            pg_peer::worker(
                &w.backend,
                &w.lock,
                w.tasks,
                w.process,
                w.window(),
                w.workload(),
            )
            .await
        }
        Some(WorkerCommand::FlockWorker { args: w }) => {
            flock_baseline::worker(
                &w.backend,
                &w.lock,
                w.tasks,
                w.process,
                w.window(),
                w.workload(),
            )
            .await
        }
        Some(WorkerCommand::RslockWorker { args: w }) => {
            redis_peers::worker(
                redis_peers::Peer::Rslock,
                &w.backend,
                &w.lock,
                w.tasks,
                w.process,
                w.window(),
                w.workload(),
            )
            .await
        }
        Some(WorkerCommand::RedlockWorker { args: w }) => {
            redis_peers::worker(
                redis_peers::Peer::Redlock,
                &w.backend,
                &w.lock,
                w.tasks,
                w.process,
                w.window(),
                w.workload(),
            )
            .await
        }
        None => bench(&args).await,
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("distlock-bench: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn say(what: &str, seconds: Duration) {
    eprintln!("   {what} for {}", humantime::format_duration(seconds));
}

async fn bench(args: &Args) -> scenarios::Outcome<()> {
    let temp = std::env::temp_dir().join(format!("distlock-bench-{}", std::process::id()));
    let mut backends = if args.backends.is_empty() {
        vec![format!("file://{}", temp.display())]
    } else {
        args.backends.clone()
    };
    let scale_out_only = args
        .only
        .iter()
        .any(|only| only.eq_ignore_ascii_case(SCALE_OUT));
    if !args.only.is_empty() {
        // The kinds that some backend given spreads over several servers.
        let scaled: Vec<&str> = backends
            .iter()
            .filter(|url| ScaleOut::of_url(url).is_some())
            .map(|url| kind_of_url(url))
            .collect();
        backends.retain(|url| {
            let kind = kind_of_url(url);
            args.only.iter().any(|only| only.eq_ignore_ascii_case(kind))
                || (scale_out_only && scaled.contains(&kind))
        });
        if backends.is_empty() {
            return Err(format!(
                "no backend given is of a kind in --only {}",
                args.only.join(", ")
            ));
        }
    }
    let no_peers = args.no_peers || scale_out_only;
    // etcdctl runs only beside an etcd backend, and only with the peers.
    let etcdctl = args
        .etcdctl
        .as_deref()
        .filter(|_| !no_peers && backends.iter().any(|url| kind_of_url(url) == "etcd"));
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let has_memcached = backends.iter().any(|url| kind_of_url(url) == "memcached");
    let tooz = match (&args.tooz, no_peers || !has_memcached) {
        (Some(script), false) => Some(Tooz {
            python: args.python.clone(),
            script: script.clone(),
        }),
        _ => None,
    };
    // This command line, with the credentials of every URL in it hidden.
    let command = args.command.clone().unwrap_or_else(|| {
        std::env::args()
            .map(|arg| {
                if arg.contains("://") {
                    distlock::redact(&arg)
                } else {
                    arg
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    });
    let mut notes = args.notes.clone();
    if let Some(bin) = etcdctl
        && let Some(url) = backends
            .iter()
            .find(|url| kind_of_url(url) == "etcd" && ScaleOut::of_url(url).is_none())
        && let Some(version) = etcdctl::Etcdctl::for_url(bin, url)?.version().await
    {
        notes.push(version);
    }
    let mut run = Run::new(
        command,
        Settings {
            seconds: args.seconds,
            uncontended_seconds: args.uncontended_seconds,
            processes: args.processes,
            tasks: args.tasks,
            work: args.work,
            peer_sleep: args.peer_sleep,
        },
        notes,
    );
    if let Some(tooz) = &tooz {
        run.tooz_versions = Some(tooz.versions().await?);
    }
    #[cfg(not(feature = "etcd-client-peer"))]
    if !no_peers && backends.iter().any(|url| kind_of_url(url) == "etcd") {
        eprintln!("note: {}", etcd_peer::NOT_BUILT);
        run.left_out.push(etcd_peer::NOT_BUILT.to_owned());
    }
    let mut targets = Vec::new();
    for url in &backends {
        let target = Target::open(url).await?;
        let server_version = match &target.server {
            // The single-server form says which version it runs.
            _ if target.scale_out.is_some() => None,
            Server::Mongo { database, .. } => commands::mongo_version(database).await,
            Server::Memcached(backend) => commands::memcached_version(backend).await,
            Server::Etcd(Some(metrics)) => metrics.version().await,
            Server::Postgres(stats) => stats.version().await,
            Server::Redis(server) => server.version().await,
            Server::Etcd(None) | Server::Uncounted => None,
        };
        targets.push((target, server_version));
    }
    // Peers, the semaphore and reader-writer scenarios and the many locks
    // run on the single-server forms only, unless only the scale-out forms
    // are asked for.
    let full = |target: &Target| !scale_out_only && target.scale_out.is_none();
    // One scenario at a time for every backend, the many-locks scenario
    // last: the servers' background work after it (SecantusDB's TTL
    // monitor, say) then disturbs no other measurement.
    let mut partial = Vec::new();
    for (target, _) in &targets {
        eprintln!("== {} ({})", target.shown, target.label());
        let is_memcached = matches!(target.server, Server::Memcached(_));
        let quiet = quiet::until_quiet(QUIET_PATIENCE).await;
        eprintln!(
            "   waited {} for a quiet machine ({})",
            humantime::format_duration(Duration::from_millis(quiet.waited.as_millis() as u64)),
            quiet.busy.map_or("busyness unknown".into(), |busy| format!(
                "{:.0} % busy",
                busy * 100.0
            ))
        );
        say("uncontended", args.uncontended_seconds);
        let with_peers = full(target) && !no_peers && !target.fair();
        let mut uncontended =
            scenarios::uncontended(target, args.uncontended_seconds, with_peers, etcdctl).await?;
        uncontended.quiet = Some(quiet);
        let tooz_uncontended = match (&tooz, is_memcached && with_peers) {
            (Some(tooz), true) => {
                // As long as each of our contenders had in its rounds.
                let seconds = args.uncontended_seconds / 3;
                say("uncontended, tooz", seconds);
                let name = bench_name("tooz-uncontended");
                Some(tooz.uncontended(target, name.as_str(), seconds).await?)
            }
            _ => None,
        };
        partial.push((uncontended, tooz_uncontended));
    }
    let mut all_contended = Vec::new();
    for (target, _) in &targets {
        eprintln!("== {} ({})", target.shown, target.label());
        // A fair form is set beside its ordinary form's peers.
        let peers = full(target) && !no_peers && !target.fair();
        all_contended.push(contended_runs(args, &exe, target, peers, tooz.as_ref()).await?);
    }
    let mut all_kinds = Vec::new();
    for (target, _) in &targets {
        // Fair mode orders whole locks only, and leaves holding many alone.
        if full(target) && !target.fair() {
            eprintln!("== {} ({})", target.shown, target.label());
            all_kinds.push(kind_runs(args, &exe, target).await?);
        } else {
            all_kinds.push(Vec::new());
        }
    }
    for ((((target, server_version), (uncontended, tooz_uncontended)), contended), kinds) in targets
        .iter()
        .zip(partial)
        .zip(all_contended)
        .zip(all_kinds)
    {
        let many = if full(target) && target.advisory_mode() {
            // Each lock held is a server connection of its own.
            eprintln!(
                "== {} ({}): {} locks held: left out, {}",
                target.shown,
                target.label(),
                args.many,
                report::MANY_LEFT_OUT_ADVISORY
            );
            None
        } else if full(target) && !target.fair() {
            eprintln!("== {} ({})", target.shown, target.label());
            say(&format!("{} locks held", args.many), args.many_seconds);
            Some(scenarios::hold_many(target, args.many, args.many_seconds, args.many_lease).await?)
        } else {
            None
        };
        run.backends.push(BackendResults {
            kind: target.kind(),
            label: target.label(),
            scale_out: target.scale_out,
            advisory_mode: target.advisory_mode(),
            fair: target.fair(),
            url: target.shown.clone(),
            server_version: server_version.clone(),
            uncontended,
            tooz_uncontended,
            contended,
            kinds,
            many,
        });
    }
    let _ = std::fs::remove_dir_all(&temp);
    let markdown = run.to_markdown();
    match &args.write {
        Some(path) => std::fs::write(path, markdown)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
        None => print!("{markdown}"),
    }
    Ok(())
}

/// Every contended run on one backend: ours and, with `peers`, its peers',
/// in every workload.
async fn contended_runs(
    args: &Args,
    exe: &std::path::Path,
    target: &Target,
    peers: bool,
    tooz: Option<&Tooz>,
) -> scenarios::Outcome<Vec<Contended>> {
    let is_mongo = matches!(target.server, Server::Mongo { .. }) && peers;
    let is_memcached = matches!(target.server, Server::Memcached(_)) && peers;
    let is_etcd = matches!(target.server, Server::Etcd(_)) && peers;
    let is_postgres = matches!(target.server, Server::Postgres(_)) && peers;
    let is_redis = matches!(target.server, Server::Redis(_)) && peers;
    let is_file = target.url.starts_with("file:") && peers;
    let mut contended = Vec::new();
    for workload in Workload::all(args.work) {
        let scenario = workload.label();
        let run = |by, what: String, slug: &'static str| ContendedRun {
            args,
            target,
            workload,
            by,
            what,
            slug,
        };
        let ours = format!(
            "contended ({scenario}): {} processes x {} tasks",
            args.processes, args.tasks
        );
        contended.push(
            run(Contestant::Ours, ours, "contended")
                .contend(RUST_STARTUP, |lock, layout| {
                    Ok(scenarios::our_workers(exe, target, lock, layout))
                })
                .await?,
        );
        if is_mongo {
            for sleep in [None, Some(args.peer_sleep)] {
                let setting = sleep.map_or("defaults".to_owned(), |s| {
                    format!("{} sleep", humantime::format_duration(s))
                });
                let what = format!("contended ({scenario}), distributed-lock-mongo ({setting})");
                contended.push(
                    run(Contestant::MongoPeer { sleep }, what, "peer-contended")
                        .contend(RUST_STARTUP, |lock, layout| {
                            Ok(peers::mongo_workers(
                                exe,
                                target,
                                lock.as_str(),
                                layout,
                                sleep,
                            ))
                        })
                        .await?,
                );
            }
        }
        if is_etcd && etcd_peer::BUILT {
            let what = format!("contended ({scenario}), etcd's Lock RPC");
            contended.push(
                run(Contestant::EtcdLockRpc, what, "etcd-peer-contended")
                    .contend(RUST_STARTUP, |lock, layout| {
                        Ok(etcd_peer::workers(exe, target, lock.as_str(), layout))
                    })
                    .await?,
            );
        }
        if is_postgres {
            let what = format!("contended ({scenario}), sqlx's PgAdvisoryLock");
            contended.push(
                run(Contestant::PgAdvisoryLock, what, "pg-advisory-contended")
                    .contend(RUST_STARTUP, |lock, layout| {
                        Ok(pg_peer::workers(exe, target, lock.as_str(), layout))
                    })
                    .await?,
            );
        }
        if is_redis {
            for (peer, by, label, slug) in [
                (
                    redis_peers::Peer::Rslock,
                    Contestant::Rslock,
                    "rslock",
                    "rslock-contended",
                ),
                (
                    redis_peers::Peer::Redlock,
                    Contestant::Redlock,
                    "redlock",
                    "redlock-contended",
                ),
            ] {
                let what = format!("contended ({scenario}), {label}");
                contended.push(
                    run(by, what, slug)
                        .contend(RUST_STARTUP, |lock, layout| {
                            Ok(redis_peers::workers(
                                exe,
                                &target.url,
                                peer,
                                lock.as_str(),
                                layout,
                            ))
                        })
                        .await?,
                );
            }
        }
        if is_file {
            let what = format!("contended ({scenario}), raw blocking flock");
            contended.push(
                run(Contestant::RawFlock, what, "raw-flock-contended")
                    .contend(RUST_STARTUP, |lock, layout| {
                        Ok(flock_baseline::workers(exe, target, lock.as_str(), layout))
                    })
                    .await?,
            );
        }
        if let (Some(tooz), true) = (tooz, is_memcached) {
            let what = format!("contended ({scenario}), tooz");
            contended.push(
                run(Contestant::Tooz, what, "tooz-contended")
                    .contend(PYTHON_STARTUP, |lock, layout| {
                        tooz.workers(target, lock.as_str(), layout)
                    })
                    .await?,
            );
        }
    }
    Ok(contended)
}

/// One contended run of one contestant in one workload.
struct ContendedRun<'a> {
    args: &'a Args,
    target: &'a Target,
    workload: Workload,
    by: Contestant,
    /// What the run says it does as it starts.
    what: String,
    /// Its lock's name starts with this.
    slug: &'static str,
}

impl ContendedRun<'_> {
    /// Says what runs, starts the workers `start` makes for a lock of this
    /// run's own and a window opening after `startup`, and gathers what
    /// they did.
    async fn contend(
        self,
        startup: Duration,
        start: impl FnOnce(
            &distlock::LockName,
            Layout,
        ) -> scenarios::Outcome<Vec<tokio::process::Command>>,
    ) -> scenarios::Outcome<Contended> {
        say(&self.what, self.args.seconds);
        let window = Window::after(startup, self.args.seconds);
        let layout = Layout {
            processes: self.args.processes,
            tasks: self.args.tasks,
            window,
            workload: self.workload,
        };
        let workers = start(&bench_name(self.slug), layout)?;
        Ok(Contended {
            by: self.by,
            workload: self.workload,
            result: scenarios::contend(self.target, workers, window, self.workload.rounds())
                .await?,
        })
    }
}

/// The semaphore and the reader-writer lock on one backend (see
/// [`kinds`]), each in rounds with the contention scenario's work, or left
/// out where the backend's capabilities do not grant it.
async fn kind_runs(
    args: &Args,
    exe: &std::path::Path,
    target: &Target,
) -> scenarios::Outcome<Vec<KindRun>> {
    let (processes, tasks) = (args.processes, args.tasks);
    let workload = Workload::Rounds { work: args.work };
    let capabilities = target.backend.capabilities();
    let mut runs = Vec::new();
    for mix in kinds::MEASURED {
        if let Some(claim) = mix.refused_by(&capabilities) {
            eprintln!("   {}: left out, {claim} is not granted", mix.label());
            runs.push(KindRun {
                mix,
                outcome: KindOutcome::LeftOut(claim),
            });
            continue;
        }
        say(
            &format!(
                "{} ({}): {processes} processes x {tasks} tasks",
                mix.label(),
                workload.label()
            ),
            args.seconds,
        );
        let window = Window::after(RUST_STARTUP, args.seconds);
        let layout = Layout {
            processes,
            tasks,
            window,
            workload,
        };
        let workers = kinds::workers(exe, target, &bench_name(mix.slug()), layout, mix);
        let gathered = scenarios::gather(target, workers, window, workload.rounds()).await?;
        runs.push(KindRun {
            mix,
            outcome: KindOutcome::Measured(Box::new(KindSummary::new(
                gathered,
                mix,
                window.length(),
            ))),
        });
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mix::Mix;

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

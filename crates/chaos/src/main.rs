//! `distlock-chaos`: distlock's reliability campaign.
//!
//! Each scenario puts one fault between lock holders and their backend
//! (a server restart, a paused or killed holder, a lost acknowledgement, a
//! shifted clock…), while holders in separate processes do read-increment-
//! write cycles on a [fenced counter](fenced). The [judge] then counts, from
//! the counter's log and the holders' own records on one monotonic clock,
//! the overlaps among valid holders, the lost updates and the fencing-token
//! regressions, and checks each exclusive run's [history] for
//! linearizability. `bash scripts/chaos` runs every scenario in full and writes
//! RELIABILITY.md; the test `short` runs each in a short form in CI.
//!
//! A backend joins the campaign with one line in [`backends::ALL`].
//!
//! ```text
//! distlock-chaos [--backend NAME]… [--scenario ID]… [--short] [--lease D]
//!                [--note TEXT]… [--command TEXT] [--write FILE [--part]]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::report::{Row, RunInfo};
use crate::settings::Settings;

mod answers;
mod backends;
mod campaign;
mod clock;
mod extensions;
mod fenced;
mod figures;
mod history;
mod holder;
mod holdings;
mod judge;
mod mutants;
mod outcome;
mod part;
mod report;
mod scenarios;
mod scratch;
mod servers;
mod settings;
mod witness;
mod worker;

#[derive(Debug, Parser)]
#[command(name = "distlock-chaos", about = "distlock's reliability campaign")]
struct Args {
    #[command(subcommand)]
    worker: Option<Worker>,
    /// A backend to run against (file, MongoDB, memcached, etcd,
    /// PostgreSQL, postgresql-advisory, redis, redis-volatile,
    /// redis-quorum, redis-cluster, objectstore-azure (on Azurite),
    /// objectstore-s3 (on moto), and the fair forms mongodb-fair,
    /// etcd-fair, postgresql-fair and postgresql-advisory-fair, which run
    /// R1, R4 and R5); repeat for several. Default: every backend.
    #[arg(long = "backend", value_name = "NAME")]
    backends: Vec<String>,
    /// A scenario to run (R1, R2, …); repeat for several. Default: all.
    #[arg(long = "scenario", value_name = "ID")]
    scenarios: Vec<String>,
    /// The short form, as CI runs it.
    #[arg(long)]
    short: bool,
    /// Every holder's lease.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// A line for the report's head (versions); repeat for several.
    #[arg(long = "note", value_name = "TEXT")]
    notes: Vec<String>,
    /// The command to name in the report.
    #[arg(long)]
    command: Option<String>,
    /// Writes this run, of the backends named by --backend, as a part of
    /// its own at the end of --write's report ("Partial run: NAME, …"),
    /// replacing an earlier part of the same backends and keeping the rest:
    /// for a backend that joins the campaign.
    #[arg(long, requires = "write", requires = "backends")]
    part: bool,
    /// Where to write the report (default: stdout).
    #[arg(long, value_name = "FILE")]
    write: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Worker {
    /// Runs one holder process (used by the campaign itself).
    #[command(hide = true)]
    Worker { spec: String },
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Worker::Worker { spec }) = &args.worker {
        return run_worker(spec);
    }
    match campaign(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("distlock-chaos: {error}");
            ExitCode::from(2)
        }
    }
}

fn run_worker(spec: &str) -> ExitCode {
    let outcome = (|| -> Outcome<()> {
        let spec = serde_json::from_str(spec)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let outcome = runtime.block_on(worker::run(spec));
        // The worker's records are written; the MongoDB driver's background
        // tasks can panic when a runtime is torn down under them
        // (mongo-rust-driver#1204), which would only add noise to the
        // campaign's output. So the process ends here, runtime and all.
        std::process::exit(match outcome {
            Ok(()) => 0,
            Err(error) => {
                eprintln!("distlock-chaos worker: {error}");
                1
            }
        })
    })();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("distlock-chaos worker: {error}");
            ExitCode::from(1)
        }
    }
}

fn campaign(args: &Args) -> Outcome<bool> {
    let kinds = if args.backends.is_empty() {
        backends::ALL.to_vec()
    } else {
        args.backends
            .iter()
            .map(|name| {
                backends::parse(name).ok_or_else(|| {
                    let known: Vec<_> = backends::ALL
                        .iter()
                        .map(|kind| kind.option_name())
                        .collect();
                    format!("unknown backend {name}; use one of {}", known.join(", "))
                })
            })
            .collect::<Result<_, _>>()?
    };
    let chosen: Vec<_> = scenarios::all()
        .into_iter()
        .filter(|scenario| {
            args.scenarios.is_empty()
                || args
                    .scenarios
                    .iter()
                    .any(|id| id.eq_ignore_ascii_case(scenario.info.id))
        })
        .collect();
    let exe = std::env::current_exe()?;
    let settings = Settings {
        cli: exe
            .parent()
            .map(|dir| dir.join("distlock"))
            .filter(|cli| cli.exists()),
        exe,
        short: args.short,
        lease: args.lease,
    };
    let servers = kinds
        .iter()
        .filter_map(|kind| Some((kind.name().to_owned(), kind.server()?.shown())))
        .collect();
    let names: Vec<&str> = kinds.iter().map(|kind| kind.option_name()).collect();
    let started = Instant::now();
    let mut rows = Vec::new();
    for kind in kinds {
        let mut server = Server::start(kind)?;
        for scenario in &chosen {
            let runs_it = kind.scenarios().is_none_or(|ids| {
                ids.iter()
                    .any(|id| id.eq_ignore_ascii_case(scenario.info.id))
            });
            if !runs_it {
                continue;
            }
            eprintln!("distlock-chaos: {} on {}", scenario.info.id, kind.name());
            match (scenario.run)(&mut server, &settings) {
                Ok(found) => rows.extend(found),
                Err(error) => rows.push(Row {
                    scenario: scenario.info.id,
                    backend: kind.name(),
                    kind: "—".into(),
                    verdict: None,
                    detail: format!("the scenario could not run: {error}"),
                    passed: false,
                    overlaps_allowed: None,
                    minimum: None,
                    applies: true,
                }),
            }
        }
    }
    let run = RunInfo {
        command: args
            .command
            .clone()
            .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" ")),
        machine: machine(),
        versions: args.notes.clone(),
        servers,
        short: args.short,
        took: started.elapsed(),
    };
    let infos: Vec<_> = chosen.iter().map(|scenario| scenario.info).collect();
    let text = report::markdown(&run, &infos, &rows);
    match &args.write {
        Some(path) if args.part => {
            let existing = match std::fs::read_to_string(path) {
                Ok(existing) => existing,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(error) => return Err(error.into()),
            };
            std::fs::write(path, part::merged(&existing, &part::title(&names), &text))?;
        }
        Some(path) => std::fs::write(path, &text)?,
        None => print!("{text}"),
    }
    Ok(rows.iter().all(|row| report::held(row, &infos, args.short)))
}

/// The processors, memory and kernel of this machine.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let kib: u64 = info
                .lines()
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some(format!("{:.0} GiB", kib as f64 / 1024.0 / 1024.0))
        })
        .unwrap_or_else(|| "unknown memory".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|release| format!("Linux {}", release.trim()))
        .unwrap_or_else(|_| "unknown kernel".into());
    format!("{cpus} processors, {memory}, {kernel}")
}

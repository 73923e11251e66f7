//! `distlock-bench`: measures distlock on one or more backends and writes
//! the results as Markdown.
//!
//! ```text
//! distlock-bench [--backend URL]… [--seconds S] [--processes P] [--tasks T]
//!                [--many N] [--many-seconds S] [--write FILE]
//! ```
//!
//! Every scenario runs against every backend in the same run, so that the
//! ratios between them are meaningful on a noisy machine. `scripts/bench`
//! starts the servers and runs this with every backend.

mod counting;
mod report;
mod scenarios;
mod timeline;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::report::{BackendResults, Run};

#[derive(Debug, Parser)]
#[command(
    name = "distlock-bench",
    about = "Benchmarks distlock's backends side by side"
)]
struct Args {
    #[command(subcommand)]
    worker: Option<Worker>,
    /// A backend to measure; repeat for several. Default: file:// in a temp dir.
    #[arg(long = "backend", value_name = "URL")]
    backends: Vec<String>,
    /// How long each timed scenario runs.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    seconds: Duration,
    /// Worker processes in the contention scenario.
    #[arg(long, default_value_t = 4)]
    processes: u32,
    /// Tasks per worker process in the contention scenario.
    #[arg(long, default_value_t = 4)]
    tasks: u32,
    /// Locks held at once in the many-locks scenario.
    #[arg(long, default_value_t = 10_000)]
    many: usize,
    /// How long the many locks are held.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    many_seconds: Duration,
    /// Write the Markdown report here instead of printing it.
    #[arg(long, value_name = "FILE")]
    write: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Worker {
    /// One contending worker process (started by the contention scenario).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        backend: String,
        #[arg(long)]
        lock: String,
        #[arg(long)]
        tasks: u32,
        #[arg(long)]
        until_ns: u64,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let outcome = match &args.worker {
        Some(Worker::Worker {
            backend,
            lock,
            tasks,
            until_ns,
        }) => scenarios::worker(backend, lock, *tasks, *until_ns).await,
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

async fn bench(args: &Args) -> scenarios::Outcome<()> {
    let temp = std::env::temp_dir().join(format!("distlock-bench-{}", std::process::id()));
    let backends = if args.backends.is_empty() {
        vec![format!("file://{}", temp.display())]
    } else {
        args.backends.clone()
    };
    let mut run = Run::new(std::env::args().collect::<Vec<_>>().join(" "));
    for url in &backends {
        let shown = distlock::redact(url);
        eprintln!("== {shown}");
        let backend = distlock::open(url)
            .await
            .map_err(|e| format!("{shown}: {e}"))?;
        eprintln!(
            "   uncontended for {}",
            humantime::format_duration(args.seconds)
        );
        let uncontended = scenarios::uncontended(backend.clone(), args.seconds).await?;
        eprintln!(
            "   contended: {} processes x {} tasks for {}",
            args.processes,
            args.tasks,
            humantime::format_duration(args.seconds)
        );
        let contended = scenarios::contended(url, args.processes, args.tasks, args.seconds).await?;
        eprintln!(
            "   {} locks held for {}",
            args.many,
            humantime::format_duration(args.many_seconds)
        );
        let many = scenarios::hold_many(
            backend,
            args.many,
            args.many_seconds,
            Duration::from_secs(30),
        )
        .await?;
        run.backends.push(BackendResults {
            url: shown,
            uncontended,
            contended,
            many,
        });
    }
    let _ = std::fs::remove_dir_all(&temp);
    let markdown = run.to_markdown(args.processes, args.tasks);
    match &args.write {
        Some(path) => std::fs::write(path, markdown)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
        None => print!("{markdown}"),
    }
    Ok(())
}

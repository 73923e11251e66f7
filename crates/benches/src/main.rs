//! `distlock-bench`: measures distlock on one or more backends, with peers
//! against the same servers in the same run, and writes the results as
//! Markdown.
//!
//! ```text
//! distlock-bench [--backend URL]… [--seconds S] [--uncontended-seconds S]
//!                [--processes P] [--tasks T] [--work D] [--single-task-processes N]
//!                [--waiters N,…] [--waiters-seconds S] [--names N,…]
//!                [--held N,…] [--held-seconds S] [--held-lease L]
//!                [--held-take-within D] [--no-peers]
//!                [--tooz SCRIPT] [--python PYTHON] [--etcdctl ETCDCTL] [--only KIND]…
//!                [--note TEXT]… [--durability KIND SETTINGS WAITS]…
//!                [--measured-server BACKEND SETTINGS URL]… [--write FILE]
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
//! without the held-locks curve: each lock it holds is a server
//! connection. Section 4's curves (waiters, names, held locks) are drawn
//! as SVG charts beside the report it writes (see [`charts`]). Redis is measured against the raw pair issued directly
//! (`SET NX PX` and an owner-checked delete script), with rslock and
//! redlock beside it. `scripts/bench` starts the servers and runs this with
//! every backend.

mod asking;
mod bench;
mod charts;
mod cli;
mod clock;
mod commands;
mod contenders;
mod counting;
mod cycles;
mod distribution;
mod durability;
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
mod gather;
mod kinds;
mod markdown;
mod mix;
mod names;
mod objectstore;
mod open_files;
mod order;
mod ours;
mod outcome;
mod peers;
mod pg_counts;
mod pg_peer;
mod pg_statements;
mod pg_stats;
mod pg_steps;
mod process_cpu;
mod quiet;
mod redis_peers;
mod report;
mod scale_out;
mod scaling;
mod scenario;
mod sections;
mod stamp;
mod target;
mod timeline;
mod uncontended;
mod url_kind;
mod variants;
mod worker;

use clap::Parser;

use crate::cli::{Args, WorkerCommand};
use crate::redis_peers::Peer;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    log_if_asked();
    let outcome = match &args.worker {
        Some(WorkerCommand::Worker { args, mix }) => ours::worker(args, mix.mix()).await,
        Some(WorkerCommand::PeerWorker { args }) => peers::mongo_worker(args).await,
        Some(WorkerCommand::EtcdPeerWorker { args }) => etcd_peer::worker(args).await,
        Some(WorkerCommand::PgAdvisoryWorker { args }) => pg_peer::worker(args).await,
        Some(WorkerCommand::FlockWorker { args }) => flock_baseline::worker(args).await,
        Some(WorkerCommand::RslockWorker { args }) => redis_peers::worker(Peer::Rslock, args).await,
        Some(WorkerCommand::RedlockWorker { args }) => {
            redis_peers::worker(Peer::Redlock, args).await
        }
        None => bench::bench(&args).await,
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("distlock-bench: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs to stderr what `RUST_LOG` asks for (e.g. `distlock_core=debug`,
/// the keeper's batches): nothing without it, so a run's output is only
/// its report.
fn log_if_asked() {
    let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

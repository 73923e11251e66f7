//! Runs the worker processes of one contended run and gathers what they
//! report, with the server's counts over the window.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::clock::{now_ns, sleep_until_ns};
use crate::commands::Counts;
use crate::outcome::Outcome;
use crate::pg_stats::PUBLISHED_AFTER_CLOSE;
use crate::target::Target;
use crate::timeline::Contention;
use crate::worker::{Line, Tenure, Window};
/// What the workers of one contended run reported.
#[derive(Debug, Default)]
struct Reports {
    holds: Vec<Tenure>,
    commands: Option<Counts>,
    errors: u64,
}

impl Reports {
    /// Takes in one line; returns the round it closes, if it closes one.
    fn absorb(&mut self, line: &str) -> Outcome<Option<u32>> {
        match serde_json::from_str::<Line>(line)
            .map_err(|e| format!("bad worker line {line:?}: {e}"))?
        {
            Line::Hold(hold) => self.holds.push(hold),
            Line::Commands(counts) => self
                .commands
                .get_or_insert_with(Counts::default)
                .add(&counts),
            Line::Errors(n) => self.errors += n,
            Line::RoundDone(round) => return Ok(Some(round)),
        }
        Ok(None)
    }
}

/// Runs one worker process per command, all contending for one lock within
/// `window`, and sums up what they report with [`Contention::from_holds`]
/// (see [`gather`]).
pub(crate) async fn contend(
    target: &Target,
    workers: Vec<Command>,
    window: Window,
    rounds: bool,
) -> Outcome<Contention> {
    let gathered = gather(target, workers, window, rounds).await?;
    let mut contention = Contention::from_holds(gathered.holds, window.length());
    contention.errors = gathered.errors;
    contention.commands = gathered.commands;
    contention.server_ops = gathered.server_ops;
    Ok(contention)
}

/// What the workers of one contended run reported, over its window.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    /// The holds granted within the window.
    pub(crate) holds: Vec<Tenure>,
    /// Server commands over the window, where counted.
    pub(crate) commands: Option<Counts>,
    /// The server's own count of its operations over the window, where it
    /// keeps one.
    pub(crate) server_ops: Option<Counts>,
    /// Calls that failed (the workers went on).
    pub(crate) errors: u64,
}

/// Runs one worker process per command, all contending for one lock within
/// `window`, and gathers what they report. In the tight loop every task
/// takes the lock over and over; with `rounds`, the parent starts rounds
/// (a `go` line to every worker) until the window closes, and every task
/// takes the lock once per round (see [`crate::worker::Workload`]). Server commands come
/// from the workers' own counts (MongoDB), from the server's counters read
/// when the window opens and closes (memcached, etcd), or, where the server
/// publishes them late (PostgreSQL), read when the window opens and once
/// every worker has exited.
pub(crate) async fn gather(
    target: &Target,
    workers: Vec<Command>,
    window: Window,
    rounds: bool,
) -> Outcome<Gathered> {
    let mut children = Vec::new();
    for mut command in workers {
        let child = command
            .stdin(if rounds {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start a worker: {e}"))?;
        children.push(child);
    }
    // The server's counts when the window opens and when it closes, read on
    // time whatever the workers do: a peer that sleeps past the end of the
    // window (tooz waits a whole second between tries) adds nothing.
    let edges = {
        let target = target.clone();
        tokio::spawn(async move {
            sleep_until_ns(window.start_ns).await;
            let opened = (target.counts().await, target.server_ops().await);
            sleep_until_ns(window.until_ns).await;
            let closed = (target.counts().await, target.server_ops().await);
            (opened, closed)
        })
    };
    let mut readers = Vec::new();
    let mut stdins = Vec::new();
    for child in &mut children {
        readers.push(BufReader::new(child.stdout.take().ok_or("worker without stdout")?).lines());
        stdins.extend(child.stdin.take());
    }
    let mut reports = Reports::default();
    if rounds {
        sleep_until_ns(window.start_ns).await;
        while now_ns() < window.until_ns {
            for stdin in &mut stdins {
                stdin
                    .write_all(b"go\n")
                    .await
                    .map_err(|e| format!("cannot start a round: {e}"))?;
                stdin.flush().await.map_err(|e| e.to_string())?;
            }
            for reader in &mut readers {
                loop {
                    let line = reader
                        .next_line()
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or("a worker ended in the middle of a round")?;
                    if reports.absorb(&line)?.is_some() {
                        break;
                    }
                }
            }
        }
    }
    drop(stdins);
    for (reader, mut child) in readers.iter_mut().zip(children) {
        while let Some(line) = reader.next_line().await.map_err(|e| e.to_string())? {
            reports.absorb(&line)?;
        }
        let status = child.wait().await.map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("a worker failed: {status}"));
        }
    }
    let ((counts_opened, ops_opened), (mut counts_closed, ops_closed)) =
        edges.await.map_err(|e| e.to_string())?;
    if target.counts_published_late() {
        // The workers' connections have closed, and their counts are
        // published as the server's processes for them exit.
        tokio::time::sleep(PUBLISHED_AFTER_CLOSE).await;
        counts_closed = target.counts().await;
    }
    let server_ops = match (ops_opened, ops_closed) {
        (Some(before), Some(after)) => {
            let mut delta = after.since(&before);
            // The serverStatus that read the second sample.
            if let Some(commands) = delta.0.get_mut("command") {
                *commands = commands.saturating_sub(1);
            }
            Some(delta)
        }
        _ => None,
    };
    // MongoDB's commands are counted by each worker's own client; the
    // parent's monitor sees none of them. memcached's and etcd's come from
    // the server.
    let commands = match (counts_opened?, counts_closed?) {
        (Some(before), Some(after)) if target.counted_by_server() => {
            Some(target.counted_between(&before, &after))
        }
        _ => reports.commands,
    };
    let mut holds = reports.holds;
    holds.retain(|hold| window.contains(hold.acquired_at_ns));
    Ok(Gathered {
        holds,
        commands,
        server_ops,
        errors: reports.errors,
    })
}

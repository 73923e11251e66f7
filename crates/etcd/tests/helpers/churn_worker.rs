//! A churn worker for `tests/cluster.rs`, which runs several at once:
//! `DISTLOCK_ETCD_CHURN_WORKER` names its settings file; it contends for
//! one lock with four tasks through a fenced counter until the settings'
//! deadline, and writes what each holding saw to the results file. Built
//! only for the crate's own tests (the `test-helpers` feature), never for
//! users.

// Shared with the test or its children; each uses what it needs.
#[allow(dead_code)]
#[path = "../support/child.rs"]
mod child;

#[path = "../support/churn.rs"]
mod churn;
// Shared with the churn test, which also reads the counter's value.
#[allow(dead_code)]
#[path = "../support/fenced.rs"]
mod fenced;

use std::time::Duration;

use child::{client, now_ns};
use distlock_core::LockName;

use churn::{Holding, Report, Settings};
use fenced::{Fenced, Op};

/// Set by the test: the path of the worker's settings file.
const WORKER_ENV: &str = "DISTLOCK_ETCD_CHURN_WORKER";

/// How long a worker waits for the lock: far longer than an election and
/// the queue ahead of it take, so a wait that ends unserved means a stuck
/// queue (a key left behind), not a slow one.
const WAIT: Duration = Duration::from_secs(30);
const TASKS: usize = 4;

fn main() {
    let path = std::env::var_os(WORKER_ENV)
        .unwrap_or_else(|| panic!("{WORKER_ENV}: the path of the worker's settings"));
    let settings: Settings =
        serde_json::from_slice(&std::fs::read(path).expect("settings")).expect("settings");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let report = runtime.block_on(churn_worker(&settings));
    std::fs::write(
        &settings.results,
        serde_json::to_vec(&report).expect("report"),
    )
    .expect("results");
}

async fn churn_worker(settings: &Settings) -> Report {
    let client = client(&settings.url, Duration::from_secs(2)).await;
    let name = LockName::new(settings.name.as_str()).expect("name");
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (client, name) = (client.clone(), name.clone());
        let counter = Fenced::new(&settings.counter);
        let until = settings.until_ns;
        tasks.push(tokio::spawn(async move {
            let mut report = Report::default();
            while now_ns() < until {
                match client.acquire_with(&name, WAIT).await {
                    Ok(guard) => report.holdings.push(hold(&guard, &counter).await),
                    Err(error) => {
                        report.failed_waits += 1;
                        if report.errors.len() < 3 {
                            report.errors.push(error.to_string());
                        }
                    }
                }
            }
            report
        }));
    }
    let mut report = Report::default();
    for task in tasks {
        let part = task.await.expect("task");
        report.holdings.extend(part.holdings);
        report.failed_waits += part.failed_waits;
        report.errors.extend(part.errors);
    }
    report
}

/// One read-increment-write of the fenced counter under `guard`, with a
/// pause between the read and the write in which another holder, if one
/// were let in, would lose an update.
async fn hold(guard: &distlock_core::LockGuard, counter: &Fenced) -> Holding {
    let granted_ns = now_ns();
    let token = guard.fencing_token();
    let read = counter.apply(Op::Read, token);
    let pause = tokio::time::sleep(Duration::from_millis(2));
    let lost = tokio::select! {
        () = pause => false,
        _ = guard.lost() => true,
    };
    let (lost, ended_ns, write_accepted) = if lost {
        (true, now_ns(), false)
    } else {
        let write = read.map(|value| counter.apply(Op::Write(value + 1), token));
        let ended = now_ns();
        (guard.is_lost(), ended, matches!(write, Some(Some(_))))
    };
    Holding {
        token,
        granted_ns,
        ended_ns,
        lost,
        read_accepted: read.is_some(),
        write_accepted,
    }
}

//! Short-lived `distlock run` processes on one name, against a 3-member
//! etcd cluster of the test's own whose leader is SIGKILLed and restarted
//! every few seconds (finding 13). A run whose release failed during an
//! election used to leave its key behind, on a session that outlived the
//! process, and elections renewed such sessions for ever: the name stayed
//! blocked. Every run must now get the lock within a wait shorter than a
//! session left behind would block the name, so a blocked name fails runs
//! by itself; and runs on the steady cluster must leave no session.
//!
//! `DISTLOCK_CLI_CHURN_WORKERS` and `DISTLOCK_CLI_CHURN_RUNS` (runs per
//! worker) make it longer, and `DISTLOCK_CLI_CHURN_KILL_EVERY` (seconds)
//! harsher; the defaults keep it under a minute or so. More workers make
//! a longer queue on the name, which may need a longer wait
//! (`DISTLOCK_CLI_CHURN_WAIT`, a duration such as `60s`).

mod common;
mod etcd_cluster;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{distlock, unique};
use etcd_cluster::EtcdCluster;

/// How often the leader is killed, by default; the finding's campaign
/// killed it every 3 s (`DISTLOCK_CLI_CHURN_KILL_EVERY=3`), which leaves
/// the cluster without a leader so much of the time that, on a busy
/// 2-core machine, a run now and then waits out its whole wait for the
/// cluster alone.
const KILL_EVERY: Duration = Duration::from_secs(5);

fn kill_every() -> Duration {
    std::env::var("DISTLOCK_CLI_CHURN_KILL_EVERY")
        .ok()
        .map(|secs| {
            Duration::from_secs(
                secs.parse()
                    .unwrap_or_else(|_| panic!("DISTLOCK_CLI_CHURN_KILL_EVERY: not whole seconds")),
            )
        })
        .unwrap_or(KILL_EVERY)
}

/// How long each run waits for the lock: some thirty election timeouts
/// (1 s each), for the queue of the other workers and the elections it
/// sits through (a request sent as the leader dies may take etcd's request
/// timeout, some 7 s, to fail), yet less than a session left behind keeps
/// a key that blocks the name (its TTL, 31 s with the default lease, from
/// its last renewal; and every election renews it).
const WAIT: &str = "30s";

fn wait() -> String {
    std::env::var("DISTLOCK_CLI_CHURN_WAIT").unwrap_or_else(|_| WAIT.to_owned())
}

fn setting(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .map(|value| {
            value
                .parse()
                .unwrap_or_else(|_| panic!("{var}: not a number"))
        })
        .unwrap_or(default)
}

/// How long each run holds the lock: the runs queue on one name, so the
/// churn lasts at least this times the number of runs, long enough for
/// several leaders to be killed while runs take and release the lock.
const HOLD: &str = "0.3";

/// One `distlock run NAME --wait WAIT -- sleep HOLD`: `None` when it
/// succeeded, else what went wrong.
fn run_once(url: &str, name: &str) -> Option<String> {
    let wait = wait();
    let output = distlock(&[
        "run",
        "--backend",
        url,
        "--wait",
        &wait,
        name,
        "--",
        "sleep",
        HOLD,
    ])
    .output()
    .expect("start distlock");
    (!output.status.success()).then(|| {
        format!(
            "exit {:?}: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).trim()
        )
    })
}

#[test]
fn short_lived_runs_under_leader_loss_never_leave_the_name_blocked() {
    let workers = setting("DISTLOCK_CLI_CHURN_WORKERS", 4);
    let runs = setting("DISTLOCK_CLI_CHURN_RUNS", 15);
    let cluster = Arc::new(EtcdCluster::start());
    let url = cluster.url();
    let name = unique("churn");

    let done = Arc::new(AtomicBool::new(false));
    let killer = {
        let (cluster, done, every) = (cluster.clone(), done.clone(), kill_every());
        std::thread::spawn(move || {
            let mut kills = 0;
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(every);
                if !done.load(Ordering::SeqCst) {
                    cluster.kill_leader();
                    kills += 1;
                }
            }
            kills
        })
    };
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let (url, name) = (&url, &name);
                scope.spawn(move || {
                    (0..runs)
                        .filter_map(|run| {
                            run_once(url, name)
                                .map(|failure| format!("worker {worker}, run {run}: {failure}"))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|handle| handle.join().expect("worker"))
            .collect()
    });
    done.store(true, Ordering::SeqCst);
    let kills = killer.join().expect("killer");
    assert!(
        kills > 0,
        "the leader was never killed: the churn was too short"
    );
    assert!(
        failures.is_empty(),
        "{} of {} runs failed, with {kills} leaders killed:\n{}",
        failures.len(),
        workers * runs,
        failures.join("\n")
    );

    // Once the cluster is steady, a run leaves no session behind.
    cluster.wait_for_leader();
    let before = cluster.leases();
    for _ in 0..3 {
        assert_eq!(run_once(&url, &name), None);
    }
    let left: Vec<String> = cluster
        .leases()
        .into_iter()
        .filter(|lease| !before.contains(lease))
        .collect();
    assert!(left.is_empty(), "runs left sessions behind: {left:?}");
}

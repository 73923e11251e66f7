//! The etcd backend on a 3-member cluster that keeps losing members:
//! leader loss under churn across processes, a frozen member, and quorum
//! lost and regained. `scripts/test` starts the cluster and sets
//! `DISTLOCK_TEST_ETCD_CLUSTER_URL` and `DISTLOCK_TEST_ETCD_CLUSTER_DIR`.
//!
//! These tests kill and stop members, so they run one at a time among the
//! tests on the cluster (the `etcd-cluster` group in `.config/nextest.toml`).

// Shared with the test or its children; each uses what it needs.
#[allow(dead_code)]
#[path = "support/child.rs"]
mod child;

// Shared with the partition test, which uses the rest of it.
#[allow(dead_code)]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use child::{client, now_ns};
use distlock_core::{Error, LockName};

use support::churn::{Holding, Report, Settings};
use support::fenced::Fenced;
use support::members::{self, Member};

/// Set in a worker process: the path of its settings file.
const WORKER_ENV: &str = "DISTLOCK_ETCD_CHURN_WORKER";

/// The churn worker program (tests/helpers/churn_worker.rs).
const WORKER: &str = env!("CARGO_BIN_EXE_distlock-etcd-test-churn-worker");

/// How long the churn lasts; `DISTLOCK_ETCD_CHURN_SECS` overrides it.
const CHURN: Duration = Duration::from_secs(60);
/// The leader is killed and brought back this often.
const KILL_EVERY: Duration = Duration::from_secs(3);
const PROCESSES: usize = 4;

fn cluster_url() -> String {
    std::env::var("DISTLOCK_TEST_ETCD_CLUSTER_URL").unwrap_or_else(|_| {
        panic!("DISTLOCK_TEST_ETCD_CLUSTER_URL is not set: run the tests with scripts/test")
    })
}

fn unique(prefix: &str) -> LockName {
    LockName::new(format!("{prefix}-{:016x}", rand::random::<u64>())).expect("valid name")
}

/// Starts a churn worker process.
fn spawn_worker(dir: &Path, index: usize, settings: &Settings) -> std::process::Child {
    let path = dir.join(format!("worker-{index}.json"));
    std::fs::write(&path, serde_json::to_vec(settings).expect("settings")).expect("settings");
    Command::new(WORKER)
        .env(WORKER_ENV, &path)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("worker")
}

/// 4 processes × 4 tasks contend through a fenced counter for a minute
/// while the leader is SIGKILLed and restarted every 3 s: no two valid
/// holders at once, no lost update, tokens strictly increase in grant
/// order, and every wait is served (a delete cut off by a kill leaves no
/// key blocking the queue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_leader_loss_under_churn() {
    let churn = std::env::var("DISTLOCK_ETCD_CHURN_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .map_or(CHURN, Duration::from_secs);
    let dir = tempfile_dir("churn");
    let counter = dir.join("counter");
    let start = Instant::now();
    let until_ns = now_ns() + u64::try_from(churn.as_nanos()).expect("fits");
    let name = unique("churn");
    let mut workers = Vec::new();
    for index in 0..PROCESSES {
        let settings = Settings {
            url: cluster_url(),
            name: name.as_str().to_owned(),
            counter: counter.clone(),
            results: dir.join(format!("results-{index}.json")),
            until_ns,
        };
        workers.push((spawn_worker(&dir, index, &settings), settings.results));
    }
    let mut kills = 0;
    while start.elapsed() + KILL_EVERY < churn {
        tokio::time::sleep(KILL_EVERY).await;
        let leader = members::wait_for_leader(None).await;
        leader.kill();
        members::wait_for_leader(Some(leader)).await;
        leader.restart();
        kills += 1;
    }
    let mut holdings = Vec::new();
    let mut failed_waits = 0;
    let mut errors = Vec::new();
    for (mut worker, results) in workers {
        let status = worker.wait().expect("worker");
        assert!(status.success(), "a worker failed: {status}");
        let report: Report =
            serde_json::from_slice(&std::fs::read(&results).expect("results")).expect("report");
        holdings.extend(report.holdings);
        failed_waits += report.failed_waits;
        errors.extend(report.errors);
    }
    holdings.sort_by_key(|holding| holding.granted_ns);

    let overlaps = overlaps(&holdings);
    let regressions = holdings
        .windows(2)
        .filter(|pair| pair[1].token <= pair[0].token)
        .count();
    let accepted_writes = holdings.iter().filter(|h| h.write_accepted).count();
    let stored = Fenced::new(&counter).value();
    let losses = holdings.iter().filter(|h| h.lost).count();
    eprintln!(
        "{} acquisitions, {kills} leader kills, {losses} losses, {failed_waits} failed waits, \
         {accepted_writes} writes accepted, counter {stored}",
        holdings.len()
    );
    for error in errors.iter().take(5) {
        eprintln!("a wait ended with: {error}");
    }
    assert!(kills > 0, "the churn ended before a leader was killed");
    assert!(!holdings.is_empty(), "nobody was granted the lock");
    assert_eq!(overlaps, 0, "valid holders overlapped");
    assert_eq!(regressions, 0, "a token did not increase in grant order");
    assert_eq!(stored, accepted_writes as u64, "an update was lost");
    assert_eq!(failed_waits, 0, "waits went unserved: {errors:?}");
    std::fs::remove_dir_all(dir).ok();
}

/// How many holdings began before an earlier one ended.
fn overlaps(sorted: &[Holding]) -> usize {
    let mut latest_end = 0;
    let mut overlaps = 0;
    for holding in sorted {
        if holding.granted_ns < latest_end {
            overlaps += 1;
        }
        latest_end = latest_end.max(holding.ended_ns);
    }
    overlaps
}

fn tempfile_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "distlock-etcd-{label}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A member is SIGSTOPped while a client that knows only that member holds
/// a lock: its `lost()` fires before a client of the other two is granted
/// the lock, and the member serves again once continued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_frozen_member() {
    let lease = Duration::from_secs(2);
    let frozen = Member::new(3);
    let others = [Member::new(1), Member::new(2)];
    let name = unique("frozen");
    let alone = client(&frozen.url(), lease).await;
    let rest = client(&members::url_of(&others), lease).await;
    let guard = alone
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("acquire");

    frozen.stop();
    let lost_at = {
        let reason = tokio::time::timeout(Duration::from_secs(30), guard.lost()).await;
        let at = Instant::now();
        assert!(
            reason.is_ok(),
            "lost() did not fire while the member was frozen"
        );
        at
    };
    let next = rest.acquire_with(&name, Duration::from_secs(30)).await;
    let granted_at = Instant::now();
    frozen.resume();
    let next = next.expect("the other two members grant the lock");
    assert!(
        lost_at < granted_at,
        "granted before the frozen holder knew it had lost"
    );
    assert!(next.fencing_token() > guard.fencing_token());
    next.release().await.expect("release");
    assert!(!guard.release().await.expect("release"));

    // The member serves again.
    let again = alone
        .acquire_with(&name, Duration::from_secs(30))
        .await
        .expect("after resume");
    again.release().await.expect("release");
}

/// Two of three members are stopped: the holder reports its lock lost,
/// nothing is granted, and both work again once quorum returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_quorum_lost_and_regained() {
    let lease = Duration::from_secs(2);
    let name = unique("quorum");
    let holder = client(&cluster_url(), lease).await;
    let other = client(&cluster_url(), lease).await;
    let guard = holder
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("acquire");
    let stopped = [Member::new(1), Member::new(2)];
    for member in &stopped {
        member.stop();
    }
    let reason = tokio::time::timeout(Duration::from_secs(30), guard.lost()).await;
    // Nothing is granted without a quorum, however long one waits.
    let refused = other.acquire_with(&name, lease * 3).await;
    for member in &stopped {
        member.resume();
    }
    assert!(reason.is_ok(), "lost() did not fire without a quorum");
    assert!(
        matches!(refused, Err(Error::Timeout { .. })),
        "granted without a quorum: {refused:?}"
    );
    let after = other
        .acquire_with(&name, Duration::from_secs(60))
        .await
        .expect("granted once quorum returns");
    assert!(after.fencing_token() > guard.fencing_token());
    after.release().await.expect("release");
}

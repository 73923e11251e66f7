//! A member cut off from its peers while it still serves its clients: the
//! test's own 3-member cluster, with member 3 and a lock holder connected
//! only to it inside a network namespace whose link is then taken down.
//! The holder must report its lock lost before a client of the other two
//! is granted it, and the other two keep serving.

// Shared with the test or its children; each uses what it needs.
#[allow(dead_code)]
#[path = "support/child.rs"]
mod child;

// Shared with the cluster tests, which use the rest of it.
#[allow(dead_code)]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use child::{client, now_ns};
use distlock_core::LockName;

use support::netns::Netns;
use support::own_cluster::OwnCluster;

/// Set in the holder process: `URL NAME REPORT-FILE`.
const HOLDER_ENV: &str = "DISTLOCK_ETCD_PARTITION_HOLDER";

/// The holder program (tests/helpers/partition_holder.rs).
const HOLDER: &str = env!("CARGO_BIN_EXE_distlock-etcd-test-partition-holder");

const LEASE: Duration = Duration::from_secs(2);

/// The value after `word` on a line of the holder's report, once there.
async fn reported(path: &Path, word: &str) -> u64 {
    for _ in 0..1200 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(value) = text
            .lines()
            .find_map(|line| line.strip_prefix(word)?.trim().parse().ok())
        {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the holder never reported `{word}`: {:?}",
        std::fs::read_to_string(path)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_members_holder_loses_before_anyone_else_is_granted() {
    let netns = Netns::create();
    let cluster = OwnCluster::start(&netns);
    cluster.wait_healthy().await;
    let name = LockName::new(format!("partition-{:016x}", rand::random::<u64>())).expect("name");
    let report: PathBuf = std::env::temp_dir().join(format!("{name}.report"));

    let inside_url = format!("etcd://{}", cluster.clients[2]);
    let mut holder = netns_holder(&netns, &inside_url, &name, &report);
    let held_token = reported(&report, "granted").await;

    let outside = client(
        &format!("etcd://{},{}", cluster.clients[0], cluster.clients[1]),
        LEASE,
    )
    .await;
    netns.partition();
    let waiter = {
        let (outside, name) = (outside.clone(), name.clone());
        tokio::spawn(async move {
            let guard = outside.acquire_with(&name, Duration::from_secs(60)).await;
            (guard, now_ns())
        })
    };
    // The other two keep serving other names meanwhile.
    let other = LockName::new(format!("{name}-other")).expect("name");
    let guard = outside
        .acquire_with(&other, Duration::from_secs(30))
        .await
        .expect("the majority serves other names");
    guard.release().await.expect("release");

    let (granted, granted_ns) = waiter.await.expect("task");
    let granted = granted.expect("the majority grants the lock once the holder's session ends");
    let lost_ns = reported(&report, "lost").await;
    let granted_token = granted.fencing_token();
    // Released while the majority is undisturbed: the cut-off member, once
    // back, calls an election with its higher term, and a release in that
    // moment may time out.
    granted.release().await.expect("release");
    netns.heal();
    let _ = holder.wait();

    eprintln!(
        "the cut-off holder reported its loss {} ms before the majority granted the lock",
        granted_ns.saturating_sub(lost_ns) / 1_000_000
    );
    assert!(
        lost_ns < granted_ns,
        "granted {} ms before the cut-off holder reported its loss",
        (lost_ns - granted_ns) / 1_000_000
    );
    assert!(granted_token > held_token);
    let _ = std::fs::remove_file(&report);
    drop(cluster);
}

fn netns_holder(netns: &Netns, url: &str, name: &LockName, report: &Path) -> std::process::Child {
    let mut command: Command = netns.command(HOLDER);
    command
        .env(
            HOLDER_ENV,
            format!("{url} {} {}", name.as_str(), report.display()),
        )
        .stdout(std::process::Stdio::null());
    command.spawn().expect("the holder")
}

//! The `distlock` command on a Redis Cluster (`?mode=cluster`): `check`,
//! `run`, `list` and `release --force` through the cluster that
//! `scripts/test` starts and names in `DISTLOCK_TEST_REDIS_CLUSTER_URL`.

mod common;

use common::{Running, distlock, run_sh, unique, wait_until};
use serde_json::Value;

/// The cluster's URL, with a prefix of this test binary's own; a test
/// without it fails.
fn cluster_url() -> String {
    let url = std::env::var("DISTLOCK_TEST_REDIS_CLUSTER_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| {
            panic!("DISTLOCK_TEST_REDIS_CLUSTER_URL is not set: run the tests with scripts/test")
        });
    format!("{url}&prefix=cli-cluster:")
}

/// `distlock list --json` on the cluster: each lock's name and token.
fn listed(url: &str) -> Vec<(String, u64)> {
    let output = distlock(&["list", "--backend", url, "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let locks: Value = serde_json::from_slice(&output.stdout).unwrap();
    locks
        .as_array()
        .expect("an array")
        .iter()
        .map(|lock| {
            (
                lock["name"].as_str().expect("a name").to_owned(),
                lock["fencing_token"].as_u64().expect("a token"),
            )
        })
        .collect()
}

#[test]
fn check_passes_on_a_cluster() {
    let output = distlock(&["check", "--backend", &cluster_url(), "--json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let findings: Value = serde_json::from_slice(&output.stdout).unwrap();
    let server = findings
        .as_array()
        .expect("an array")
        .iter()
        .find(|finding| finding["check"] == "server")
        .expect("a server finding");
    let detail = server["detail"].as_str().expect("a detail");
    assert!(
        detail.starts_with("Redis") && detail.contains("cluster mode"),
        "{detail}"
    );
}

#[test]
fn run_list_and_release_work_on_a_cluster() {
    let url = cluster_url();
    let mut scratch = common::Scratch::new();
    scratch.url = url.clone();
    let name = unique("cluster-run");
    let ready = scratch.file("ready");
    let script = format!("touch '{}'; exec sleep 1000", ready.display());
    let holder = Running::spawn(run_sh(&scratch, &name, &[], &script));
    wait_until("the holder's command started", || ready.exists());

    let held = listed(&url);
    assert!(
        held.iter().any(|(listed, _)| *listed == name),
        "{name} in {held:?}"
    );
    // Another process does not get it, and says so (exit 75).
    let other = scratch
        .distlock(&["run", &name, "--no-wait", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(75), "{other:?}");

    let forced = scratch
        .distlock(&["release", "--force", &name])
        .output()
        .unwrap();
    assert!(forced.status.success(), "{forced:?}");
    assert!(
        !String::from_utf8(forced.stdout)
            .unwrap()
            .contains("was not held"),
        "the lock was held"
    );
    assert!(!listed(&url).iter().any(|(listed, _)| *listed == name));
    drop(holder);

    // Free again: the next run gets it at once.
    let next = scratch
        .distlock(&["run", &name, "--no-wait", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(next.status.code(), Some(0), "{next:?}");
}

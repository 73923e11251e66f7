//! The `distlock` command on a Redis Cluster (`?mode=cluster`): `check`,
//! `run`, `list` and `release --force` through the cluster that
//! `scripts/test` starts and names in `DISTLOCK_TEST_REDIS_CLUSTER_URL`;
//! and `check` on a cluster of the test's own, one of whose masters may
//! evict locks.

mod common;
mod redis_own_cluster;

use common::{Running, distlock, run_sh, unique, wait_until};
use redis_own_cluster::OwnRedisCluster;
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

/// `distlock check --json` on `url`: its exit code, and its findings.
fn check(url: &str) -> (Option<i32>, Vec<Value>) {
    let output = distlock(&["check", "--backend", url, "--json"])
        .output()
        .unwrap();
    let findings: Value =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {output:?}"));
    let findings = findings.as_array().expect("an array").clone();
    (output.status.code(), findings)
}

/// The finding of `check`: its verdict and detail.
fn finding<'a>(findings: &'a [Value], check: &str) -> (&'a str, &'a str) {
    let found = findings
        .iter()
        .find(|finding| finding["check"] == check)
        .unwrap_or_else(|| panic!("a {check} finding in {findings:?}"));
    (
        found["verdict"].as_str().expect("a verdict"),
        found["detail"].as_str().expect("a detail"),
    )
}

#[test]
fn check_passes_on_a_cluster() {
    let (code, findings) = check(&cluster_url());
    assert_eq!(code, Some(0), "{findings:?}");
    let (_, detail) = finding(&findings, "server");
    assert!(
        detail.starts_with("Redis") && detail.contains("cluster mode"),
        "{detail}"
    );
    // Every master's settings were read, and they agree.
    let (verdict, detail) = finding(&findings, "eviction");
    assert_eq!(verdict, "ok", "{detail}");
    assert!(detail.starts_with("every master ("), "{detail}");
}

#[test]
fn check_names_the_one_master_of_a_cluster_that_may_evict_locks() {
    // The second master evicts any key once it holds 100 MB; the others
    // keep Redis's default, noeviction.
    let cluster = OwnRedisCluster::start(|at| match at {
        1 => vec!["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"],
        _ => vec![],
    });
    let addresses = cluster.addresses();
    let (code, findings) = check(&cluster.url());
    assert_eq!(code, Some(2), "a configuration failure: {findings:?}");
    let (verdict, detail) = finding(&findings, "eviction");
    assert_eq!(verdict, "fail", "{detail}");
    let (faulty, rest) = detail.split_once(" | ").expect("two findings");
    assert!(
        faulty.starts_with(&format!("{}: maxmemory-policy allkeys-lru", addresses[1])),
        "the faulty master first, by its address: {detail}"
    );
    for safe in [&addresses[0], &addresses[2]] {
        assert!(
            !faulty.contains(safe.as_str()),
            "{safe} is not faulty: {detail}"
        );
        assert!(
            rest.contains(safe.as_str()),
            "{safe} was read too: {detail}"
        );
    }
    assert!(rest.contains("noeviction"), "{detail}");
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

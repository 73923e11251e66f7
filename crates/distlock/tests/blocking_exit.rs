//! A process that takes locks through `distlock::blocking` and returns from
//! `main` leaves none of them held: the `blocking_exit` example takes a
//! lock and a set with a lease of a minute, and another client's
//! `try_acquire`, right after the process exits, gets every one.
//!
//! On file locks always, and on each server backend the crate is built with
//! (the workspace's test run builds it with all of them), whose server
//! `scripts/test` starts and names in `DISTLOCK_TEST_<BACKEND>_URL`. A
//! missing server fails the test.

mod support;

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// Names no other test or earlier run uses.
fn unique_names(backend: &str) -> Vec<String> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos();
    let prefix = format!("blocking-exit/{backend}/{}-{nanos}", std::process::id());
    ["alone", "set-a", "set-b"]
        .iter()
        .map(|name| format!("{prefix}/{name}"))
        .collect()
}

/// Runs the example on `url`, taking `names` (the first alone, the rest as
/// a set), and checks that it exited 0 after taking them.
fn run_example(url: &str, names: &[String]) {
    let output = Command::new(support::example("blocking_exit"))
        .arg(url)
        .args(names)
        .output()
        .expect("the example starts");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the example failed ({}):\n{report}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for name in names {
        assert!(
            report.contains(&format!("{name}: fencing token ")),
            "the example took {name}:\n{report}"
        );
    }
}

/// Runs the example on `url`, then takes each of its names from another
/// client at once.
fn check(url: &str, backend: &str) {
    let names = unique_names(backend);
    run_example(url, &names);
    let client = distlock::blocking::connect(url).expect("the second client connects");
    let mut free = Vec::new();
    let mut held = Vec::new();
    for name in &names {
        match client
            .try_acquire(name.as_str())
            .expect("try_acquire answers")
        {
            Some(guard) => free.push(guard),
            None => held.push(name.as_str()),
        }
    }
    let dropped_guard = held.iter().any(|name| name.ends_with("/alone"));
    let dropped_set = held.iter().any(|name| name.contains("/set-"));
    for guard in free {
        assert!(guard.release().expect("the release answers"));
    }
    assert!(
        held.is_empty(),
        "on {backend}, still held after the process that took them returned from main \
         (by a dropped guard: {dropped_guard}, by a dropped set: {dropped_set}): {held:?}"
    );
}

/// The URL of the test server of `backend`, from `variable`: a missing
/// server fails the test, so that a run without it does not pass as if it
/// had one.
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "memcached",
    feature = "etcd",
    feature = "mongodb"
))]
fn server_url(variable: &str, backend: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable} is not set: run the tests with scripts/test, which starts {backend}")
    })
}

#[test]
fn on_file_locks_nothing_stays_held_after_main_returns() {
    let dir = tempfile::tempdir().unwrap();
    check(&format!("file://{}", dir.path().display()), "file");
}

#[cfg(feature = "redis")]
#[test]
fn on_redis_nothing_stays_held_after_main_returns() {
    check(&server_url("DISTLOCK_TEST_REDIS_URL", "redis"), "redis");
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres_nothing_stays_held_after_main_returns() {
    check(
        &server_url("DISTLOCK_TEST_POSTGRES_URL", "postgres"),
        "postgres",
    );
}

#[cfg(feature = "memcached")]
#[test]
fn on_memcached_nothing_stays_held_after_main_returns() {
    check(
        &server_url("DISTLOCK_TEST_MEMCACHED_URL", "memcached"),
        "memcached",
    );
}

#[cfg(feature = "etcd")]
#[test]
fn on_etcd_nothing_stays_held_after_main_returns() {
    check(&server_url("DISTLOCK_TEST_ETCD_URL", "etcd"), "etcd");
}

#[cfg(feature = "mongodb")]
#[test]
fn on_mongodb_nothing_stays_held_after_main_returns() {
    check(
        &server_url("DISTLOCK_TEST_MONGODB_URL", "mongodb"),
        "mongodb",
    );
}

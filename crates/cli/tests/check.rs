//! `distlock check` against every backend's test server, against servers
//! that cannot be reached, and with wrong credentials. `scripts/test`
//! starts the servers and sets their `DISTLOCK_TEST_*_URL`s.

mod common;

use common::{Scratch, distlock, one_line_failure};
use serde_json::Value;

/// The URL in `var`, which scripts/test sets; a test without it fails.
fn server_url(var: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| panic!("{var} is not set: run the tests with scripts/test"))
}

/// `distlock check --json` on `url`: its exit code and its findings by
/// check name, as (verdict, detail).
fn check(url: &str) -> (Option<i32>, Vec<(String, String, String)>) {
    let output = distlock(&["check", "--backend", url, "--json"])
        .output()
        .unwrap();
    let findings: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&output.stdout)));
    let findings = findings
        .as_array()
        .expect("an array")
        .iter()
        .map(|finding| {
            let field = |name: &str| finding[name].as_str().expect(name).to_owned();
            (field("check"), field("verdict"), field("detail"))
        })
        .collect();
    (output.status.code(), findings)
}

/// Every check ran, and none failed; `clock` says whether the server has a
/// clock to compare.
fn assert_passes(url: &str, clock: bool) {
    let (code, findings) = check(url);
    assert_eq!(code, Some(0), "{url}: {findings:?}");
    let names: Vec<&str> = findings.iter().map(|(name, ..)| name.as_str()).collect();
    let mut expected = vec!["reach", "server"];
    if clock {
        expected.push("clock");
    }
    expected.extend([
        "write",
        "fencing",
        "list",
        "wake-ups",
        "round trip",
        "lease",
    ]);
    assert_eq!(names, expected, "{url}");
    for (name, verdict, detail) in &findings {
        assert!(
            verdict == "ok" || verdict == "warn",
            "{url}: {name} {verdict}: {detail}"
        );
    }
}

#[test]
fn the_embedded_default_passes_every_check() {
    let scratch = Scratch::new();
    assert_passes(&scratch.url, false);
    let output = scratch.distlock(&["check"]).output().unwrap();
    assert!(output.status.success());
    let lines = String::from_utf8(output.stdout).unwrap();
    assert!(lines.starts_with("distlock check: file://"), "{lines}");
    assert!(lines.contains("ok    round trip"), "{lines}");
}

#[test]
fn every_server_backend_passes_every_check() {
    let mongodb = format!(
        "{}distlock_check?collection=check_{}",
        server_url("DISTLOCK_TEST_MONGODB_URL"),
        std::process::id()
    );
    for (url, product, clock) in [
        (mongodb, "MongoDB", true),
        (server_url("DISTLOCK_TEST_POSTGRES_URL"), "PostgreSQL", true),
        (server_url("DISTLOCK_TEST_ETCD_URL"), "etcd", false),
        (server_url("DISTLOCK_TEST_MEMCACHED_URL"), "memcached", true),
        (server_url("DISTLOCK_TEST_REDIS_URL"), "Redis", true),
    ] {
        assert_passes(&url, clock);
        let (_, findings) = check(&url);
        let (_, _, version) = findings.iter().find(|(name, ..)| name == "server").unwrap();
        assert!(version.starts_with(product), "{url}: {version}");
    }
}

#[test]
fn a_server_out_of_reach_fails_the_reach_check_with_69() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for url in [
        format!("memcache://127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let (code, findings) = check(&url);
        assert_eq!(code, Some(69), "{url}: {findings:?}");
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(
            (findings[0].0.as_str(), findings[0].1.as_str()),
            ("reach", "fail")
        );
        assert!(
            findings[0].2.contains("cannot open the backend"),
            "{findings:?}"
        );
    }
}

#[test]
fn wrong_credentials_fail_with_2_and_say_no_password() {
    let url = server_url("DISTLOCK_TEST_POSTGRES_URL");
    let (scheme, rest) = url.split_once("://").unwrap();
    let (_, host) = rest.split_once('@').unwrap();
    let wrong = format!("{scheme}://distlock:hunter2-wrong@{host}");
    let output = distlock(&["check", "--backend", &wrong]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("FAIL  reach"), "{stdout}");
    assert!(!stdout.contains("hunter2"), "{stdout}");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("hunter2"));
}

#[test]
fn a_bad_url_is_bad_input() {
    let output = distlock(&["check", "--backend", "gopher://h/x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("unknown scheme"), "{stdout}");
    one_line_failure(
        &distlock(&["check", "--lease", "soon"]).output().unwrap(),
        2,
    );
}

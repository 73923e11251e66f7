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

/// Every check ran, the backend's `features` after the clock, and none
/// failed; `clock` says whether the server has a clock to compare.
fn assert_passes(url: &str, clock: bool, features: &[&str]) {
    let (code, findings) = check(url);
    assert_eq!(code, Some(0), "{url}: {findings:?}");
    let names: Vec<&str> = findings.iter().map(|(name, ..)| name.as_str()).collect();
    let mut expected = vec!["reach", "server"];
    if clock {
        expected.push("clock");
    }
    expected.extend(features);
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

/// The verdict and detail of the check called `name`.
fn finding<'a>(findings: &'a [(String, String, String)], name: &str) -> (&'a str, &'a str) {
    findings
        .iter()
        .find(|(check, ..)| check == name)
        .map(|(_, verdict, detail)| (verdict.as_str(), detail.as_str()))
        .unwrap_or_else(|| panic!("no {name} check in {findings:?}"))
}

#[test]
fn the_embedded_default_passes_every_check() {
    let scratch = Scratch::new();
    assert_passes(&scratch.url, false, &["directory"]);
    let output = scratch.distlock(&["check"]).output().unwrap();
    assert!(output.status.success());
    let lines = String::from_utf8(output.stdout).unwrap();
    assert!(lines.starts_with("distlock check: file://"), "{lines}");
    assert!(lines.contains("ok    round trip"), "{lines}");
    assert!(lines.contains("ok    directory "), "{lines}");
}

#[test]
fn a_directory_others_can_write_is_a_caveat() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    std::fs::set_permissions(scratch.lock_dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, findings) = check(&scratch.url);
    assert_eq!(code, Some(0), "{findings:?}");
    let (verdict, detail) = finding(&findings, "directory");
    assert_eq!(verdict, "warn");
    assert!(
        detail.contains("can be written by others (mode 777)"),
        "{detail}"
    );
}

#[test]
fn every_server_backend_passes_every_check() {
    let mongodb = format!(
        "{}distlock_check?collection=check_{}",
        server_url("DISTLOCK_TEST_MONGODB_URL"),
        std::process::id()
    );
    let postgres = server_url("DISTLOCK_TEST_POSTGRES_URL");
    let advisory = format!("{postgres}?mode=advisory");
    for (url, product, clock, features) in [
        (
            mongodb,
            "MongoDB",
            true,
            &["majority", "change streams", "TTL index"][..],
        ),
        (postgres, "PostgreSQL", true, &["notify"]),
        (advisory, "PostgreSQL", true, &["notify", "pooler"]),
        (
            server_url("DISTLOCK_TEST_ETCD_URL"),
            "etcd",
            false,
            &["watch"],
        ),
        (
            server_url("DISTLOCK_TEST_MEMCACHED_URL"),
            "memcached",
            true,
            &["meta protocol", "eviction"],
        ),
        (
            server_url("DISTLOCK_TEST_REDIS_URL"),
            "Redis",
            true,
            &["eviction", "persistence"],
        ),
    ] {
        assert_passes(&url, clock, features);
        let (_, findings) = check(&url);
        let (_, version) = finding(&findings, "server");
        assert!(version.starts_with(product), "{url}: {version}");
    }
}

#[test]
fn the_test_servers_features_are_found_as_they_are() {
    // MongoDB's test server is a one-member replica set, and the backend
    // makes the TTL index when it opens.
    let mongodb = format!(
        "{}distlock_check?collection=features_{}",
        server_url("DISTLOCK_TEST_MONGODB_URL"),
        std::process::id()
    );
    let (_, findings) = check(&mongodb);
    for name in ["majority", "change streams", "TTL index"] {
        assert_eq!(finding(&findings, name).0, "ok", "{name}: {findings:?}");
    }
    // The plain Redis test server keeps nothing across a restart.
    let (_, findings) = check(&server_url("DISTLOCK_TEST_REDIS_URL"));
    assert_eq!(finding(&findings, "eviction").0, "ok", "{findings:?}");
    let (verdict, detail) = finding(&findings, "persistence");
    assert_eq!(verdict, "warn");
    assert!(detail.starts_with("no AOF"), "{detail}");
    // memcached evicts unless started with -M, and the test server is not.
    let (_, findings) = check(&server_url("DISTLOCK_TEST_MEMCACHED_URL"));
    assert_eq!(finding(&findings, "eviction").0, "warn", "{findings:?}");
}

#[test]
fn notifications_lost_in_a_transaction_pooler_are_found() {
    let (code, findings) = check(&server_url("DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL"));
    assert_eq!(code, Some(0), "{findings:?}");
    let (verdict, detail) = finding(&findings, "notify");
    assert_eq!(verdict, "warn");
    assert!(detail.contains("transaction pooler"), "{detail}");
    assert_eq!(finding(&findings, "wake-ups").0, "warn", "{findings:?}");
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

/// A Redis server of the test's own, configured as the test needs, and
/// stopped when dropped.
struct OwnRedis {
    server: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl OwnRedis {
    /// Starts `REDIS_BIN` (which scripts/test sets) with `args` added to a
    /// plain configuration, and waits until it answers.
    fn start(args: &[&str]) -> Self {
        let bin = server_url("REDIS_BIN");
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = std::process::Command::new(bin)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(args)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let own = Self {
            server,
            port,
            _dir: dir,
        };
        common::wait_until("the test's own Redis answers", || own.answers());
        own
    }

    fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let mut reply = [0; 5];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG"
    }

    /// Its URL, with `user_info` (`user:password@`) if not empty.
    fn url(&self, user_info: &str) -> String {
        format!("redis://{user_info}127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

#[test]
fn a_redis_that_may_evict_locks_fails_the_check_with_2() {
    let redis = OwnRedis::start(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]);
    let (code, findings) = check(&redis.url(""));
    assert_eq!(code, Some(2), "{findings:?}");
    let (verdict, detail) = finding(&findings, "eviction");
    assert_eq!(verdict, "fail");
    assert!(detail.contains("allkeys-lru"), "{detail}");
    assert!(detail.contains("noeviction"), "{detail}");
}

/// Checks `url`, whose user may not write: the check exits 2 with the
/// write as its one failure, naming `cause`, and never prints `secret`.
fn fails_to_write_only(url: &str, cause: &str, secret: &str) {
    let output = distlock(&["check", "--backend", url]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    let failed: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("FAIL"))
        .collect();
    assert_eq!(failed.len(), 1, "{stdout}");
    assert!(failed[0].starts_with("FAIL  write"), "{stdout}");
    assert!(failed[0].contains(cause), "{stdout}");
    assert!(!stdout.contains(secret), "{stdout}");
    assert!(!String::from_utf8_lossy(&output.stderr).contains(secret));
}

#[test]
fn a_redis_user_who_may_not_write_fails_naming_the_cause() {
    let redis = OwnRedis::start(&[
        "--user",
        "reader",
        "on",
        ">reader-secret-4e1f",
        "~*",
        "&*",
        "+@read",
        "+@connection",
        "+@pubsub",
        "+info",
        "+time",
        "+config|get",
    ]);
    fails_to_write_only(
        &redis.url("reader:reader-secret-4e1f@"),
        "NOPERM",
        "reader-secret",
    );

    let wrong = redis.url("reader:hunter2-wrong@");
    let output = distlock(&["check", "--backend", &wrong]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("FAIL  reach"), "{stdout}");
    assert!(!stdout.contains("hunter2"), "{stdout}");
}

#[test]
fn a_postgres_user_who_may_not_write_fails_naming_the_cause() {
    // The owner's check makes the table, which the reader may read: what
    // it lacks is the right to write.
    let (code, findings) = check(&server_url("DISTLOCK_TEST_POSTGRES_URL"));
    assert_eq!(code, Some(0), "{findings:?}");
    let reader = server_url("DISTLOCK_TEST_POSTGRES_READER_URL");
    let password = reader
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(user_info, _)| user_info.split_once(':'))
        .map(|(_, password)| password.to_owned())
        .unwrap();
    fails_to_write_only(&reader, "permission denied", &password);
}

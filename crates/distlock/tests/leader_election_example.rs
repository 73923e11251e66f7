//! The leader-election example, run as a user runs it: three instances,
//! the leader SIGKILLed, another taking over with a greater term. On file
//! locks always, and on Redis when the crate is built with it (as the
//! workspace's test run builds it), whose server `scripts/test` starts and
//! names in `DISTLOCK_TEST_REDIS_URL`.

mod support;

use std::process::Command;

/// Runs the example, on `url` or its default, and returns its report
/// after checking that it exited 0.
fn run_example(url: Option<&str>) -> String {
    let mut command = Command::new(support::example("leader_election"));
    command.env_remove("DISTLOCK_URL");
    if let Some(url) = url {
        command.arg(url);
    }
    let output = command.output().expect("the example starts");
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the example failed ({}):\n{report}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    report
}

/// The terms and instances of the report's takeover line:
/// `takeover: term A -> term B, instance X -> instance Y, …`.
fn takeover(report: &str) -> (u64, u64, u64, u64) {
    let line = report
        .lines()
        .find_map(|line| line.strip_prefix("takeover: "))
        .unwrap_or_else(|| panic!("the report names no takeover:\n{report}"));
    let numbers: Vec<u64> = line
        .split([' ', ','])
        .filter_map(|word| word.parse().ok())
        .take(4)
        .collect();
    let [old_term, new_term, old_leader, new_leader] = numbers[..] else {
        panic!("the takeover line has no two terms and two instances: {line}");
    };
    (old_term, new_term, old_leader, new_leader)
}

/// Checks that the report names a takeover by another instance, with a
/// greater term, and the killed leader's late tick turned away.
fn check(report: &str) {
    let (old_term, new_term, old_leader, new_leader) = takeover(report);
    assert!(
        new_term > old_term,
        "the new term is greater than the killed leader's:\n{report}"
    );
    assert_ne!(
        new_leader, old_leader,
        "another instance took over:\n{report}"
    );
    assert!(
        report.contains(&format!("killed instance {old_leader} ")),
        "the instance that led was the one killed:\n{report}"
    );
    assert!(
        report.contains("3 of 3 healthy (GET /healthz"),
        "every instance answered its health check with 200 while one led:\n{report}"
    );
    assert!(
        report.contains(&format!("late tick of term {old_term}: turned away")),
        "the killed leader's term is fenced off:\n{report}"
    );
}

#[test]
fn on_file_locks_another_instance_takes_over_from_a_killed_leader() {
    check(&run_example(None));
}

#[cfg(feature = "redis")]
#[test]
fn on_redis_another_instance_takes_over_from_a_killed_leader() {
    // A missing server fails the test: a run without it must not pass as
    // if it had one.
    let url = std::env::var("DISTLOCK_TEST_REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "DISTLOCK_TEST_REDIS_URL is not set: run the tests with scripts/test, which starts \
             redis"
        )
    });
    check(&run_example(Some(&url)));
}

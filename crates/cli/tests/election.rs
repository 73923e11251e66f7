//! `distlock leader` and `distlock campaign`, on a file backend in a
//! temporary directory.

mod common;

use common::{Running, Scratch, unique, wait_until};
use rustix::process::Signal;
use serde_json::Value;

/// `distlock campaign NAME --value VALUE [OPTIONS] -- sh -c SCRIPT`.
fn campaign(
    scratch: &Scratch,
    name: &str,
    value: &str,
    options: &[&str],
    script: &str,
) -> std::process::Command {
    let mut command = scratch.distlock(&["campaign", name, "--value", value]);
    command.args(options).args(["--", "sh", "-c", script]);
    command
}

#[test]
fn leader_says_who_leads_and_with_which_term() {
    let scratch = Scratch::new();
    let name = unique("election");
    let output = scratch.distlock(&["leader", &name]).output().unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("nobody leads {name}")
    );
    let output = scratch
        .distlock(&["leader", &name, "--json"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "null");

    let term_file = scratch.file("term");
    let script = format!(
        "echo \"$DISTLOCK_FENCING_TOKEN\" > '{}'; while :; do sleep 0.05; done",
        term_file.display()
    );
    let leading = Running::spawn(campaign(&scratch, &name, "http://a:8080", &[], &script));
    wait_until("the leader's command started", || {
        std::fs::read_to_string(&term_file).is_ok_and(|term| term.ends_with('\n'))
    });
    let term: u64 = std::fs::read_to_string(&term_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let output = scratch
        .distlock(&["leader", &name, "--json"])
        .output()
        .unwrap();
    let leader: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(leader["value"], "http://a:8080");
    assert_eq!(leader["term"].as_u64(), Some(term));
    assert_eq!(leader["pid"].as_u64(), Some(u64::from(leading.pid())));

    leading.signal(Signal::TERM);
    leading.finish();
    let output = scratch.distlock(&["leader", &name]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("nobody leads {name}")
    );
}

#[test]
fn watching_sees_each_leader_in_term_order() {
    let scratch = Scratch::new();
    let name = unique("watched");
    let watcher = Running::spawn(scratch.distlock(&["leader", &name, "--watch", "--json"]));
    // The first leader leads long enough for the watcher to start; the
    // next two lead only for a moment, and are seen all the same.
    for (value, command) in [
        ("http://a:8080", "sleep 1"),
        ("http://b:8080", "true"),
        ("http://c:8080", "true"),
    ] {
        let output = campaign(&scratch, &name, value, &[], command)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
    }
    // The last term is read from the record at the next look.
    std::thread::sleep(std::time::Duration::from_millis(500));
    watcher.signal(Signal::INT);
    let seen = watcher.finish();
    let leaders: Vec<Value> = seen
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let values: Vec<&str> = leaders
        .iter()
        .map(|leader| leader["value"].as_str().unwrap())
        .collect();
    assert_eq!(
        values,
        ["http://a:8080", "http://b:8080", "http://c:8080"],
        "{}",
        seen.stdout
    );
    assert!(leaders[0]["term"].as_u64() < leaders[1]["term"].as_u64());
    assert!(leaders[1]["term"].as_u64() < leaders[2]["term"].as_u64());
}

#[test]
fn campaigning_again_runs_the_command_anew_after_a_loss() {
    let scratch = Scratch::new();
    let name = unique("again");
    let runs = scratch.file("runs");
    let script = format!(
        "echo run >> '{}'; while :; do sleep 0.05; done",
        runs.display()
    );
    let leading = Running::spawn(campaign(
        &scratch,
        &name,
        "http://a:8080",
        &["--again", "--lease", "3s"],
        &script,
    ));
    let count = || std::fs::read_to_string(&runs).map_or(0, |runs| runs.lines().count());
    wait_until("the first term's command started", || count() == 1);
    let output = scratch
        .distlock(&["release", "--force", &name])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    wait_until("the command ran again after re-election", || count() == 2);
    leading.signal(Signal::TERM);
    let finished = leading.finish();
    assert!(
        finished.stderr.contains("lost the lock"),
        "{}",
        finished.stderr
    );
}

#[test]
fn a_bad_value_is_bad_input() {
    let scratch = Scratch::new();
    let output = campaign(&scratch, &unique("bad"), "two\nlines", &[], "true")
        .output()
        .unwrap();
    let line = common::one_line_failure(&output, 2);
    assert!(line.contains("control character"), "{line}");
}

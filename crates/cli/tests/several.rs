//! `distlock run A B C -- CMD`: several locks held together, on a file
//! backend in a temporary directory.

mod common;

use common::{Running, Scratch, lock_is_free, one_line_failure, unique, wait_until};
use rustix::process::Signal;

/// `distlock run NAMES… -- sh -c SCRIPT`.
fn run_several(scratch: &Scratch, names: &[&str], script: &str) -> std::process::Command {
    let mut command = scratch.distlock(&["run"]);
    command.args(names).args(["--", "sh", "-c", script]);
    command
}

#[test]
fn every_name_before_the_dashes_is_held_while_the_command_runs() {
    let scratch = Scratch::new();
    let (first, second) = (unique("first"), unique("second"));
    let ready = scratch.file("ready");
    let seen = scratch.file("seen");
    let script = format!(
        "printf '%s|%s' \"$DISTLOCK_FENCING_TOKENS\" \"${{DISTLOCK_NAME-unset}}\" > '{}'; touch '{}'; while :; do sleep 0.05; done",
        seen.display(),
        ready.display()
    );
    let holder = Running::spawn(run_several(&scratch, &[&second, &first], &script));
    wait_until("the command started", || ready.exists());
    assert!(!lock_is_free(&scratch, &first));
    assert!(!lock_is_free(&scratch, &second));

    let seen = std::fs::read_to_string(&seen).unwrap();
    let (tokens, name) = seen.split_once('|').unwrap();
    assert_eq!(name, "unset", "DISTLOCK_NAME is for one lock");
    // In the canonical order, whatever the order given.
    let pairs: Vec<(&str, u64)> = tokens
        .split(',')
        .map(|pair| {
            let (name, token) = pair.split_once('=').unwrap();
            (name, token.parse().unwrap())
        })
        .collect();
    let names: Vec<&str> = pairs.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, [first.as_str(), second.as_str()]);
    assert!(pairs.iter().all(|(_, token)| *token > 0));

    holder.signal(Signal::TERM);
    let finished = holder.finish();
    assert_eq!(
        finished.status.code(),
        Some(128 + 15),
        "{}",
        finished.stderr
    );
    assert!(lock_is_free(&scratch, &first));
    assert!(lock_is_free(&scratch, &second));
}

#[test]
fn one_name_held_elsewhere_runs_nothing_and_holds_nothing() {
    let scratch = Scratch::new();
    let (free, busy) = (unique("free"), unique("busy"));
    let ready = scratch.file("ready");
    let holder = Running::spawn(common::run_sh(
        &scratch,
        &busy,
        &[],
        &format!("touch '{}'; exec sleep 1000", ready.display()),
    ));
    wait_until("the holder's command started", || ready.exists());

    let ran = scratch.file("ran");
    let mut command = scratch.distlock(&["run", "--wait", "200ms", &free, &busy]);
    let output = command
        .args(["--", "sh", "-c", &format!("touch '{}'", ran.display())])
        .output()
        .unwrap();
    let line = one_line_failure(&output, 75);
    assert!(
        line.contains(&format!("lock {busy} (of ")) && line.contains("none is held now"),
        "{line}"
    );
    assert!(!ran.exists(), "the command must not run without every lock");
    assert!(
        lock_is_free(&scratch, &free),
        "the lock taken first was given back"
    );
    drop(holder);
}

#[test]
fn an_option_among_several_names_is_bad_input() {
    let scratch = Scratch::new();
    let output = scratch
        .distlock(&["run", "a", "b", "--wait", "5", "--", "true"])
        .output()
        .unwrap();
    let line = one_line_failure(&output, 2);
    assert!(line.contains("put the options before them"), "{line}");
}

#[test]
fn dashes_with_no_command_are_bad_input() {
    let scratch = Scratch::new();
    let output = scratch.distlock(&["run", "a", "b", "--"]).output().unwrap();
    let line = one_line_failure(&output, 2);
    assert!(line.contains("no command after `--`"), "{line}");
}

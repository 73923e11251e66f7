//! `distlock run --max-hold`: a command that runs too long loses its lock
//! and is stopped, on a file backend in a temporary directory.

mod common;

use common::{Scratch, lock_is_free, one_line_failure, run_sh, unique};

#[test]
fn a_command_past_its_longest_hold_is_stopped_and_exits_76() {
    let scratch = Scratch::new();
    let name = unique("max-hold");
    let stopped = scratch.file("stopped");
    let script = format!(
        "trap \"echo term > '{}'; exit 0\" TERM; while :; do sleep 0.05; done",
        stopped.display()
    );
    let output = run_sh(&scratch, &name, &["--max-hold", "300ms"], &script)
        .output()
        .unwrap();
    // The shell may say "Terminated" of its sleep too: distlock's line is
    // the last.
    assert_eq!(output.status.code(), Some(76));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr.lines().last().unwrap_or_default();
    assert!(line.starts_with("distlock: lost the lock"), "{stderr}");
    assert!(line.contains("longest hold"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&stopped).unwrap().trim(), "term");
    assert!(lock_is_free(&scratch, &name));
}

#[test]
fn a_command_within_its_longest_hold_is_untouched() {
    let scratch = Scratch::new();
    let name = unique("within");
    let output = run_sh(&scratch, &name, &["--max-hold", "1m"], "exit 3")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
}

#[test]
fn a_zero_longest_hold_is_bad_input() {
    let scratch = Scratch::new();
    let output = run_sh(&scratch, &unique("zero"), &["--max-hold", "0s"], "true")
        .output()
        .unwrap();
    let line = one_line_failure(&output, 2);
    assert!(line.contains("max_hold"), "{line}");
}

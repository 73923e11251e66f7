//! `distlock run --max-hold` and `--min-hold`: a command that runs too long
//! loses its lock and is stopped; one that ends too soon leaves its lock
//! held until its shortest hold has passed, after its process is gone; on a
//! file backend in a temporary directory.

mod common;

use std::time::{Duration, Instant};

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

#[test]
fn a_command_that_ends_before_its_min_hold_leaves_the_lock_held_past_its_process() {
    let scratch = Scratch::new();
    let name = unique("min-hold");
    let output = run_sh(&scratch, &name, &["--min-hold", "10m"], "exit 0")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // The holder's process is gone, and the lock is still held.
    assert!(!lock_is_free(&scratch, &name));
    let listed = scratch.distlock(&["list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains(&name), "{listed}");
}

#[test]
fn a_waiter_gets_the_lock_once_the_min_hold_has_passed() {
    let scratch = Scratch::new();
    let name = unique("min-hold-wait");
    let min_hold = Duration::from_millis(500);
    let asked_at = Instant::now();
    let first = run_sh(&scratch, &name, &["--min-hold", "500ms"], "true")
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let ran = scratch.file("ran");
    let second = run_sh(
        &scratch,
        &name,
        &["--wait", "60s"],
        &format!("touch '{}'", ran.display()),
    )
    .output()
    .unwrap();
    assert_eq!(second.status.code(), Some(0), "{second:?}");
    assert!(ran.exists());
    assert!(
        asked_at.elapsed() >= min_hold,
        "the second run held the lock {:?} after the first asked for it",
        asked_at.elapsed()
    );
}

/// The cron recipe of the README: every instance fires the job at once,
/// with `--no-wait --min-hold`, and only the first runs it; the others
/// skip it (exit 75, or 0 with `-E 0`), even after the first has ended.
#[test]
fn the_cron_recipe_runs_the_job_once() {
    let scratch = Scratch::new();
    let name = unique("cron");
    let runs = scratch.file("runs");
    let job = format!("echo ran >> '{}'", runs.display());
    let fire = |extra: &[&str]| {
        let mut options = vec!["--no-wait", "--min-hold", "10m"];
        options.extend_from_slice(extra);
        run_sh(&scratch, &name, &options, &job).output().unwrap()
    };
    assert_eq!(fire(&[]).status.code(), Some(0));
    assert_eq!(fire(&[]).status.code(), Some(75));
    assert_eq!(fire(&["-E", "0"]).status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "ran\n");
}

#[test]
fn a_min_hold_above_the_max_hold_is_bad_input() {
    let scratch = Scratch::new();
    let output = run_sh(
        &scratch,
        &unique("min-above-max"),
        &["--min-hold", "2m", "--max-hold", "1m"],
        "true",
    )
    .output()
    .unwrap();
    let line = one_line_failure(&output, 2);
    assert!(
        line.contains("--min-hold 2m is longer than --max-hold 1m"),
        "{line}"
    );
}

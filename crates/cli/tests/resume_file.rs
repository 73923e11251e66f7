//! `distlock run --resume-file`: what it refuses, and the file's life
//! around CMD. A killed run taken up again by its restart is a conformance
//! case on every server backend (crates/conformance/src/resume.rs); here
//! the memory backend stands in, whose locks no other process can see, so
//! every handle a run finds is of a grant that is gone.

mod common;

use common::{Scratch, distlock, one_line_failure, unique};

/// `distlock run --backend memory:// --resume-file FILE NAME -- sh -c SCRIPT`.
fn run_on_memory(file: &std::path::Path, name: &str, script: &str) -> std::process::Output {
    distlock(&["run", "--backend", "memory://", "--resume-file"])
        .arg(file)
        .args([name, "--", "sh", "-c", script])
        .output()
        .unwrap()
}

#[test]
fn the_handle_is_kept_while_cmd_runs_readable_by_its_owner_alone_and_removed_after() {
    let scratch = Scratch::new();
    let file = scratch.file("job.handle");
    let name = unique("kept");
    let script = format!(
        "stat -c %a {0} && cat {0} && echo \"token $DISTLOCK_FENCING_TOKEN\"",
        file.display()
    );
    let output = run_on_memory(&file, &name, &script);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "600", "{stdout}");
    let handle: distlock::ResumeHandle = lines[1].parse().expect("a handle");
    assert_eq!(handle.name().as_str(), name);
    assert_eq!(lines[2], format!("token {}", handle.fencing_token()));
    assert!(!file.exists(), "removed once the lock was released");
}

#[test]
fn a_handle_whose_grant_is_gone_is_said_and_the_lock_waited_for_as_usual() {
    let scratch = Scratch::new();
    let file = scratch.file("job.handle");
    let name = unique("gone");
    // A handle of the same lock from an earlier run: its memory is gone.
    let kept = run_on_memory(
        &file,
        &name,
        &format!("cp {} {}.old", file.display(), file.display()),
    );
    assert!(kept.status.success(), "{kept:?}");
    std::fs::rename(format!("{}.old", file.display()), &file).unwrap();
    let output = run_on_memory(&file, &name, "echo ran");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("is no longer held; waiting for lock"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout), "ran\n");
    assert!(!file.exists());
    // Quiet runs say nothing of it.
    let _ = run_on_memory(
        &file,
        &name,
        &format!("cp {} {}.old", file.display(), file.display()),
    );
    std::fs::rename(format!("{}.old", file.display()), &file).unwrap();
    let quiet = distlock(&["run", "-q", "--backend", "memory://", "--resume-file"])
        .arg(&file)
        .args([name.as_str(), "--", "true"])
        .output()
        .unwrap();
    assert!(quiet.status.success());
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "");
}

#[test]
fn a_file_of_another_lock_or_of_no_handle_is_refused_saying_what_to_do() {
    let scratch = Scratch::new();
    let file = scratch.file("job.handle");
    std::fs::write(&file, "not a handle\n").unwrap();
    let output = run_on_memory(&file, &unique("junk"), "echo ran");
    let line = one_line_failure(&output, 2);
    assert!(line.contains("holds no lock handle"), "{line}");
    assert!(line.contains("remove it"), "{line}");
    assert!(file.exists(), "a file it cannot read is left as it was");

    let other = unique("other");
    let handle = format!(
        "distlock-resume/1 memory exclusive {:032x} 7 {other}",
        0xabcd_u128
    );
    std::fs::write(&file, handle).unwrap();
    let output = run_on_memory(&file, &unique("mine"), "echo ran");
    let line = one_line_failure(&output, 2);
    assert!(line.contains("give each lock a file of its own"), "{line}");
    assert!(output.stdout.is_empty(), "CMD did not run");
}

#[test]
fn it_is_refused_at_the_start_where_it_cannot_work() {
    let scratch = Scratch::new();
    let file = scratch.file("job.handle");
    let file_arg = file.to_str().unwrap();
    // The file backend's locks end with their process.
    let output = scratch
        .distlock(&["run", "--resume-file", file_arg, &unique("f"), "--", "true"])
        .output()
        .unwrap();
    let line = one_line_failure(&output, 2);
    assert!(line.contains("file cannot resume a lock"), "{line}");
    // One lock only.
    let output = distlock(&[
        "run",
        "--backend",
        "memory://",
        "--resume-file",
        file_arg,
        "a",
        "b",
        "--",
        "true",
    ])
    .output()
    .unwrap();
    let line = one_line_failure(&output, 2);
    assert!(line.contains("one lock"), "{line}");
    // Not beside the bounds on a hold.
    let output = distlock(&[
        "run",
        "--backend",
        "memory://",
        "--resume-file",
        file_arg,
        "--max-hold",
        "1m",
        "a",
        "--",
        "true",
    ])
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--max-hold"));
    assert!(!file.exists());
}

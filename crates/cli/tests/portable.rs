//! `distlock run` as on macOS and the BSDs, forced on Linux with
//! `DISTLOCK_PORTABLE=1`: no parent-death signal, no child subreaper, no
//! `/proc`. distlock then knows CMD alone. Each test checks a documented
//! difference from Linux, which would fail had the Linux path been taken,
//! or that what does not differ still holds.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Running, Scratch, lock_is_free, process_ended, run_sh, unique, wait_until};
use rustix::process::{Pid, Signal, kill_process};

/// `distlock run NAME [OPTIONS] -- sh -c SCRIPT` with the portable
/// fallbacks forced.
fn portable_run(scratch: &Scratch, name: &str, options: &[&str], script: &str) -> Command {
    let mut command = run_sh(scratch, name, options, script);
    command.env("DISTLOCK_PORTABLE", "1");
    command
}

/// Holds `name` with a portable `distlock run` whose command runs `body`
/// once it has written its pid to `pid_file`; returns once it has.
fn hold(scratch: &Scratch, name: &str, options: &[&str], pid_file: &str, body: &str) -> Running {
    let pid_file = scratch.file(pid_file);
    let script = format!(
        "echo $$ > '{0}.tmp' && mv '{0}.tmp' '{0}'; {body}",
        pid_file.display()
    );
    let holder = Running::spawn(portable_run(scratch, name, options, &script));
    wait_until("the holder's command started", || pid_file.exists());
    holder
}

/// The pid a command wrote to `file`, once it has.
fn pid_in(file: &std::path::Path) -> u32 {
    wait_until("the pid was written", || file.exists());
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn kill(pid: u32) {
    let _ = kill_process(Pid::from_raw(pid as i32).unwrap(), Signal::KILL);
}

/// Kills `pid` when dropped, so that a failed test leaves nothing running.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        kill(self.0);
    }
}

/// Without the parent-death signal, CMD outlives a distlock killed
/// outright, and runs on without the lock.
#[test]
fn the_command_outlives_a_distlock_killed_outright() {
    let scratch = Scratch::new();
    let name = unique("outlives");
    let holder = hold(&scratch, &name, &[], "cmd", "exec sleep 1000");
    let command = pid_in(&scratch.file("cmd"));
    let _cleanup = KillOnDrop(command);

    holder.signal(Signal::KILL);
    wait_until("distlock died", || process_ended(holder.pid()));
    // On Linux the kernel would have killed the command by now.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !process_ended(command),
        "the command died with distlock, so the parent-death signal was set"
    );
    assert!(lock_is_free(&scratch, &name), "the lock went with distlock");

    kill(command);
    let finished = holder.finish();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&finished.status),
        Some(9)
    );
}

/// Without a subreaper, what CMD leaves running is not distlock's to wait
/// for: the lock is released when CMD exits.
#[test]
fn the_lock_is_released_when_the_command_exits_whatever_it_left_running() {
    let scratch = Scratch::new();
    let name = unique("leftover");
    let child = scratch.file("child");
    // The command exits at once, leaving a process of its own running, with
    // its output away from distlock's pipes.
    let body = format!(
        "sleep 1000 >/dev/null 2>&1 & echo $! > '{0}.tmp' && mv '{0}.tmp' '{0}'; exit 3",
        child.display()
    );
    let holder = hold(&scratch, &name, &[], "cmd", &body);
    let left = pid_in(&child);
    let _cleanup = KillOnDrop(left);

    let finished = holder.finish();
    assert_eq!(finished.status.code(), Some(3), "{}", finished.stderr);
    assert!(
        !process_ended(left),
        "what the command left running was stopped"
    );
    assert!(
        lock_is_free(&scratch, &name),
        "the lock is held until what the command left running ends, so distlock is a subreaper"
    );
}

/// A lost lock stops CMD, which exits 76 as on Linux, but only CMD: what
/// it started gets no signal from distlock.
#[test]
fn a_lost_lock_stops_the_command_alone() {
    let scratch = Scratch::new();
    let name = unique("lost");
    let child = scratch.file("child");
    let body = format!(
        "sleep 1000 >/dev/null 2>&1 & echo $! > '{0}.tmp' && mv '{0}.tmp' '{0}'; wait",
        child.display()
    );
    // A short lease makes the file backend check its lock often.
    let holder = hold(&scratch, &name, &["--lease", "1s"], "cmd", &body);
    let started = pid_in(&child);
    let _cleanup = KillOnDrop(started);

    let output = scratch
        .distlock(&["release", "--force", &name])
        .output()
        .unwrap();
    assert!(output.status.success());
    let finished = holder.finish();
    assert_eq!(finished.status.code(), Some(76), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains(&format!("distlock: lost the lock {name}")),
        "{}",
        finished.stderr
    );
    assert!(
        !process_ended(started),
        "the command's child was stopped too, so distlock found it through /proc"
    );
}

/// Signals still reach CMD, and the lock is still released.
#[test]
fn sigterm_is_passed_on_and_the_lock_released() {
    let scratch = Scratch::new();
    let name = unique("term");
    let got = scratch.file("got");
    let body = format!(
        "trap \"echo term > '{}'; exit 3\" TERM; while :; do sleep 0.05; done",
        got.display()
    );
    let holder = hold(&scratch, &name, &[], "cmd", &body);
    holder.signal(Signal::TERM);
    let finished = holder.finish();
    assert_eq!(finished.status.code(), Some(3), "{}", finished.stderr);
    assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), "term");
    assert!(lock_is_free(&scratch, &name));
}

/// A waiting run takes the lock once the holder's command ends: the file
/// backend, not watching the directory, finds it free at a retry.
#[test]
fn a_waiting_run_takes_the_lock_when_the_holder_ends() {
    let scratch = Scratch::new();
    let name = unique("waits");
    let stop = scratch.file("stop");
    let body = format!("while [ ! -e '{}' ]; do sleep 0.05; done", stop.display());
    let holder = hold(&scratch, &name, &[], "cmd", &body);

    let ran = scratch.file("ran");
    let waiter = Running::spawn(portable_run(
        &scratch,
        &name,
        &["--wait", "30s"],
        &format!("touch '{}'", ran.display()),
    ));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!ran.exists(), "the waiter ran while the lock was held");
    std::fs::write(&stop, "").unwrap();
    assert_eq!(holder.finish().status.code(), Some(0));
    let finished = waiter.finish();
    assert_eq!(finished.status.code(), Some(0), "{}", finished.stderr);
    assert!(ran.exists());
}

//! `distlock run` with real processes on a file backend in a temporary
//! directory.

mod common;

use std::process::Command;

use common::{
    Running, Scratch, assert_interrupted_while_waiting, lock_is_free, process_ended, run_sh,
    unique, wait_until,
};
use rustix::process::Signal;

#[test]
fn passes_name_and_token_and_the_exit_code() {
    let scratch = Scratch::new();
    let name = unique("env");
    let output = run_sh(
        &scratch,
        &name,
        &[],
        r#"printf '%s %s' "$DISTLOCK_NAME" "$DISTLOCK_FENCING_TOKEN"; exit 7"#,
    )
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(7));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let (shown_name, token) = stdout.split_once(' ').expect("name and token");
    assert_eq!(shown_name, name);
    assert!(token.parse::<u64>().unwrap() > 0, "{stdout}");
    assert!(lock_is_free(&scratch, &name), "released after the command");
}

#[test]
fn a_command_killed_by_a_signal_exits_128_plus_the_signal() {
    let scratch = Scratch::new();
    let output = run_sh(&scratch, &unique("sig"), &[], "kill -9 $$")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(128 + 9));
}

#[test]
fn commands_that_cannot_run_exit_127_or_126() {
    let scratch = Scratch::new();
    let name = unique("exec");
    let output = scratch
        .distlock(&["run", &name, "--", "distlock-no-such-command"])
        .output()
        .unwrap();
    let line = common::one_line_failure(&output, 127);
    assert!(line.contains("command not found"), "{line}");

    let not_executable = scratch.file("plain.txt");
    std::fs::write(&not_executable, "data").unwrap();
    let output = scratch
        .distlock(&["run", &name, "--", not_executable.to_str().unwrap()])
        .output()
        .unwrap();
    let line = common::one_line_failure(&output, 126);
    assert!(line.contains("permission denied"), "{line}");
    assert!(lock_is_free(&scratch, &name));
}

/// Holds `name` with a `distlock run` whose command runs `setup`, touches a
/// ready file, then runs `body`; returns once the ready file exists.
fn hold(scratch: &Scratch, name: &str, options: &[&str], setup: &str, body: &str) -> Running {
    hold_in(scratch, name, options, setup, body, |command| command)
}

/// As [`hold`], with the `distlock run` command passed through `wrap`
/// first.
fn hold_in(
    scratch: &Scratch,
    name: &str,
    options: &[&str],
    setup: &str,
    body: &str,
    wrap: impl FnOnce(Command) -> Command,
) -> Running {
    let ready = scratch.file(&format!("{name}.ready"));
    let script = format!("{setup} touch '{}'; {body}", ready.display());
    let holder = Running::spawn(wrap(run_sh(scratch, name, options, &script)));
    wait_until("the holder's command started", || ready.exists());
    holder
}

/// A shell `trap` that writes `term` to `file` on SIGTERM and exits `code`.
fn trap_term(file: &std::path::Path, code: i32) -> String {
    trap("TERM", file, code)
}

/// A shell `trap` that writes `signal` in lower case to `file` on that
/// signal and exits `code`.
fn trap(signal: &str, file: &std::path::Path, code: i32) -> String {
    format!(
        "trap \"echo {} > '{}'; exit {code}\" {signal};",
        signal.to_lowercase(),
        file.display()
    )
}

/// A shell loop that waits for signals.
const IDLE: &str = "while :; do sleep 0.05; done";

#[test]
fn no_wait_on_a_held_lock_exits_75_without_running_the_command() {
    let scratch = Scratch::new();
    let name = unique("busy");
    let _holder = hold(&scratch, &name, &[], "", "exec sleep 1000");
    let ran = scratch.file("ran");
    let script = format!("touch '{}'", ran.display());

    let output = run_sh(&scratch, &name, &["--no-wait"], &script)
        .output()
        .unwrap();
    let line = common::one_line_failure(&output, 75);
    assert!(line.contains(&name) && line.contains("held"), "{line}");

    let output = run_sh(&scratch, &name, &["--wait", "100ms"], &script)
        .output()
        .unwrap();
    let line = common::one_line_failure(&output, 75);
    assert!(line.contains("after waiting 100ms"), "{line}");

    // Nobody reading stderr any more does not change the exit code.
    let mut unread = run_sh(&scratch, &name, &["--no-wait"], &script)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(unread.stderr.take());
    assert_eq!(unread.wait().unwrap().code(), Some(75));

    // As flock -E: the code is the caller's, 0 included.
    for (options, code) in [
        (&["--no-wait", "-E", "0"][..], 0),
        (&["-n", "--conflict-exit-code", "3"], 3),
    ] {
        let output = run_sh(&scratch, &name, options, &script).output().unwrap();
        let line = common::one_line_failure(&output, code);
        assert!(line.contains("held"), "{line}");
    }
    assert!(!ran.exists(), "the command must not run without the lock");
}

/// As with flock(1), the command may follow the options without `--`;
/// everything after it is the command's, options included.
#[test]
fn the_command_needs_no_separator() {
    let scratch = Scratch::new();
    let name = unique("no-separator");
    let ran = scratch.file("ran");
    let output = common::distlock(&[
        "run",
        &name,
        "--backend",
        &scratch.url,
        "-w",
        "5",
        "sh",
        "-c",
        &format!("echo \"$0 $1\" > '{}'", ran.display()),
        "-w",
        "--no-wait",
    ])
    .output()
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    let seen = std::fs::read_to_string(&ran).unwrap();
    assert_eq!(
        seen.trim(),
        "-w --no-wait",
        "the options after CMD are its own"
    );
}

#[test]
fn sigkill_of_distlock_kills_the_command_and_frees_the_lock() {
    let scratch = Scratch::new();
    let name = unique("kill");
    let pid_file = scratch.file("pid");
    let setup = format!("echo $$ > '{}';", pid_file.display());
    let holder = hold(&scratch, &name, &[], &setup, "exec sleep 1000");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!process_ended(pid));

    holder.signal(Signal::KILL);
    let finished = holder.finish();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&finished.status),
        Some(9)
    );
    wait_until("the command died with distlock", || process_ended(pid));
    // The lock went with distlock's process at once; the command held no
    // copy of the lock file.
    assert!(lock_is_free(&scratch, &name));
}

#[test]
fn sigterm_is_passed_on_and_the_lock_released() {
    let scratch = Scratch::new();
    let name = unique("term");
    let got = scratch.file("got");
    let holder = hold(&scratch, &name, &[], &trap_term(&got, 3), IDLE);
    holder.signal(Signal::TERM);
    let finished = holder.finish();
    assert_eq!(finished.status.code(), Some(3), "{}", finished.stderr);
    assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), "term");
    assert!(lock_is_free(&scratch, &name));
}

/// A closed terminal or SSH session sends SIGHUP: passed on like SIGTERM,
/// rather than ending distlock with the lock unreleased.
#[test]
fn sighup_is_passed_on_and_the_lock_released() {
    let scratch = Scratch::new();
    let name = unique("hup");
    let got = scratch.file("got");
    let holder = hold(&scratch, &name, &[], &trap("HUP", &got, 5), IDLE);
    holder.signal(Signal::HUP);
    let finished = holder.finish();
    assert_eq!(finished.status.code(), Some(5), "{}", finished.stderr);
    assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), "hup");
    assert!(lock_is_free(&scratch, &name));
}

#[test]
fn a_lost_lock_stops_the_command_and_exits_76() {
    let scratch = Scratch::new();
    let name = unique("lost");
    let got = scratch.file("got");
    // A short lease makes the file backend check its lock often.
    let holder = hold(
        &scratch,
        &name,
        &["--lease", "1s"],
        &trap_term(&got, 0),
        IDLE,
    );

    let output = scratch
        .distlock(&["release", "--force", &name])
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("it was held"), "{stdout}");

    let finished = holder.finish();
    let stderr = finished.stderr;
    assert_eq!(finished.status.code(), Some(76), "{stderr}");
    assert!(
        stderr.contains(&format!("distlock: lost the lock {name}")),
        "{stderr}"
    );
    assert!(stderr.contains("refused"), "the reason is named: {stderr}");
    let said = stderr.lines().filter(|line| line.contains("lost")).count();
    assert_eq!(said, 1, "the loss is reported once: {stderr}");
    assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), "term");
}

#[test]
fn no_lock_file_descriptor_leaks_into_the_command() {
    let scratch = Scratch::new();
    let name = unique("fds");
    let output = run_sh(&scratch, &name, &[], "ls -l /proc/$$/fd")
        .output()
        .unwrap();
    assert!(output.status.success());
    let listing = String::from_utf8(output.stdout).unwrap();
    assert!(
        listing.contains("->"),
        "the listing shows descriptors: {listing}"
    );
    assert!(!listing.contains(".lock"), "a lock file leaked: {listing}");
    assert!(!listing.contains("inotify"), "a watch leaked: {listing}");
    // The lock file exists, so a leaked descriptor would have shown.
    let lock_files = std::fs::read_dir(scratch.lock_dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".lock"))
        .count();
    assert!(lock_files >= 1);
}

#[test]
fn a_signal_while_waiting_stops_without_running_the_command() {
    let scratch = Scratch::new();
    let name = unique("interrupted");
    let _holder = hold(&scratch, &name, &[], "", "exec sleep 1000");
    let ran = scratch.file("ran");
    let mut waiter = run_sh(&scratch, &name, &[], &format!("touch '{}'", ran.display()));
    waiter.env("DISTLOCK_LOG", "debug");
    let waiter = Running::spawn(waiter);
    waiter.wait_for_stderr("taking the lock");

    waiter.signal(Signal::INT);
    assert_interrupted_while_waiting(&waiter.finish(), &name);
    assert!(!ran.exists(), "the command must not run");
}

/// Writes `lines` to an executable-free shell script in the scratch
/// directory and returns its path.
fn script_file(scratch: &Scratch, name: &str, lines: &str) -> std::path::PathBuf {
    let path = scratch.file(name);
    std::fs::write(&path, lines).unwrap();
    path
}

#[test]
fn sigint_is_passed_on_when_no_terminal_sent_it() {
    let scratch = Scratch::new();
    let name = unique("int");
    let got = scratch.file("got");
    // In a session of its own, distlock has no controlling terminal, so
    // nothing but distlock can have sent the command this SIGINT.
    let holder = hold_in(
        &scratch,
        &name,
        &[],
        &trap("INT", &got, 4),
        IDLE,
        |command| common::in_new_session(&command),
    );
    holder.signal(Signal::INT);
    let finished = holder.finish();
    assert_eq!(finished.status.code(), Some(4), "{}", finished.stderr);
    assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), "int");
    assert!(lock_is_free(&scratch, &name));
}

#[test]
fn ctrl_c_at_a_terminal_reaches_the_command_once() {
    ctrl_c_reaches_the_command_once("");
}

/// A command that leaves distlock's process group (here for a session of
/// its own) no longer gets the terminal's Ctrl-C, so distlock passes it on.
#[test]
fn ctrl_c_reaches_a_command_in_a_process_group_of_its_own() {
    ctrl_c_reaches_the_command_once("setsid ");
}

/// Runs a command under distlock on a pseudo-terminal, through `wrapper`,
/// types ^C and checks that the command saw exactly one SIGINT.
fn ctrl_c_reaches_the_command_once(wrapper: &str) {
    let scratch = Scratch::new();
    let name = unique("ctrl-c");
    let count = scratch.file("count");
    let ready = scratch.file("ready");
    let stop = scratch.file("stop");
    // Only builtins in the loop, so that each SIGINT that arrives runs the
    // trap on its own and a second one would be counted.
    let body = script_file(
        &scratch,
        "body.sh",
        &format!(
            "trap \"echo int >> '{}'\" INT\ntouch '{}'\nwhile [ ! -e '{}' ]; do :; done\n",
            count.display(),
            ready.display(),
            stop.display()
        ),
    );
    let launch = script_file(
        &scratch,
        "launch.sh",
        &format!(
            "exec '{}' run '{name}' --backend '{}' -- {wrapper}sh '{}'\n",
            env!("CARGO_BIN_EXE_distlock"),
            scratch.url,
            body.display()
        ),
    );
    // `script` runs distlock on a pseudo-terminal, in its foreground
    // process group, and copies our ^C to it: the terminal then sends
    // SIGINT to distlock and the command alike. `script` starts the line
    // with `$SHELL -c`; the `exec` keeps that shell from waiting around in
    // the same group, where the ^C would kill it (dash does not exec the
    // last command by itself).
    let mut terminal = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("exec sh '{}'", launch.display()),
            "/dev/null",
        ])
        .env("SHELL", "/bin/sh")
        .env_remove("DISTLOCK_URL")
        .env("DISTLOCK_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start script(1) from util-linux");
    wait_until("the command started", || ready.exists());

    use std::io::Write;
    let mut keyboard = terminal.stdin.take().unwrap();
    keyboard.write_all(b"\x03").unwrap();
    keyboard.flush().unwrap();
    wait_until("the command saw the interrupt", || count.exists());
    // Time for a second SIGINT to arrive, had distlock passed it on.
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::write(&stop, "").unwrap();

    let output = terminal.wait_with_output().unwrap();
    // What distlock printed went to the terminal, which `script` copies to
    // its standard output.
    assert!(
        output.status.success(),
        "{}: {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "int\n");
    assert!(lock_is_free(&scratch, &name));
}

/// Whether the process `pid` has ended (gone, or a zombie nobody reaped).
fn has_ended(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// The pid a command wrote to `file`.
fn pid_in(file: &std::path::Path) -> String {
    std::fs::read_to_string(file).unwrap().trim().to_owned()
}

#[test]
fn a_lost_lock_stops_what_the_command_started_too() {
    let scratch = Scratch::new();
    let name = unique("lost-tree");
    let child = scratch.file("child");
    // The shell waits for a child of its own, which a SIGTERM to the shell
    // alone would leave running.
    let body = format!("sleep 1000 & echo $! > '{}'; wait", child.display());
    let holder = hold(&scratch, &name, &["--lease", "1s"], "", &body);
    wait_until("the child started", || child.exists());
    let pid = pid_in(&child);

    let output = scratch
        .distlock(&["release", "--force", &name])
        .output()
        .unwrap();
    assert!(output.status.success());
    let finished = holder.finish();
    assert_eq!(finished.status.code(), Some(76), "{}", finished.stderr);
    assert!(has_ended(&pid), "the command's child {pid} still runs");
}

#[test]
fn the_lock_is_held_until_what_the_command_left_running_ends() {
    let scratch = Scratch::new();
    let name = unique("leftover");
    let child = scratch.file("child");
    let stop = scratch.file("stop");
    // The command exits at once, leaving a process of its own running.
    let body = format!(
        "sh -c \"while [ ! -e '{}' ]; do sleep 0.05; done\" & echo $! > '{}'; exit 3",
        stop.display(),
        child.display()
    );
    let holder = hold(&scratch, &name, &[], "", &body);
    wait_until("the child started", || child.exists());

    let output = run_sh(&scratch, &name, &["--no-wait"], "true")
        .output()
        .unwrap();
    common::one_line_failure(&output, 75);

    std::fs::write(&stop, "").unwrap();
    let finished = holder.finish();
    assert_eq!(finished.status.code(), Some(3), "{}", finished.stderr);
    assert!(has_ended(&pid_in(&child)));
    assert!(lock_is_free(&scratch, &name));
}

/// On a terminal, a wait shows one line naming the lock and its holder,
/// brought up to date in place; `-q` silences it. (Off a terminal, as in
/// every other test here, stderr holds only the outcome's line.)
#[test]
fn a_wait_on_a_terminal_says_who_holds_the_lock() {
    let scratch = Scratch::new();
    let name = unique("shown-wait");
    let _holder = hold(&scratch, &name, &[], "", "exec sleep 1000");
    let on_terminal = |extra: &str| {
        let command = format!(
            "{} run {name} --backend '{}' -w 2 {extra} -- true",
            env!("CARGO_BIN_EXE_distlock"),
            scratch.url
        );
        // script(1) gives the command a terminal, and passes its exit code.
        let output = std::process::Command::new("script")
            .args(["-qefc", &command, "/dev/null"])
            .env("DISTLOCK_LOG", "warn")
            .env_remove("DISTLOCK_URL")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    let (code, shown) = on_terminal("");
    assert_eq!(code, Some(75), "{shown}");
    assert!(shown.contains("distlock: waiting"), "{shown:?}");
    assert!(
        shown.contains(&format!("for lock {name}; held by pid")),
        "{shown}"
    );
    assert!(
        shown.contains("(distlock run sh)"),
        "the holder's label: {shown}"
    );
    let (code, quiet) = on_terminal("-q");
    assert_eq!(code, Some(75), "{quiet}");
    assert!(!quiet.contains("distlock: waiting"), "{quiet:?}");
    assert!(quiet.contains("is held elsewhere"), "{quiet}");
}

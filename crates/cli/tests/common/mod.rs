//! Helpers for the CLI's process tests: a file backend in a temporary
//! directory, the binary, children that are killed when a test ends, and
//! bounded polling.

#![allow(dead_code, unreachable_pub)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a poll may take before the test fails: a bound on hangs, not a
/// claim about speed.
const POLL_LIMIT: Duration = Duration::from_secs(60);

/// A file backend in a fresh temporary directory, and a scratch directory
/// for the files the test's commands write.
pub struct Scratch {
    locks: tempfile::TempDir,
    files: tempfile::TempDir,
    pub url: String,
}

impl Scratch {
    pub fn new() -> Self {
        let locks = tempfile::tempdir().expect("temp dir");
        let files = tempfile::tempdir().expect("temp dir");
        let url = format!("file://{}", locks.path().display());
        Self { locks, files, url }
    }

    /// The directory the backend keeps its lock files in.
    pub fn lock_dir(&self) -> &Path {
        self.locks.path()
    }

    /// A path for a file the test's commands write.
    pub fn file(&self, name: &str) -> PathBuf {
        self.files.path().join(name)
    }

    /// `distlock SUBCOMMAND --backend URL REST…`: the backend right after
    /// the subcommand, since every argument after `run`'s `--` (or its
    /// command) is the command's.
    pub fn distlock(&self, args: &[&str]) -> Command {
        let (subcommand, rest) = args.split_first().expect("a subcommand");
        let mut command = distlock(&[subcommand, "--backend", &self.url]);
        command.args(rest);
        command
    }
}

/// `distlock ARGS`, with no backend from the environment and quiet logs.
pub fn distlock(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
    command
        .args(args)
        .env_remove("DISTLOCK_URL")
        .env("DISTLOCK_LOG", "warn")
        .stdin(Stdio::null());
    command
}

/// `distlock run NAME --backend URL [OPTIONS] -- sh -c SCRIPT`.
pub fn run_sh(scratch: &Scratch, name: &str, options: &[&str], script: &str) -> Command {
    let mut command = scratch.distlock(&["run", name]);
    command.args(options).args(["--", "sh", "-c", script]);
    command
}

/// `command` run through setsid(1), in a session of its own: without a
/// controlling terminal. setsid execs it in place, so its pid is the one
/// to signal.
pub fn in_new_session(command: &Command) -> Command {
    let mut session = Command::new("setsid");
    session.arg(command.get_program()).args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => session.env(key, value),
            None => session.env_remove(key),
        };
    }
    session.stdin(Stdio::null());
    session
}

/// A lock name no other test uses.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A child process that is killed and reaped if the test ends first. Its
/// stderr is collected as it comes, so a test can wait for a log line.
pub struct Running {
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// How a [`Running`] process ended.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Running {
    pub fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start distlock");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("piped stderr");
        let collected = stderr.clone();
        let reader = std::thread::spawn(move || {
            let mut buffer = [0; 4096];
            while let Ok(read @ 1..) = pipe.read(&mut buffer) {
                let text = String::from_utf8_lossy(&buffer[..read]);
                collected.lock().unwrap().push_str(&text);
            }
        });
        Self {
            child: Some(child),
            stderr,
            reader: Some(reader),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).expect("a pid");
        rustix::process::kill_process(pid, signal).expect("signal distlock");
    }

    /// Waits until the process has written `text` to stderr.
    pub fn wait_for_stderr(&self, text: &str) {
        wait_until(&format!("stderr shows {text:?}"), || {
            self.stderr.lock().unwrap().contains(text)
        });
    }

    /// Waits for the process to end, within the poll limit.
    pub fn finish(mut self) -> Finished {
        let mut child = self.child.take().expect("running");
        let pid = child.id();
        let started = Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if started.elapsed() > POLL_LIMIT {
                let _ = child.kill();
                panic!("distlock (pid {pid}) did not exit within {POLL_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let output = child.wait_with_output().expect("collect output");
        // The reader sees end of file once every writer is gone, which
        // includes the command distlock ran.
        let reader = self.reader.take().expect("reader");
        wait_until("stderr was read to its end", || reader.is_finished());
        let _ = reader.join();
        Finished {
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: self.stderr.lock().unwrap().clone(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Checks that `finished` is a `distlock run` that a SIGINT stopped while
/// it waited for lock `name`.
pub fn assert_interrupted_while_waiting(finished: &Finished, name: &str) {
    assert_eq!(finished.status.code(), Some(128 + 2), "{}", finished.stderr);
    assert!(
        finished.stderr.contains(&format!(
            "distlock: interrupted while waiting for lock {name}"
        )),
        "{}",
        finished.stderr
    );
}

/// Polls `done` until it holds; fails the test after the poll limit.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < POLL_LIMIT, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` has ended: it is gone, or a zombie nobody reaped
/// yet (in containers, PID 1 may never reap orphans).
pub fn process_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rfind(')')
                .and_then(|end| stat[end + 1..].split_whitespace().next());
            matches!(state, Some("Z" | "X" | "x"))
        }
    }
}

/// Asserts that distlock failed with `code` and exactly one stderr line
/// starting `distlock: `; returns that line.
pub fn one_line_failure(output: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(code),
        "exit status; stderr: {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "expected one line on stderr, got: {stderr:?}"
    );
    assert!(lines[0].starts_with("distlock: "), "{stderr:?}");
    lines[0].to_owned()
}

/// Whether `name` can be taken now (a `--no-wait` run of `true` succeeds).
pub fn lock_is_free(scratch: &Scratch, name: &str) -> bool {
    let output = scratch
        .distlock(&["run", name, "--no-wait", "--", "true"])
        .output()
        .expect("run distlock");
    match output.status.code() {
        Some(0) => true,
        Some(75) => false,
        other => panic!(
            "unexpected exit {other:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

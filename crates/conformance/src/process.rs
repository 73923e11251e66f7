//! `distlock run` child processes that hold a lock, or wait for one, for
//! the cross-process cases.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use distlock_core::{Claim, LockName};
use rustix::process::{Pid, Signal, kill_process};

/// The `distlock` binary: `$DISTLOCK_BIN`, else `target/<profile>/distlock`
/// beside the test executable.
fn distlock_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("DISTLOCK_BIN") {
        return bin.into();
    }
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let bin = profile_dir.join("distlock");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p distlock-cli` or set DISTLOCK_BIN",
        bin.display()
    );
    bin
}

/// The `distlock run` flags that take `claim`.
fn claim_args(claim: Claim) -> Vec<String> {
    match claim {
        Claim::Exclusive => Vec::new(),
        Claim::Shared => vec!["--shared".into()],
        Claim::Permit { limit } => vec!["--permits".into(), limit.to_string()],
    }
}

/// `distlock run NAME` on `url` with `lease`, to which callers add their
/// options and command.
fn distlock_run(url: &str, name: &LockName, lease: Duration) -> Command {
    let mut command = Command::new(distlock_bin());
    command.args(["run", name.as_str(), "--backend", url, "--lease"]);
    command.arg(format!("{}ms", lease.as_millis()));
    command
}

pub(crate) struct HeldByChild {
    child: Child,
    token: u64,
    dir: PathBuf,
}

impl HeldByChild {
    /// Starts `distlock run NAME -- sh -c '<write the token>; sleep'` and
    /// waits until the child holds the lock.
    pub(crate) async fn start(url: &str, name: &LockName, lease: Duration) -> Self {
        Self::start_as(url, name, lease, Claim::Exclusive).await
    }

    /// As [`start`](Self::start), with the child holding `claim`: a
    /// reader's share (`--shared`) or a permit (`--permits N`).
    pub(crate) async fn start_as(
        url: &str,
        name: &LockName,
        lease: Duration,
        claim: Claim,
    ) -> Self {
        Self::start_with(url, name, lease, claim_args(claim)).await
    }

    /// As [`start`](Self::start), with `--resume-file file`: the child
    /// takes up the grant `file` names, if the store still holds it.
    pub(crate) async fn start_resuming(
        url: &str,
        name: &LockName,
        lease: Duration,
        file: &std::path::Path,
    ) -> Self {
        let resume = vec!["--resume-file".to_owned(), file.display().to_string()];
        Self::start_with(url, name, lease, resume).await
    }

    /// What `distlock run --resume-file file` says on stderr when it
    /// refuses to start, which it must.
    pub(crate) async fn refused_at_start(
        url: &str,
        name: &LockName,
        lease: Duration,
        file: &std::path::Path,
    ) -> String {
        let output = distlock_run(url, name, lease)
            .arg("--resume-file")
            .arg(file)
            .args(["--", "true"])
            .stdin(Stdio::null())
            .output()
            .expect("run distlock run");
        assert!(
            !output.status.success(),
            "distlock run --resume-file started on a backend that cannot resume"
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    }

    /// `distlock run NAME` with `args` before its command, started as
    /// [`start`](Self::start) says.
    async fn start_with(url: &str, name: &LockName, lease: Duration, args: Vec<String>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "distlock-conformance-{:016x}",
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let marker = dir.join("token");
        let script = format!(
            "echo $$ > {}/command && echo \"$DISTLOCK_FENCING_TOKEN\" > {}.tmp && mv {}.tmp {} && exec sleep 120",
            dir.display(),
            marker.display(),
            marker.display(),
            marker.display()
        );
        let child = distlock_run(url, name, lease)
            .args(["--kill-grace", "2s"])
            .args(args)
            .args(["--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn distlock run");
        let mut held = Self {
            child,
            token: 0,
            dir,
        };
        let started = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&marker) {
                held.token = text.trim().parse().expect("the child got a numeric token");
                return held;
            }
            if let Ok(Some(status)) = held.child.try_wait() {
                panic!("distlock run exited with {status} before holding the lock");
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the child never got the lock"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) fn fencing_token(&self) -> u64 {
        self.token
    }

    fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(self.child.id() as i32).expect("child pid");
        kill_process(pid, signal).expect("signal the child");
    }

    /// SIGKILLs the holder and reaps it.
    pub(crate) fn kill_hard(&mut self) {
        self.signal(Signal::KILL);
        self.child.wait().expect("reap");
        self.kill_command();
    }

    /// Kills the holder's command, once the holder was killed: it outlives
    /// the holder where there is no parent-death signal (off Linux, or with
    /// `DISTLOCK_PORTABLE` set).
    fn kill_command(&self) {
        let command = std::fs::read_to_string(self.dir.join("command")).ok();
        if let Some(pid) = command.and_then(|pid| pid.trim().parse().ok().and_then(Pid::from_raw)) {
            let _ = kill_process(pid, Signal::KILL);
        }
    }

    /// SIGTERMs the holder, which then stops its command and releases,
    /// and SIGKILLs it `after` that, wherever it then is; reaps it.
    pub(crate) async fn terminate_then_kill(&mut self, after: Duration) {
        self.signal(Signal::TERM);
        tokio::time::sleep(after).await;
        if self.is_running() {
            self.signal(Signal::KILL);
        }
        self.child.wait().expect("reap");
        self.kill_command();
    }

    pub(crate) fn stop(&self) {
        self.signal(Signal::STOP);
    }

    pub(crate) fn resume(&self) {
        self.signal(Signal::CONT);
    }

    /// SIGTERMs the holder and reaps it.
    pub(crate) fn terminate(&mut self) {
        self.signal(Signal::TERM);
        self.child.wait().expect("reap");
    }

    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits (bounded) for the holder to exit; its exit code.
    pub(crate) async fn wait(&mut self) -> Option<i32> {
        exit_code(&mut self.child, Duration::from_secs(60), "the holder").await
    }
}

/// A `distlock run` child that waits for a lock, then appends its place
/// and its fencing token to a log the children share, and exits.
pub(crate) struct WaitingChild {
    child: Child,
}

impl WaitingChild {
    /// Starts `distlock run NAME` with `lease`, waiting up to a minute; once
    /// granted, its command appends `place token` to `log` and returns.
    pub(crate) fn start(
        url: &str,
        name: &LockName,
        lease: Duration,
        place: usize,
        log: &std::path::Path,
    ) -> Self {
        // The log is written under the lock, so its lines come in the order
        // the lock was granted.
        let script = format!(
            "echo \"{place} $DISTLOCK_FENCING_TOKEN\" >> {}",
            log.display()
        );
        let child = distlock_run(url, name, lease)
            .args(["--wait", "60s", "--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn distlock run");
        Self { child }
    }

    /// SIGKILLs the waiter and reaps it.
    pub(crate) fn kill_hard(&mut self) {
        let pid = Pid::from_raw(self.child.id() as i32).expect("child pid");
        kill_process(pid, Signal::KILL).expect("signal the child");
        self.child.wait().expect("reap");
    }

    /// Waits (bounded) for the waiter to exit; its exit code.
    pub(crate) async fn wait(&mut self) -> Option<i32> {
        exit_code(&mut self.child, Duration::from_secs(90), "the waiter").await
    }
}

/// Waits up to `bound` for `child` to exit; its exit code.
async fn exit_code(child: &mut Child, bound: Duration, who: &str) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code();
        }
        assert!(started.elapsed() < bound, "{who} never exited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Drop for WaitingChild {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for HeldByChild {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.kill_command();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

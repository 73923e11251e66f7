//! `distlock run` against a real memcached of the test's own, which the test
//! can stop (SIGSTOP) so that an attempt gets no answer.

mod common;

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Running, assert_interrupted_while_waiting, distlock, process_ended, unique, wait_until,
};
use rustix::process::Signal;

/// memcached on a free loopback port, killed when the test ends.
struct Memcached {
    child: Child,
    port: u16,
}

/// A loopback port that nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

impl Memcached {
    fn start() -> Self {
        Self::start_on(free_port())
    }

    fn start_on(port: u16) -> Self {
        let bin = std::env::var("MEMCACHED_BIN").unwrap_or_else(|_| {
            panic!("MEMCACHED_BIN is not set: run the tests with scripts/test, which installs memcached")
        });
        // `-u root` matters only when running as root, where memcached
        // insists on being told which user to be.
        let child = Command::new(&bin)
            .args(["-u", "root", "-l", "127.0.0.1", "-U", "0"])
            .args(["-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        wait_until("memcached listens", || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Self { child, port }
    }

    fn signal(&self, signal: Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, signal).expect("signal memcached");
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.signal(Signal::CONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `distlock run NAME --backend URL --lease 120s -- ARGS`, logging at debug.
fn run(url: &str, name: &str, args: &[&str]) -> Running {
    let mut command = distlock(&["run", name, "--backend", url, "--lease", "120s", "--"]);
    command.args(args).env("DISTLOCK_LOG", "debug");
    Running::spawn(command)
}

/// A lock held by one `distlock run` and waited for by another, whose
/// first SIGINT came while its attempt was in flight on a stopped
/// memcached. Returns the holder and the waiter, and the lock's name.
fn signalled_in_flight(memcached: &Memcached, prefix: &str) -> (Running, Running, String) {
    // Each call may take 10 s: the operation timeout, shorter than the
    // URL's 60 s.
    let url = format!("memcache://127.0.0.1:{}?timeout=60s", memcached.port);
    let name = unique(prefix);
    let holder = run(&url, &name, &["sleep", "1000"]);
    holder.wait_for_stderr("acquired; starting the command");
    let waiter = run(&url, &name, &["true"]);
    waiter.wait_for_stderr("taking the lock");

    memcached.signal(Signal::STOP);
    // A waiter tries at least every 500 ms: by now an attempt is in flight,
    // and memcached will not answer it.
    std::thread::sleep(Duration::from_millis(1500));
    waiter.signal(Signal::INT);
    waiter.wait_for_stderr("cancelling the wait");
    (holder, waiter, name)
}

/// A first signal cancels the wait but lets the attempt in flight be
/// answered, so that a grant it brings is released rather than left to
/// expire; a second signal leaves at once.
#[test]
fn a_signal_waits_for_the_attempt_in_flight_and_a_second_one_leaves_at_once() {
    let memcached = Memcached::start();
    let (_holder, waiter, name) = signalled_in_flight(&memcached, "hanging");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !process_ended(waiter.pid()),
        "the first signal waits for the attempt in flight"
    );

    waiter.signal(Signal::INT);
    let pid = waiter.pid();
    let asked = Instant::now();
    wait_until("distlock leaves after the second signal", || {
        process_ended(pid)
    });
    // The attempt in flight began at most about 2.5 s before the second
    // signal, and its 10 s would end at the earliest 7.5 s after it.
    assert!(
        asked.elapsed() < Duration::from_secs(7),
        "distlock left only when the attempt's 10 s ran out"
    );
    assert_interrupted_while_waiting(&waiter.finish(), &name);
}

/// After a first signal, the wait ends as soon as the attempt in flight is
/// answered.
#[test]
fn a_signalled_wait_ends_when_the_attempt_in_flight_is_answered() {
    let memcached = Memcached::start();
    let (_holder, waiter, name) = signalled_in_flight(&memcached, "answered");
    memcached.signal(Signal::CONT);
    let finished = waiter.finish();
    assert_interrupted_while_waiting(&finished, &name);
    assert!(
        finished.stderr.contains("outcome=\"cancelled\""),
        "the wait ended as cancelled: {}",
        finished.stderr
    );
}

/// `distlock run` whose server is not up yet waits for it, for as long as
/// it would wait for the lock, and says so once.
#[test]
fn run_waits_for_a_server_that_comes_up_while_it_waits() {
    let port = free_port();
    let url = format!("memcache://127.0.0.1:{port}");
    let waiting = run(&url, &unique("late-server"), &["true"]);
    waiting.wait_for_stderr("trying again until it answers");
    let _memcached = Memcached::start_on(port);
    let finished = waiting.finish();
    assert_eq!(finished.status.code(), Some(0), "{}", finished.stderr);
    assert_eq!(
        finished.stderr.matches("trying again").count(),
        1,
        "said once: {}",
        finished.stderr
    );
}

/// With `--wait`, a server that never comes up is unavailable (exit 69)
/// once the wait is over; with `--no-wait`, at the first refusal. A wrapper
/// can tell it from a mistyped URL (exit 2).
#[test]
fn run_gives_up_on_an_unreachable_server_when_its_wait_ends() {
    let url = format!("memcache://127.0.0.1:{}", free_port());
    let name = unique("no-server");
    let output = distlock(&[
        "run",
        &name,
        "--backend",
        &url,
        "--wait",
        "1s",
        "--",
        "true",
    ])
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("trying again for up to 1s"), "{stderr}");
    assert!(stderr.contains("cannot open the backend"), "{stderr}");

    let output = distlock(&["run", &name, "--backend", &url, "--no-wait", "--", "true"])
        .output()
        .unwrap();
    let line = common::one_line_failure(&output, 69);
    assert!(line.contains("cannot open the backend"), "{line}");

    let output = distlock(&["list", "--backend", &url]).output().unwrap();
    let line = common::one_line_failure(&output, 69);
    assert!(line.contains("cannot open the backend"), "{line}");
}

/// Once the backend is open, a wait that runs out while the server fails
/// is the backend's unavailability (exit 69), naming the last error.
#[test]
fn a_wait_that_ends_while_the_server_fails_exits_69() {
    let memcached = Memcached::start();
    let url = format!("memcache://127.0.0.1:{}", memcached.port);
    let name = unique("gone");
    let holder = run(&url, &name, &["sleep", "1000"]);
    holder.wait_for_stderr("acquired; starting the command");
    let mut waiter = distlock(&[
        "run",
        &name,
        "--backend",
        &url,
        "--wait",
        "3s",
        "--",
        "true",
    ]);
    waiter.env("DISTLOCK_LOG", "debug");
    let waiter = Running::spawn(waiter);
    waiter.wait_for_stderr("taking the lock");
    drop(memcached);
    let finished = waiter.finish();
    assert_eq!(finished.status.code(), Some(69), "{}", finished.stderr);
    assert!(
        finished.stderr.contains("as the backend kept failing"),
        "{}",
        finished.stderr
    );
}

/// A held lock whose server stops answering is in danger before it is
/// lost: `run` says so on stderr, and says again once the server answers
/// and the lock is confirmed; the command runs on throughout.
#[test]
fn run_warns_while_its_lock_is_in_danger_and_when_it_is_confirmed_again() {
    let memcached = Memcached::start();
    let url = format!("memcache://127.0.0.1:{}", memcached.port);
    let name = unique("endangered");
    // A 9 s lease: extended every 3 s, at risk with 2.55 s left (at 5.55 s
    // without an answer), lost at 8.1 s: the test has 2.55 s to let the
    // server answer again after the warning.
    let mut holder = distlock(&["run", &name, "--backend", &url, "--lease", "9s", "--"]);
    holder.args(["sleep", "1000"]).env("DISTLOCK_LOG", "debug");
    let holder = Running::spawn(holder);
    holder.wait_for_stderr("acquired; starting the command");
    memcached.signal(Signal::STOP);
    holder.wait_for_stderr(&format!("distlock: lock {name} at risk: "));
    memcached.signal(Signal::CONT);
    holder.wait_for_stderr(&format!("distlock: lock {name} confirmed again"));
    holder.signal(Signal::TERM);
    let finished = holder.finish();
    assert!(
        !finished.stderr.contains("lost the lock"),
        "{}",
        finished.stderr
    );
}

//! The path macOS and the BSDs take, forced on Linux with
//! `DISTLOCK_PORTABLE=1`: nobody watches the directory, so waiters learn of
//! a release at their next retry.
//!
//! A process reads the variable once, so each test runs its body again in a
//! child process of this binary with the variable set.

use std::future::Future;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::{Error, LockClient, LockName, LockOptions};
use distlock_file::FileBackend;

const PORTABLE: &str = "DISTLOCK_PORTABLE";

/// Runs `body` with the fallbacks forced: here, in the child process that
/// has the variable, or else by running `test` (this test's own name) in
/// such a child, which must pass.
fn forced(test: &str, body: impl Future<Output = ()>) {
    if std::env::var_os(PORTABLE).is_some_and(|value| value == "1") {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(body);
        return;
    }
    let output = Command::new(std::env::current_exe().expect("this test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(PORTABLE, "1")
        .output()
        .expect("run the test in a child process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    // A name that matched no test would pass with nothing run.
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test} with {PORTABLE}=1: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A client whose waits retry every `poll`.
fn client(dir: &std::path::Path, poll: Duration) -> LockClient {
    let options = LockOptions::builder()
        .lease(Duration::from_secs(600))
        .backoff(poll, poll)
        .build()
        .unwrap();
    LockClient::new(Arc::new(FileBackend::open(dir).unwrap()), options)
}

#[test]
fn the_backend_offers_no_release_wakeups() {
    forced("the_backend_offers_no_release_wakeups", async {
        let dir = tempfile::tempdir().unwrap();
        let backend = FileBackend::open(dir.path()).unwrap();
        assert!(backend.wakeups().is_none());
    });
}

/// The opposite of `wakeups.rs`: with a retry a minute away, a release in
/// another client goes unheard.
#[test]
fn a_release_does_not_wake_a_waiter() {
    forced("a_release_does_not_wake_a_waiter", async {
        let dir = tempfile::tempdir().unwrap();
        let holder = client(dir.path(), Duration::from_secs(60));
        let waiter = client(dir.path(), Duration::from_secs(60));
        let name = LockName::new("unheard").unwrap();
        let guard = holder.acquire_with(&name, Duration::ZERO).await.unwrap();
        let waiting = {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move { waiter.acquire_with(&name, Duration::from_secs(3)).await })
        };
        // Let the waiter make its first attempt and start its minute-long
        // sleep.
        tokio::time::sleep(Duration::from_millis(300)).await;
        guard.release().await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !waiting.is_finished(),
            "a release woke the waiter, so the directory is watched"
        );
        // At its deadline the wait tries once more, and may find the lock
        // free.
        match waiting.await.unwrap() {
            Ok(taken) => {
                taken.release().await.unwrap();
            }
            Err(Error::Timeout { .. }) => {}
            Err(other) => panic!("expected the lock or a timeout, got {other}"),
        }
    });
}

/// With a short backoff, the next retry finds the lock released, in another
/// client as in another process.
#[test]
fn a_waiter_takes_a_released_lock_at_its_next_retry() {
    forced("a_waiter_takes_a_released_lock_at_its_next_retry", async {
        let dir = tempfile::tempdir().unwrap();
        let holder = client(dir.path(), Duration::from_millis(50));
        let waiter = client(dir.path(), Duration::from_millis(50));
        let name = LockName::new("polled \r\n for").unwrap();
        let guard = holder.acquire_with(&name, Duration::ZERO).await.unwrap();
        let waiting = {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move { waiter.acquire_with(&name, Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let token = guard.fencing_token();
        guard.release().await.unwrap();
        let taken = waiting.await.unwrap().expect("taken at a retry");
        assert!(taken.fencing_token() > token);
        taken.release().await.unwrap();
    });
}

//! A wait outlives a backend that is briefly away: transient errors are
//! retried until the deadline, and only errors that retrying cannot fix end
//! a wait at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::testing::{Call, Hook, TestBackend};
use distlock_core::{Error, LockClient, LockName, LockOptions, Result};

/// Fails the first `failures` attempts with what `fail` makes, and every
/// extension with what `fail_extensions` makes, if set.
#[derive(Debug)]
struct Failing {
    failures: usize,
    attempts: AtomicUsize,
    fail: fn() -> Error,
    /// Set: every extension fails with what this makes.
    fail_extensions: Option<fn() -> Error>,
}

impl Failing {
    fn new(failures: usize, fail: fn() -> Error) -> Arc<Self> {
        Arc::new(Self {
            failures,
            attempts: AtomicUsize::new(0),
            fail,
            fail_extensions: None,
        })
    }

    fn failing_extensions(fail: fn() -> Error) -> Arc<Self> {
        Arc::new(Self {
            failures: 0,
            attempts: AtomicUsize::new(0),
            fail,
            fail_extensions: Some(fail),
        })
    }

    fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Hook for Failing {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        match (call, self.fail_extensions) {
            (Call::Acquire(_), _)
                if self.attempts.fetch_add(1, Ordering::SeqCst) < self.failures =>
            {
                Err((self.fail)())
            }
            (Call::Extend(_), Some(fail)) => Err(fail()),
            _ => Ok(()),
        }
    }
}

fn refused() -> Error {
    Error::Backend {
        backend: "failing",
        message: "connection refused".into(),
        source: None,
    }
}

fn denied() -> Error {
    Error::Denied {
        backend: "failing",
        message: "authentication failed".into(),
        source: None,
    }
}

fn client(failing: &Arc<Failing>) -> LockClient {
    let backend = TestBackend::new().with_hook(failing.clone());
    LockClient::new(backend.shared(), LockOptions::default())
}

fn name() -> LockName {
    LockName::new("flaky").unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_wait_outlives_a_backend_that_is_briefly_away() {
    let backend = Failing::new(5, refused);
    let guard = client(&backend)
        .acquire_with(&name(), Duration::from_secs(60))
        .await
        .expect("granted once the backend answers again");
    assert_eq!(backend.attempts(), 6);
    assert!(guard.release().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_deadline_reached_through_errors_is_a_timeout_that_keeps_the_last_error() {
    let backend = Failing::new(usize::MAX, refused);
    let outcome = client(&backend)
        .acquire_with(&name(), Duration::from_secs(2))
        .await;
    match outcome {
        Err(error @ Error::Timeout { .. }) => {
            let Error::Timeout { last_error, .. } = &error else {
                unreachable!()
            };
            assert!(
                matches!(last_error.as_deref(), Some(Error::Backend { .. })),
                "{error:?}"
            );
            // The message is the timeout's own; the cause is its source.
            assert!(!error.to_string().contains("connection refused"), "{error}");
            let source = std::error::Error::source(&error).expect("the last error is the source");
            assert!(
                source.to_string().contains("connection refused"),
                "{source}"
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(backend.attempts() > 1, "it tried again");
}

#[tokio::test(start_paused = true)]
async fn a_zero_timeout_tries_once_even_when_that_fails() {
    let backend = Failing::new(usize::MAX, refused);
    let outcome = client(&backend).acquire_with(&name(), Duration::ZERO).await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    assert_eq!(backend.attempts(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_error_retrying_cannot_fix_ends_the_wait_at_once() {
    let backend = Failing::new(usize::MAX, denied);
    let outcome = client(&backend)
        .acquire_with(&name(), Duration::from_secs(60))
        .await;
    assert!(matches!(outcome, Err(Error::Denied { .. })), "{outcome:?}");
    assert_eq!(backend.attempts(), 1);
    assert!(!outcome.unwrap_err().is_transient());
}

#[tokio::test(start_paused = true)]
async fn try_acquire_reports_the_error_itself() {
    let backend = Failing::new(1, refused);
    let outcome = client(&backend).try_acquire(&name()).await;
    assert!(matches!(outcome, Err(Error::Backend { .. })), "{outcome:?}");
}

#[test]
fn only_errors_worth_retrying_are_transient() {
    assert!(refused().is_transient());
    assert!(!denied().is_transient());
    let name = LockName::new("n").unwrap();
    let lasting = [
        Error::config("lease", "too short"),
        Error::InvalidData {
            what: "lock n".into(),
            field: "fencingToken".into(),
            reason: "not a number".into(),
        },
        distlock_core::Claim::Permit { limit: 2 }
            .conflict(&name, distlock_core::Claim::Permit { limit: 3 }),
        Error::NotFound {
            what: "entity 7".into(),
        },
        Error::Unsupported("shared locks".into()),
    ];
    for error in lasting {
        assert!(!error.is_transient(), "{error}");
    }
}

#[tokio::test]
async fn an_extension_failure_keeps_its_kind() {
    for (fail, transient) in [(denied as fn() -> Error, false), (refused, true)] {
        let backend = Failing::failing_extensions(fail);
        let guard = client(&backend)
            .acquire_with(&name(), Duration::ZERO)
            .await
            .unwrap();
        let error = guard.extend().await.unwrap_err();
        assert_eq!(error.is_transient(), transient, "{error:?}");
        assert!(
            matches!(
                (&error, transient),
                (Error::Denied { .. }, false) | (Error::Backend { .. }, true)
            ),
            "{error:?}"
        );
        drop(guard);
    }
}

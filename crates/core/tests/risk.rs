//! The warning before a loss: a failed extension, or a lease with little
//! left unconfirmed, puts a lock at risk until an extension confirms it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::testing::{Call, Failure, Hook, TestBackend};
use distlock_core::{AcquireOptions, LockClient, LockOptions, LossReason, Result, RiskReason};
use tokio::time::Instant;

/// A 3 s lease: extended every 1 s, given up 2.7 s after its last
/// confirmation, and at risk with less than 0.85 s of that left.
fn options() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(3))
        .build()
        .unwrap()
}

/// Awaits `future`, or fails the test after a minute of the test's clock
/// (virtual under a paused clock), so a warning that never comes fails
/// instead of hanging.
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not come within a minute"))
}

/// Holds back every extension's answer while it is switched on.
#[derive(Debug, Default)]
struct StalledExtensions {
    stall: std::sync::atomic::AtomicBool,
    resume: tokio::sync::Notify,
}

impl StalledExtensions {
    fn stall(&self, on: bool) {
        self.stall.store(on, std::sync::atomic::Ordering::SeqCst);
        if !on {
            self.resume.notify_waiters();
        }
    }
}

#[async_trait]
impl Hook for StalledExtensions {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        if matches!(call, Call::Extend(_) | Call::RenewSession) {
            while self.stall.load(std::sync::atomic::Ordering::SeqCst) {
                let resumed = self.resume.notified();
                if !self.stall.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                resumed.await;
            }
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_extension_warns_and_the_next_confirmation_clears_it() {
    let backend = TestBackend::new();
    let client = LockClient::new(backend.shared(), options());
    let guard = client.acquire("report").await.unwrap();
    assert_eq!(guard.risk(), None);
    backend.fail_next(1, Failure::Transient);
    assert!(guard.extend().await.is_err());
    assert_eq!(
        within("at_risk()", guard.at_risk()).await,
        RiskReason::ExtensionFailed
    );
    assert_eq!(guard.risk(), Some(RiskReason::ExtensionFailed));
    let signal = guard.risk_signal();
    // The keeper retries soon, and its confirmation ends the danger.
    tokio::time::timeout(Duration::from_secs(2), signal.safe_again())
        .await
        .expect("the retry confirmed the lease")
        .unwrap();
    assert_eq!(guard.risk(), None);
    assert!(!guard.is_lost());
    assert!(guard.release().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_extension_warns_of_little_left_before_the_loss() {
    let stalled = Arc::new(StalledExtensions::default());
    let backend = TestBackend::new().with_hook(stalled.clone());
    let options = options();
    let client = LockClient::new(backend.shared(), options.clone());
    let guard = client.acquire("report").await.unwrap();
    stalled.stall(true);
    let reason = within("at_risk()", guard.at_risk()).await;
    let warned_at = Instant::now();
    assert_eq!(reason, RiskReason::LittleLeft);
    let until = guard.valid_until().expect("a lease with a deadline");
    // Warned when less than `at_risk_below` was left, and not before.
    let left = until.saturating_duration_since(warned_at.into_std());
    assert!(left <= options.at_risk_below(), "{left:?} left");
    assert!(!left.is_zero(), "warned only at the loss");
    assert!(!guard.is_lost());
    // The answer comes in time: the lease is confirmed and safe again.
    stalled.stall(false);
    within("safe_again()", guard.risk_signal().safe_again())
        .await
        .unwrap();
    assert!(guard.valid_until().unwrap() > until);
    assert!(guard.release().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_danger_that_is_not_mended_ends_in_the_loss() {
    let stalled = Arc::new(StalledExtensions::default());
    let backend = TestBackend::new().with_hook(stalled.clone());
    let client = LockClient::new(backend.shared(), options());
    let guard = client.acquire("report").await.unwrap();
    stalled.stall(true);
    let signal = guard.risk_signal();
    assert_eq!(
        within("at_risk()", signal.at_risk()).await,
        RiskReason::LittleLeft
    );
    assert_eq!(
        within("safe_again()", signal.safe_again()).await,
        Err(LossReason::Expired)
    );
    assert_eq!(guard.risk(), Some(RiskReason::Lost(LossReason::Expired)));
    stalled.stall(false);
}

#[tokio::test(start_paused = true)]
async fn a_sudden_loss_is_its_own_warning() {
    let backend = TestBackend::new();
    let client = LockClient::new(backend.shared(), options());
    let guard = client.acquire("report").await.unwrap();
    let signal = guard.risk_signal();
    let waiting = tokio::spawn(async move { within("at_risk()", signal.at_risk()).await });
    tokio::task::yield_now().await;
    assert_eq!(backend.lose("report"), 1);
    assert_eq!(
        waiting.await.unwrap(),
        RiskReason::Lost(LossReason::Detected)
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_renewal_puts_every_lock_of_the_session_at_risk() {
    let backend = TestBackend::new().with_session();
    let client = LockClient::new(backend.shared(), options());
    let first = client.acquire("first").await.unwrap();
    let second = client.acquire("second").await.unwrap();
    backend.fail_next(1, Failure::Transient);
    assert!(first.extend().await.is_err());
    assert_eq!(first.risk(), Some(RiskReason::ExtensionFailed));
    assert_eq!(second.risk(), Some(RiskReason::ExtensionFailed));
    within("safe_again()", first.risk_signal().safe_again())
        .await
        .unwrap();
    assert_eq!(second.risk(), None);
    assert!(first.release().await.unwrap());
    assert!(second.release().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn zero_warns_only_of_failed_extensions() {
    let stalled = Arc::new(StalledExtensions::default());
    let backend = TestBackend::new().with_hook(stalled.clone());
    let options = LockOptions::builder()
        .lease(Duration::from_secs(3))
        .at_risk_below(Duration::ZERO)
        .operation_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let client = LockClient::new(backend.shared(), options);
    let guard = client.acquire("report").await.unwrap();
    stalled.stall(true);
    // The extension sent at 1 s times out at 2 s: the first warning,
    // with 0.7 s of the lease left.
    assert_eq!(
        within("at_risk()", guard.at_risk()).await,
        RiskReason::ExtensionFailed
    );
    stalled.stall(false);
    within("safe_again()", guard.risk_signal().safe_again())
        .await
        .unwrap();
    assert!(guard.release().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_set_and_a_leadership_warn_as_their_guards_do() {
    let backend = TestBackend::new();
    let client = LockClient::new(backend.shared(), options());
    let set = client
        .acquire_all(["a", "b"], AcquireOptions::new())
        .await
        .unwrap();
    assert_eq!(set.risk(), None);
    backend.fail_next(1, Failure::Transient);
    assert!(set.guards()[1].extend().await.is_err());
    let (name, reason) = within("at_risk()", set.at_risk()).await;
    assert_eq!((name.as_str(), reason), ("b", RiskReason::ExtensionFailed));
    assert_eq!(set.risk().map(|(name, _)| name.as_str()), Some("b"));
    set.release().await.unwrap();

    let leading = client
        .election("scheduler")
        .unwrap()
        .campaign("here", AcquireOptions::new())
        .await
        .unwrap();
    let health = leading.health(Duration::from_secs(1));
    assert_eq!(leading.risk(), None);
    assert!(health.check().is_ok());
    assert_eq!(backend.lose("scheduler"), 1);
    assert_eq!(
        within("at_risk()", leading.at_risk()).await,
        RiskReason::Lost(LossReason::Detected)
    );
    // Lost, and still held past the tolerance: a stuck leader.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let stale = health.check().unwrap_err();
    assert_eq!(stale.lost, Some(LossReason::Detected));
    // Stepping down makes it healthy: it no longer leads.
    assert!(!leading.resign().await.unwrap());
    assert!(health.check().is_ok());
}

/// On real time: the test blocks the runtime's only thread, as a leader
/// whose threads are all stuck would, so nothing extends its lease.
#[tokio::test(flavor = "current_thread")]
async fn a_leader_whose_runtime_is_stuck_turns_unhealthy() {
    let lease = Duration::from_millis(300);
    let options = LockOptions::builder().lease(lease).build().unwrap();
    let client = LockClient::new(TestBackend::new().shared(), options);
    let leading = client
        .election("scheduler")
        .unwrap()
        .campaign("here", AcquireOptions::new())
        .await
        .unwrap();
    let tolerance = Duration::from_millis(100);
    let health = leading.health(tolerance);
    assert!(health.check().is_ok());
    std::thread::sleep(lease + tolerance);
    let stale = health.check().unwrap_err();
    assert_eq!(stale.lost, None, "nothing ran to see the loss");
    assert!(stale.stale_for > tolerance);
    assert!(!leading.is_lost());
    // Once the runtime runs again, the keeper ends the lease; the
    // instance still holds it, so it stays unhealthy until it steps down.
    assert_eq!(leading.lost().await, LossReason::Expired);
    assert!(health.check().is_err());
    drop(leading);
    assert!(health.check().is_ok());
}

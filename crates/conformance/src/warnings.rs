//! The warning before a loss ([`LockGuard::at_risk`](distlock_core::LockGuard::at_risk))
//! on each backend: a failed or unanswered extension puts a lease at risk
//! until the store confirms it again, and a loss is the last warning. A
//! lock bound to its process (the file backend, PostgreSQL's advisory
//! mode) is kept by no extension, so only its loss puts it at risk.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::testing::{Call, Hook, TestBackend};
use distlock_core::{Error, LockClient, LockGuard, LossReason, Result, RiskReason};
use tokio::sync::Notify;

use crate::fixture::Fixture;
use crate::support::{ADMIN_LIMIT, bounded, unique_name};
use distlock_core::testing::quick_options;

const PATIENCE: Duration = Duration::from_secs(10);

/// Fails or holds back every extension (a session's renewal included)
/// while the case asks; lets every other call through.
#[derive(Debug, Default)]
struct Obstruction {
    fail: AtomicBool,
    stall: AtomicBool,
    resume: Notify,
}

impl Obstruction {
    fn fail(&self, on: bool) {
        self.fail.store(on, Ordering::SeqCst);
    }

    fn stall(&self, on: bool) {
        self.stall.store(on, Ordering::SeqCst);
        if !on {
            self.resume.notify_waiters();
        }
    }
}

#[async_trait]
impl Hook for Obstruction {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        if !matches!(call, Call::Extend(_) | Call::RenewSession) {
            return Ok(());
        }
        loop {
            let resumed = self.resume.notified();
            if !self.stall.load(Ordering::SeqCst) {
                break;
            }
            resumed.await;
        }
        if self.fail.load(Ordering::SeqCst) {
            return Err(Error::Backend {
                backend: "conformance",
                message: "extension failed as the case asked".into(),
                source: None,
            });
        }
        Ok(())
    }
}

/// A client of `fixture` whose extensions `obstruction` controls. Its
/// options warn with 40 % of the lease left, and give each call three
/// quarters of it: an unanswered extension sent a quarter into the lease
/// is at risk halfway through, long before its call times out, and
/// lost at nine tenths.
async fn obstructed_client(fixture: &dyn Fixture, obstruction: &Arc<Obstruction>) -> LockClient {
    let lease = fixture.lease();
    let options = quick_options(lease)
        .operation_timeout(lease * 3 / 4)
        .at_risk_below(lease * 2 / 5)
        .label("conformance")
        .build()
        .expect("valid options");
    let backend = TestBackend::wrapping(fixture.backend().await).with_hook(obstruction.clone());
    LockClient::new(backend.shared(), options)
}

async fn acquired(client: &LockClient, prefix: &str) -> LockGuard {
    client
        .acquire_with(&unique_name(prefix), PATIENCE)
        .await
        .expect("acquire")
}

/// A failed extension puts the lease at risk, and the next confirmed one
/// clears it; the lock stays held throughout.
pub async fn a_failed_extension_puts_the_lock_at_risk_until_confirmed(fixture: &dyn Fixture) {
    let obstruction = Arc::new(Obstruction::default());
    let client = obstructed_client(fixture, &obstruction).await;
    let process_bound = client.backend().capabilities().process_bound;
    let guard = acquired(&client, "risk-failed").await;
    assert_eq!(guard.risk(), None, "a fresh grant is safe");
    obstruction.fail(true);
    assert!(guard.extend().await.is_err(), "the extension was failed");
    if process_bound {
        assert_eq!(
            guard.risk(),
            None,
            "a lock bound to its process is not kept by extensions"
        );
    } else {
        let reason = bounded("at_risk() after a failed extension", guard.at_risk()).await;
        assert_eq!(reason, RiskReason::ExtensionFailed);
    }
    obstruction.fail(false);
    guard
        .extend()
        .await
        .expect("the extension goes through again");
    bounded("safe_again()", guard.risk_signal().safe_again())
        .await
        .expect("confirmed, not lost");
    assert!(
        guard.release().await.expect("release"),
        "still ours after the danger"
    );
}

/// An extension that goes unanswered warns with a share of the lease left,
/// before the lease runs out; its late answer makes it safe again.
pub async fn an_unanswered_extension_warns_before_the_lease_runs_out(fixture: &dyn Fixture) {
    let obstruction = Arc::new(Obstruction::default());
    let client = obstructed_client(fixture, &obstruction).await;
    let process_bound = client.backend().capabilities().process_bound;
    let guard = acquired(&client, "risk-unanswered").await;
    obstruction.stall(true);
    if process_bound {
        // Nothing extends it, so nothing stalls: a lease later it is safe.
        tokio::time::sleep(fixture.lease()).await;
        assert_eq!(guard.risk(), None);
    } else {
        let reason = bounded("at_risk() while the extension stalls", guard.at_risk()).await;
        assert_eq!(reason, RiskReason::LittleLeft, "warned before the loss");
        assert!(!guard.is_lost());
    }
    obstruction.stall(false);
    bounded("safe_again()", guard.risk_signal().safe_again())
        .await
        .expect("the late answer confirmed the lease");
    assert!(guard.release().await.expect("release"), "still ours");
}

/// A loss with no warning before it (a forced release) still resolves
/// `at_risk()`, with the loss.
pub async fn a_loss_is_the_last_warning(fixture: &dyn Fixture) {
    let client = LockClient::new(
        fixture.backend().await,
        crate::support::test_options(fixture.lease()),
    );
    let admin = fixture.backend().await;
    let guard = acquired(&client, "risk-lost").await;
    assert!(
        admin
            .force_release(guard.name(), ADMIN_LIMIT)
            .await
            .expect("force release"),
        "it was held"
    );
    let reason = bounded("at_risk() after a forced release", guard.at_risk()).await;
    assert!(
        matches!(
            reason,
            RiskReason::Lost(LossReason::Refused | LossReason::Detected)
        ),
        "{reason:?}"
    );
    assert!(!guard.release().await.expect("release"));
}

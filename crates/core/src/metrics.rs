//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, with
//! the `metrics` feature: whatever recorder the application installs
//! (Prometheus, StatsD, …) receives them. Without the feature every call
//! here compiles to nothing.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `distlock_acquisitions_total` | counter | `backend`, `kind`, `outcome` | acquisitions by how they ended: `granted`, `refused` (a try found the lock held), `timed_out`, `cancelled`, `failed` |
//! | `distlock_acquire_wait_seconds` | histogram | `backend`, `kind`, `outcome` | how long each acquisition took, waiting included |
//! | `distlock_locks_held` | gauge | `backend`, `kind` | locks this process holds now |
//! | `distlock_hold_seconds` | histogram | `backend`, `kind` | how long each lock was held, until released or lost |
//! | `distlock_losses_total` | counter | `backend`, `kind`, `reason` | locks lost: `refused`, `expired`, `detected`, `keeper_stopped`, `hold_limit`, `server_clock_stepped` |
//! | `distlock_at_risk_total` | counter | `backend`, `kind`, `reason` | held locks put at risk ([`LockGuard::at_risk`](crate::LockGuard::at_risk)): `extension_failed`, `little_left` |
//! | `distlock_local_hand_overs_total` | counter | `backend` | locks passed to another task of the same client in one step |
//! | `distlock_extensions_total` | counter | `backend`, `outcome` | lease extensions: `extended`, `lost`, `failed` (one per lease; a session's renewal counts once) |
//! | `distlock_extension_seconds` | histogram | `backend` | how long each extension call took (a batch is one call) |
//! | `distlock_backend_errors_total` | counter | `backend`, `operation`, `error` | failed backend calls: `error` is `timeout`, `transient`, `denied` or `other` |
//!
//! `backend` is the store's name ([`Backend::store_name`](crate::backend::Backend::store_name)),
//! `kind` the lock's kind (`exclusive`, `shared`, `semaphore`). Lock names
//! are not labels unless a client asks with
//! [`LockOptions::metrics_by_name`](crate::LockOptions::metrics_by_name):
//! the acquisition, hold and loss metrics then carry a `lock` label too. A
//! label per name makes a series per name, so keep that for a small, fixed
//! set of names.

use std::time::Duration;

use crate::claim::LockKind;
use crate::error::Error;
use crate::lost::LossReason;
use crate::name::LockName;
use crate::risk::RiskReason;

/// How an acquisition ended, for `distlock_acquisitions_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Acquired {
    Granted,
    Refused,
    TimedOut,
    Cancelled,
    Failed,
}

impl Acquired {
    /// The outcome of an acquisition that ended with `error`.
    pub(crate) fn of_error(error: &Error) -> Self {
        match error {
            Error::Timeout { .. } => Self::TimedOut,
            Error::Cancelled { .. } => Self::Cancelled,
            _ => Self::Failed,
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn as_str(self) -> &'static str {
        match self {
            Self::Granted => "granted",
            Self::Refused => "refused",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
        }
    }
}

/// How one lease's extension ended, for `distlock_extensions_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Extension {
    Kept,
    Lost,
    Failed,
}

impl Extension {
    /// The outcome an extension call answered.
    pub(crate) fn of(outcome: &crate::error::Result<bool>) -> Self {
        Self::of_outcome(outcome.as_ref().map(|&kept| kept).map_err(|_| ()))
    }

    /// The outcome of an extension that kept its leases, or not, or failed.
    pub(crate) fn of_outcome(outcome: Result<bool, ()>) -> Self {
        match outcome {
            Ok(true) => Self::Kept,
            Ok(false) => Self::Lost,
            Err(()) => Self::Failed,
        }
    }
}

#[cfg(feature = "metrics")]
mod recorded {
    use super::*;

    use metrics::Label;

    /// The labels of a lock's metrics: its store, kind and, when asked
    /// for, name.
    fn lock_labels(backend: &'static str, kind: LockKind, lock: Option<&LockName>) -> Vec<Label> {
        let mut labels = vec![
            Label::from_static_parts("backend", backend),
            Label::from_static_parts("kind", kind.as_str()),
        ];
        if let Some(lock) = lock {
            labels.push(Label::new("lock", lock.as_str().to_owned()));
        }
        labels
    }

    pub(crate) fn acquisition(
        backend: &'static str,
        kind: LockKind,
        lock: Option<&LockName>,
        outcome: Acquired,
        took: Duration,
    ) {
        let mut labels = lock_labels(backend, kind, lock);
        labels.push(Label::from_static_parts("outcome", outcome.as_str()));
        metrics::counter!("distlock_acquisitions_total", labels.clone()).increment(1);
        metrics::histogram!("distlock_acquire_wait_seconds", labels).record(took.as_secs_f64());
    }

    pub(crate) fn hold_began(backend: &'static str, kind: LockKind, lock: Option<&LockName>) {
        metrics::gauge!("distlock_locks_held", lock_labels(backend, kind, lock)).increment(1.0);
    }

    pub(crate) fn hold_ended(
        backend: &'static str,
        kind: LockKind,
        lock: Option<&LockName>,
        reason: LossReason,
        held: Duration,
    ) {
        let mut labels = lock_labels(backend, kind, lock);
        metrics::gauge!("distlock_locks_held", labels.clone()).decrement(1.0);
        metrics::histogram!("distlock_hold_seconds", labels.clone()).record(held.as_secs_f64());
        let reason = match reason {
            LossReason::Released => return,
            LossReason::Refused => "refused",
            LossReason::Expired => "expired",
            LossReason::Detected => "detected",
            LossReason::KeeperStopped => "keeper_stopped",
            LossReason::HoldLimit => "hold_limit",
            LossReason::ServerClockStepped => "server_clock_stepped",
        };
        labels.push(Label::from_static_parts("reason", reason));
        metrics::counter!("distlock_losses_total", labels).increment(1);
    }

    pub(crate) fn at_risk(
        backend: &'static str,
        kind: LockKind,
        lock: Option<&LockName>,
        reason: RiskReason,
    ) {
        let reason = match reason {
            RiskReason::ExtensionFailed => "extension_failed",
            RiskReason::LittleLeft => "little_left",
            // A loss is counted as one, in `distlock_losses_total`.
            RiskReason::Lost(_) => return,
        };
        let mut labels = lock_labels(backend, kind, lock);
        labels.push(Label::from_static_parts("reason", reason));
        metrics::counter!("distlock_at_risk_total", labels).increment(1);
    }

    pub(crate) fn hand_over(backend: &'static str) {
        metrics::counter!("distlock_local_hand_overs_total", "backend" => backend).increment(1);
    }

    pub(crate) fn extension_call(backend: &'static str, took: Duration) {
        metrics::histogram!("distlock_extension_seconds", "backend" => backend)
            .record(took.as_secs_f64());
    }

    pub(crate) fn extension(backend: &'static str, outcome: Extension) {
        let outcome = match outcome {
            Extension::Kept => "extended",
            Extension::Lost => "lost",
            Extension::Failed => "failed",
        };
        metrics::counter!("distlock_extensions_total", "backend" => backend, "outcome" => outcome)
            .increment(1);
    }

    pub(crate) fn backend_error(backend: &'static str, operation: &'static str, error: &Error) {
        let error = match error {
            Error::OperationTimeout { .. } => "timeout",
            Error::Denied { .. } => "denied",
            _ if error.is_transient() => "transient",
            _ => "other",
        };
        metrics::counter!(
            "distlock_backend_errors_total",
            "backend" => backend,
            "operation" => operation,
            "error" => error
        )
        .increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod recorded {
    use super::*;

    pub(crate) fn acquisition(
        _: &'static str,
        _: LockKind,
        _: Option<&LockName>,
        _: Acquired,
        _: Duration,
    ) {
    }
    pub(crate) fn hold_began(_: &'static str, _: LockKind, _: Option<&LockName>) {}
    pub(crate) fn hold_ended(
        _: &'static str,
        _: LockKind,
        _: Option<&LockName>,
        _: LossReason,
        _: Duration,
    ) {
    }
    pub(crate) fn at_risk(_: &'static str, _: LockKind, _: Option<&LockName>, _: RiskReason) {}
    pub(crate) fn hand_over(_: &'static str) {}
    pub(crate) fn extension_call(_: &'static str, _: Duration) {}
    pub(crate) fn extension(_: &'static str, _: Extension) {}
    pub(crate) fn backend_error(_: &'static str, _: &'static str, _: &Error) {}
}

pub(crate) use recorded::*;

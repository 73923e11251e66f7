//! Lease, extension and waiting options, validated once when built.

use std::time::Duration;

use crate::error::{Error, Result};

/// How long a lease lasts, how it is kept alive, and how waiters retry.
///
/// Build one with [`LockOptions::builder`]; every value is checked by
/// [`LockOptionsBuilder::build`], so a `LockOptions` is always consistent.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::LockOptions;
///
/// let options = LockOptions::builder()
///     .lease(Duration::from_secs(9))
///     .build()?;
/// assert_eq!(options.extend_every(), Duration::from_secs(3));
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    lease: Duration,
    extend_every: Duration,
    safety_margin: Duration,
    operation_timeout: Duration,
    backoff_min: Duration,
    backoff_max: Duration,
    local_hand_overs: u32,
    min_local_run: Duration,
    at_risk_below: Duration,
    label: Option<String>,
    metrics_by_name: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::builder()
            .build()
            .expect("the default options are valid")
    }
}

impl LockOptions {
    /// The default lease.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// The longest lease accepted: a year. Longer ones would mean a lock
    /// that a crashed holder keeps for good; backends may allow less
    /// (memcached: 30 days).
    pub const MAX_LEASE: Duration = Duration::from_secs(365 * 86_400);
    /// The default shortest wait between attempts on a held lock.
    pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(5);
    /// The default longest wait between attempts on a held lock.
    pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_millis(500);
    /// The default bound on hand-overs in a row between tasks of a client.
    pub const DEFAULT_LOCAL_HAND_OVERS: u32 = 4;
    /// The default shortest run of local hand-overs.
    pub const DEFAULT_MIN_LOCAL_RUN: Duration = Duration::from_millis(2);
    /// How long an attempt made at a wait's deadline may take to answer
    /// before the wait gives up on it (see
    /// [`operation_timeout`](Self::operation_timeout)).
    pub const FINAL_ATTEMPT: Duration = Duration::from_millis(100);

    /// A builder with every option at its default.
    pub fn builder() -> LockOptionsBuilder {
        LockOptionsBuilder::default()
    }

    /// How long a grant or an extension lasts on the server.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// How often a held lease is extended in the background.
    pub fn extend_every(&self) -> Duration {
        self.extend_every
    }

    /// How long before the server-side expiry the holder gives up the lease
    /// when no extension has succeeded, to allow for clock rate drift and
    /// scheduling delay.
    pub fn safety_margin(&self) -> Duration {
        self.safety_margin
    }

    /// The longest any single backend call may take.
    ///
    /// This is the one timeout rule: every call a client makes to its
    /// backend ends within it, and a wait ends at its deadline. Two
    /// refinements keep a wait's answer meaningful: its first attempt
    /// always gets the whole operation timeout (so a zero timeout still
    /// tries once), and an attempt made at the deadline gets
    /// [`FINAL_ATTEMPT`](Self::FINAL_ATTEMPT) (or the operation timeout, if
    /// shorter) to answer. An attempt cut short goes on in the background,
    /// within the operation timeout, and releases what it was granted.
    /// Backends are handed the same timeout with every call, and those that
    /// bound their own I/O use it, so there is no second timeout to tune.
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// The operation timeout used unless one is set: a third of `lease`,
    /// at most 10 s.
    pub fn default_operation_timeout(lease: Duration) -> Duration {
        (lease / 3).min(Duration::from_secs(10))
    }

    /// The range, shortest then longest, of jittered waits between attempts
    /// on a held lock.
    pub fn backoff(&self) -> (Duration, Duration) {
        (self.backoff_min, self.backoff_max)
    }

    /// How many times in a row a lock may pass straight from one task of a
    /// client to the next one waiting for it, on backends that can hand a
    /// lock over in one step. After that many, the lock is released to
    /// everyone, and the client's next waiter lets other processes try
    /// first; unless the run is shorter than
    /// [`min_local_run`](Self::min_local_run). Zero always releases.
    pub fn local_hand_overs(&self) -> u32 {
        self.local_hand_overs
    }

    /// How long a run of local hand-overs goes on, even past
    /// [`local_hand_overs`](Self::local_hand_overs), before the lock is
    /// released to other processes. A lock that is held only for
    /// microseconds at a time would otherwise spend most of its time
    /// passing between processes, which takes a round trip or a poll each
    /// time; a run of this length keeps that share small. A run ends only
    /// when both bounds are reached, so other processes wait at most the
    /// longer of the two.
    pub fn min_local_run(&self) -> Duration {
        self.min_local_run
    }

    /// How little of a lease may be left unconfirmed before it is at risk
    /// ([`RiskReason::LittleLeft`](crate::RiskReason::LittleLeft)): the
    /// time from now until [`LockGuard::valid_until`](crate::LockGuard::valid_until).
    /// Zero warns only of failed extensions.
    ///
    /// By default it is half of what is left when an extension is sent on
    /// time (the lease, less the safety margin and the extension cadence),
    /// so an extension that answers within that half never raises it: with
    /// the default 30 s lease, 8.5 s, which an extension reaches 8.5 s after
    /// it was sent, before its 10 s operation timeout.
    pub fn at_risk_below(&self) -> Duration {
        self.at_risk_below
    }

    /// Whether metrics (feature `metrics`) carry the lock's name as a
    /// `lock` label. Off by default: every name becomes a series of its
    /// own, so turn it on only for a small, fixed set of names.
    pub fn metrics_by_name(&self) -> bool {
        self.metrics_by_name
    }

    /// A free-form label recorded with the holder, for `distlock list`.
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }
}

impl From<&LockOptions> for LockOptionsBuilder {
    /// A builder with every option set as in `options`.
    fn from(options: &LockOptions) -> Self {
        Self {
            lease: Some(options.lease),
            extend_every: Some(options.extend_every),
            safety_margin: Some(options.safety_margin),
            operation_timeout: Some(options.operation_timeout),
            backoff: Some((options.backoff_min, options.backoff_max)),
            local_hand_overs: Some(options.local_hand_overs),
            min_local_run: Some(options.min_local_run),
            at_risk_below: Some(options.at_risk_below),
            label: options.label.clone(),
            metrics_by_name: options.metrics_by_name,
        }
    }
}

/// Builds [`LockOptions`]; see there for what each option means.
#[derive(Debug, Clone, Default)]
pub struct LockOptionsBuilder {
    lease: Option<Duration>,
    extend_every: Option<Duration>,
    safety_margin: Option<Duration>,
    operation_timeout: Option<Duration>,
    backoff: Option<(Duration, Duration)>,
    local_hand_overs: Option<u32>,
    min_local_run: Option<Duration>,
    at_risk_below: Option<Duration>,
    label: Option<String>,
    metrics_by_name: bool,
}

impl LockOptionsBuilder {
    /// The lease (default 30 s, at most [`LockOptions::MAX_LEASE`]).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// The extension cadence (default a third of the lease).
    pub fn extend_every(mut self, every: Duration) -> Self {
        self.extend_every = Some(every);
        self
    }

    /// The safety margin (default a tenth of the lease).
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// The timeout of one backend call (default a third of the lease, at
    /// most 10 s).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = Some(timeout);
        self
    }

    /// The range of waits between attempts on a held lock (default 5 ms to
    /// 500 ms). Waits grow exponentially within it, with full jitter.
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff = Some((min, max));
        self
    }

    /// The bound on local hand-overs in a row (default 4; zero turns them
    /// off). A hand-over costs one server command where a release and a new
    /// grant cost two, and the lock is never free in between; the bound
    /// keeps one busy process from starving the others.
    pub fn local_hand_overs(mut self, bound: u32) -> Self {
        self.local_hand_overs = Some(bound);
        self
    }

    /// The shortest run of local hand-overs (default 2 ms; zero makes
    /// [`local_hand_overs`](Self::local_hand_overs) the only bound). It must
    /// be shorter than the lease.
    pub fn min_local_run(mut self, run: Duration) -> Self {
        self.min_local_run = Some(run);
        self
    }

    /// How little of a lease may be left unconfirmed before it is at risk
    /// (default half of what is left when an extension is sent on time;
    /// zero: only failed extensions). It must be shorter than the lease
    /// less the safety margin and the extension cadence, or every lease
    /// would be at risk before its extension was even sent; see
    /// [`LockOptions::at_risk_below`].
    pub fn at_risk_below(mut self, left: Duration) -> Self {
        self.at_risk_below = Some(left);
        self
    }

    /// A label recorded with the holder.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Labels metrics with the lock's name (default off); see
    /// [`LockOptions::metrics_by_name`].
    pub fn metrics_by_name(mut self, on: bool) -> Self {
        self.metrics_by_name = on;
        self
    }

    /// Checks the options and fills in the defaults.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first option that is out of range
    /// and saying why.
    pub fn build(self) -> Result<LockOptions> {
        let lease = self.lease.unwrap_or(LockOptions::DEFAULT_LEASE);
        if lease < Duration::from_millis(10) {
            return Err(Error::config(
                "lease",
                format!("{lease:?} is too short; use at least 10ms"),
            ));
        }
        if lease > LockOptions::MAX_LEASE {
            return Err(Error::config(
                "lease",
                format!("{lease:?} is too long; use at most 365 days"),
            ));
        }
        let extend_every = self.extend_every.unwrap_or(lease / 3);
        if extend_every.is_zero() || extend_every >= lease {
            return Err(Error::config(
                "extend_every",
                format!(
                    "{extend_every:?} must be above zero and shorter than the lease ({lease:?})"
                ),
            ));
        }
        let safety_margin = self.safety_margin.unwrap_or(lease / 10);
        if safety_margin
            .checked_add(extend_every)
            .is_none_or(|before_extension| before_extension >= lease)
        {
            return Err(Error::config(
                "safety_margin",
                format!(
                    "{safety_margin:?} plus the extension cadence ({extend_every:?}) must be shorter \
                     than the lease ({lease:?}), or the lease would be given up before it is extended"
                ),
            ));
        }
        let operation_timeout = self
            .operation_timeout
            .unwrap_or_else(|| LockOptions::default_operation_timeout(lease));
        if operation_timeout.is_zero() || operation_timeout >= lease {
            return Err(Error::config(
                "operation_timeout",
                format!(
                    "{operation_timeout:?} must be above zero and shorter than the lease ({lease:?})"
                ),
            ));
        }
        let (backoff_min, backoff_max) = self.backoff.unwrap_or((
            LockOptions::DEFAULT_BACKOFF_MIN,
            LockOptions::DEFAULT_BACKOFF_MAX,
        ));
        if backoff_min.is_zero() || backoff_min > backoff_max {
            return Err(Error::config(
                "backoff",
                format!(
                    "the range {backoff_min:?}..{backoff_max:?} must start above zero and not end before it starts"
                ),
            ));
        }
        let min_local_run = self
            .min_local_run
            .unwrap_or(LockOptions::DEFAULT_MIN_LOCAL_RUN);
        if min_local_run >= lease {
            return Err(Error::config(
                "min_local_run",
                format!(
                    "{min_local_run:?} must be shorter than the lease ({lease:?}), or one process \
                     could keep the lock for longer than a lease while others wait"
                ),
            ));
        }
        // The validation above leaves some of the lease when an extension
        // is sent on time.
        let left_at_extension = lease - safety_margin - extend_every;
        let at_risk_below = self.at_risk_below.unwrap_or(left_at_extension / 2);
        if at_risk_below >= left_at_extension {
            return Err(Error::config(
                "at_risk_below",
                format!(
                    "{at_risk_below:?} must be shorter than what is left of the lease when its \
                     extension is sent on time ({left_at_extension:?}: the lease less the safety \
                     margin and the extension cadence), or every lease would be at risk before \
                     its extension was sent; leave it unset for half of that"
                ),
            ));
        }
        Ok(LockOptions {
            lease,
            extend_every,
            safety_margin,
            operation_timeout,
            backoff_min,
            backoff_max,
            local_hand_overs: self
                .local_hand_overs
                .unwrap_or(LockOptions::DEFAULT_LOCAL_HAND_OVERS),
            min_local_run,
            at_risk_below,
            label: self.label,
            metrics_by_name: self.metrics_by_name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_lease() {
        let options = LockOptions::default();
        assert_eq!(options.lease(), Duration::from_secs(30));
        assert_eq!(options.extend_every(), Duration::from_secs(10));
        assert_eq!(options.safety_margin(), Duration::from_secs(3));
        assert_eq!(options.operation_timeout(), Duration::from_secs(10));
        assert_eq!(options.at_risk_below(), Duration::from_millis(8_500));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                LockOptions::builder().lease(Duration::from_millis(1)),
                "lease",
            ),
            (
                LockOptions::builder().extend_every(Duration::from_secs(30)),
                "extend_every",
            ),
            (
                LockOptions::builder().safety_margin(Duration::from_secs(25)),
                "safety_margin",
            ),
            (
                LockOptions::builder().safety_margin(Duration::MAX),
                "safety_margin",
            ),
            (LockOptions::builder().lease(Duration::MAX), "lease"),
            (
                LockOptions::builder().lease(LockOptions::MAX_LEASE + Duration::from_secs(1)),
                "lease",
            ),
            (
                LockOptions::builder().operation_timeout(Duration::ZERO),
                "operation_timeout",
            ),
            (
                LockOptions::builder().backoff(Duration::from_secs(2), Duration::from_secs(1)),
                "backoff",
            ),
            (
                LockOptions::builder().min_local_run(Duration::from_secs(30)),
                "min_local_run",
            ),
            (
                LockOptions::builder().at_risk_below(Duration::from_secs(17)),
                "at_risk_below",
            ),
        ];
        for (builder, field) in cases {
            match builder.build() {
                Err(Error::InvalidConfig { field: got, .. }) => assert_eq!(got, field),
                other => panic!("expected an error for {field}, got {other:?}"),
            }
        }
    }
}

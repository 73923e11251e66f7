//! Building a [`LockClient`](crate::LockClient): its options, then its
//! backend. The client's module makes the client from them.

use std::time::Duration;

use crate::error::Result;
use crate::options::{LockOptions, LockOptionsBuilder};

/// Builds a [`LockClient`](crate::LockClient): set the options that differ from the defaults,
/// then hand it the backend. Every option is checked once, by
/// [`build`](Self::build); see [`LockOptions`] for what each one means.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::{LockClient, MemoryBackend};
///
/// let client = LockClient::builder()
///     .lease(Duration::from_secs(10))
///     .label("nightly-jobs")
///     .build(MemoryBackend::new())?;
/// assert_eq!(client.options().extend_every(), Duration::from_secs(10) / 3);
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct LockClientBuilder {
    options: LockOptionsBuilder,
}

/// Forwards one setter to the options' builder.
macro_rules! forward {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*)) => {
        $(#[$doc])*
        pub fn $name(mut self, $($arg: $ty),*) -> Self {
            self.options = self.options.$name($($arg),*);
            self
        }
    };
}

impl LockClientBuilder {
    forward!(
        /// How long a grant or an extension lasts on the server (default
        /// 30 s); see [`LockOptions::lease`].
        lease(lease: Duration)
    );
    forward!(
        /// How often held leases are extended (default a third of the
        /// lease); see [`LockOptions::extend_every`].
        extend_every(every: Duration)
    );
    forward!(
        /// How long before the server-side expiry a holder gives up a lease
        /// it could not extend (default a tenth of the lease); see
        /// [`LockOptions::safety_margin`].
        safety_margin(margin: Duration)
    );
    forward!(
        /// The longest any single backend call may take (default a third
        /// of the lease, at most 10 s); see
        /// [`LockOptions::operation_timeout`].
        operation_timeout(timeout: Duration)
    );
    forward!(
        /// The range of jittered waits between attempts on a held lock
        /// (default 5 ms to 500 ms); see [`LockOptions::backoff`].
        backoff(min: Duration, max: Duration)
    );
    forward!(
        /// The bound on local hand-overs in a row (default 4); see
        /// [`LockOptions::local_hand_overs`].
        local_hand_overs(bound: u32)
    );
    forward!(
        /// The shortest run of local hand-overs (default 2 ms); see
        /// [`LockOptions::min_local_run`].
        min_local_run(run: Duration)
    );
    forward!(
        /// How little of a lease may be left unconfirmed before it is at
        /// risk (default half of what is left when an extension is sent on
        /// time); see [`LockOptions::at_risk_below`].
        at_risk_below(left: Duration)
    );

    forward!(
        /// Labels metrics with the lock's name (default off); see
        /// [`LockOptions::metrics_by_name`].
        metrics_by_name(on: bool)
    );

    /// A label recorded with every holder of this client, shown by
    /// `distlock list`.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.options = self.options.label(label);
        self
    }

    /// Starts from `options` (every option set, none left to defaults).
    pub fn options(mut self, options: &LockOptions) -> Self {
        self.options = LockOptionsBuilder::from(options);
        self
    }

    /// The options as they stand, checked.
    ///
    /// # Errors
    /// As [`build`](Self::build).
    pub fn build_options(self) -> Result<LockOptions> {
        self.options.build()
    }
}

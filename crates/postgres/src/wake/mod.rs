//! Release wake-ups: each backend keeps one connection that `LISTEN`s on
//! the channels of the names its waiters wait for, and wakes them when a
//! release is announced there.
//!
//! A release announces itself in its own statement (see
//! [`channel`]). The listening connection is trusted only once a probe,
//! sent the way releases are sent, came back over it; until then, and
//! while it is being re-opened after a failure, waiters poll.

mod calls;
mod channel;
mod inbox;
mod index;
mod session;
mod state;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::LockName;
use distlock_core::backend::{LeaseId, ReleaseHub, ReleaseWatch};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::pool::Connections;
use crate::tls::Endpoint;

pub(crate) use self::calls::{Calls, CallsSeen};
pub(crate) use self::channel::{Channels, NameHash};
use self::inbox::MAX_QUEUED;
use self::index::Watched;
use self::session::{Ended, Target};
use self::state::Shared;
pub use self::state::{WakeUpQueue, WakeUps};

/// How long a waiter waits before it tries again, at most, while the
/// listening connection is being re-opened: releases then go unheard.
pub(crate) const POLL_WHILE_RECONNECTING: Duration = Duration::from_secs(1);

/// After this many probes that never came back over a connection that
/// otherwise worked, and none ever did, the backend stops listening.
const UNHEARD_PROBES: u32 = 3;

/// The first pause before re-opening a failed listening connection, and
/// the longest, between which it doubles.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// The backend's handle on its listening task, which it stops when dropped.
#[derive(Debug)]
pub(crate) struct Listener {
    shared: Arc<Shared>,
    task: AbortHandle,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Starts listening at `endpoint`, probing through `connections`.
    /// Returns at once; the connection opens in the background.
    pub(crate) fn start(endpoint: Endpoint, connections: Connections, channels: Channels) -> Self {
        let shared = Arc::new(Shared {
            watched: Watched::default(),
            state: watch::Sender::new(WakeUps::Starting),
            gauges: Arc::default(),
        });
        let target = Target {
            endpoint,
            connections,
            channels,
        };
        let task = tokio::spawn(supervise(shared.clone(), target)).abort_handle();
        Self { shared, task }
    }

    pub(crate) fn state(&self) -> WakeUps {
        self.shared.state()
    }

    /// The state once it settles (notifications shown to arrive, or shown
    /// not to), or as it is after `within`.
    pub(crate) async fn settled_state(&self, within: Duration) -> WakeUps {
        let mut state = self.shared.state.subscribe();
        let settled =
            state.wait_for(|state| matches!(state, WakeUps::Listening | WakeUps::Unavailable));
        match tokio::time::timeout(within, settled).await {
            Ok(Ok(state)) => *state,
            _ => self.state(),
        }
    }

    /// A watch on `name`'s releases, while they are heard; `None`
    /// otherwise, and the waiter polls.
    pub(crate) fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        (self.state() == WakeUps::Listening).then(|| self.shared.watched.watch(name))
    }

    /// Fair mode's record of which waiters' places releases granted.
    pub(crate) fn calls(&self) -> &Calls {
        self.shared.watched.calls()
    }

    /// What wakes this backend's waiters of a name from within the
    /// process, without a release announced by the server (a wait the
    /// server itself ended, in advisory mode's fair mode).
    pub(crate) fn hub(&self) -> ReleaseHub {
        self.shared.watched.hub().clone()
    }

    pub(crate) fn queue(&self) -> WakeUpQueue {
        WakeUpQueue {
            limit: MAX_QUEUED,
            most_queued: self.shared.gauges.most_queued(),
            overflows: self.shared.gauges.overflows(),
        }
    }
}

/// Keeps a listening connection open, re-opening it with backoff when it
/// fails, until the backend is dropped or notifications prove not to
/// arrive at all.
async fn supervise(shared: Arc<Shared>, target: Target) {
    let mut retry = FIRST_RETRY;
    let mut unheard = 0;
    let mut ever_heard = false;
    let mut reported = false;
    loop {
        match session::run(&shared, &target).await {
            Ended::Failed { why, heard: true } => {
                let why = target.hide_credentials(&why);
                ever_heard = true;
                retry = FIRST_RETRY;
                reported = true;
                tracing::warn!(
                    %why,
                    "release wake-ups stopped: the listening connection failed; \
                     waits poll until it is open again"
                );
                shared.set(WakeUps::Reconnecting);
                // Releases since the connection failed went unheard: every
                // waiter tries once more, and then polls until it is back
                // (see `POLL_WHILE_RECONNECTING`).
                shared.watched.wake_all();
            }
            Ended::Failed { why, heard: false } => {
                let why = target.hide_credentials(&why);
                if reported {
                    tracing::debug!(%why, "the listening connection could not be opened");
                } else {
                    reported = true;
                    tracing::warn!(
                        %why,
                        "the listening connection for release wake-ups could not be opened; \
                         waits poll while it is tried again"
                    );
                }
            }
            Ended::Unheard => {
                unheard += 1;
                if !ever_heard && unheard >= UNHEARD_PROBES {
                    shared.set(WakeUps::Unavailable);
                    tracing::warn!(
                        "release wake-ups are off: notifications sent through the pool never \
                         arrived over the listening connection (PgBouncer in transaction mode \
                         loses them); waits poll. Set listen_url to a direct connection to the \
                         same server and database to have them"
                    );
                    return;
                }
                tracing::debug!("a probe never arrived over the listening connection");
            }
        }
        tokio::time::sleep(jittered(retry)).await;
        retry = (retry * 2).min(MAX_RETRY);
    }
}

/// `pause` less up to a quarter, so that processes that lost their
/// connections together do not come back together.
pub(crate) fn jittered(pause: Duration) -> Duration {
    let quarter = u64::try_from(pause.as_micros() / 4).unwrap_or(u64::MAX);
    let cut =
        u64::try_from(LeaseId::random().as_u128() % u128::from(quarter.max(1))).unwrap_or_default();
    pause.saturating_sub(Duration::from_micros(cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_only_shortens_and_by_a_quarter_at_most() {
        for _ in 0..1000 {
            let pause = jittered(Duration::from_secs(4));
            assert!(pause <= Duration::from_secs(4) && pause >= Duration::from_secs(3));
        }
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }

    #[tokio::test]
    async fn logged_reasons_never_show_the_user_or_password() {
        let config = crate::PostgresConfig::parse("postgres://alice:s3cret@db/app").unwrap();
        let (endpoint, listen) = config.endpoints().unwrap();
        let table = crate::table::TableName::new("public", "t").unwrap();
        let target = Target {
            connections: Connections::new(endpoint).unwrap(),
            endpoint: listen,
            channels: Channels::new(&table),
        };
        assert_eq!(
            target.hide_credentials("password authentication failed for user \"alice\" (s3cret)"),
            "password authentication failed for user \"***\" (***)"
        );
    }
}

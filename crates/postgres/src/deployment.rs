//! What `distlock check` says of a PostgreSQL deployment: whether
//! LISTEN/NOTIFY reaches the backend, and whether a pooler sits between.

use std::time::Duration;

use distlock_core::backend::Feature;

use crate::wake::{Listener, WakeUps};

/// How long the check waits at most for the listening connection to show
/// whether notifications arrive: a few probes, each a round trip or a
/// timeout.
const SETTLE: Duration = Duration::from_secs(10);

/// Whether releases reach this backend's waiters as notifications, told
/// within `left`: the check waits half of it at most, so that its answer
/// comes back within the call's limit.
pub(crate) async fn notify(listener: &Listener, left: Duration) -> Feature {
    const NAME: &str = "notify";
    let settle = SETTLE.min(left / 2);
    match listener.settled_state(settle).await {
        WakeUps::Listening => Feature::present(
            NAME,
            "LISTEN/NOTIFY works: a release wakes waiters in every process at once",
        ),
        WakeUps::Unavailable => Feature::degraded(
            NAME,
            "notifications never came back over the listening connection, so a transaction \
             pooler (PgBouncer in transaction mode) likely sits in between, or listen_url \
             names another server or database: waiters poll; give ?listen_url= a direct \
             connection to the same database",
        ),
        WakeUps::Starting | WakeUps::Reconnecting => Feature::degraded(
            NAME,
            format!(
                "the listening connection did not show within {settle:?} that notifications \
                 arrive: waiters poll until it does"
            ),
        ),
    }
}

/// Advisory mode refuses a transaction pooler when it opens, so by now it
/// is known to reach the server itself.
pub(crate) fn no_pooler() -> Feature {
    Feature::present(
        "pooler",
        "no transaction pooler in between (checked when the backend opened): session \
         advisory locks stay on their connection",
    )
}

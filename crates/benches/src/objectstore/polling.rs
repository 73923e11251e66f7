//! What a waiter costs while a lock is held: an object store tells nobody
//! of a release, so a waiter polls, one `GET` per try, at the pace of
//! core's jittered backoff. One client holds a lock with the defaults
//! (its keeper extends it every third of the 30 s lease) while another
//! waits for it with the defaults; each client's requests are counted
//! apart, over a window that opens once the waiter's backoff has grown to
//! its ceiling.

use std::time::Duration;

use distlock::{AcquireOptions, LockClient, LockOptions};

use crate::commands::Counts;
use crate::names::bench_name;
use crate::outcome::Outcome;

/// How long the waiter waits before the window opens: its first tries
/// come quickly (the backoff starts at 5 ms and doubles), and are what
/// each wait pays once, not what it pays while it lasts.
pub(crate) const WARM_UP: Duration = Duration::from_secs(3);

/// What one waiter and one holder sent while the lock was held.
#[derive(Debug, Clone)]
pub(crate) struct Polling {
    /// How long the requests were counted.
    pub(crate) window: Duration,
    /// The waiter's requests over the window.
    pub(crate) waiter: Counts,
    /// The holder's requests over the window: its extensions.
    pub(crate) holder: Counts,
}

impl Polling {
    /// The waiter's requests per second.
    pub(crate) fn waiter_per_second(&self) -> f64 {
        self.waiter.total() as f64 / self.window.as_secs_f64()
    }

    /// The holder's requests per hour, at the rate of the window.
    pub(crate) fn holder_per_hour(&self) -> f64 {
        self.holder.total() as f64 / self.window.as_secs_f64() * 3600.0
    }

    /// The waiter's requests per hour, at the rate of the window.
    pub(crate) fn waiter_per_hour(&self) -> f64 {
        self.waiter_per_second() * 3600.0
    }
}

/// Holds a lock on `url` and waits for it from a second client for
/// `window` after [`WARM_UP`], counting each client's requests.
pub(crate) async fn measure(url: &str, window: Duration) -> Outcome<Polling> {
    let (holding, held) = super::open(url).await?;
    let (waiting, waited) = super::open(url).await?;
    let name = bench_name("polling");
    let holder = LockClient::new(holding, LockOptions::default());
    let guard = holder
        .try_acquire(&name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("a fresh name was held")?;
    let waiter = LockClient::new(waiting, LockOptions::default());
    let wait = {
        let name = name.clone();
        let timeout = WARM_UP + window + Duration::from_secs(10);
        tokio::spawn(async move {
            waiter
                .acquire_with(&name, AcquireOptions::new().timeout(timeout))
                .await
        })
    };
    tokio::time::sleep(WARM_UP).await;
    let (waiter_before, holder_before) = (waited.requests.snapshot(), held.requests.snapshot());
    tokio::time::sleep(window).await;
    let (waiter_after, holder_after) = (waited.requests.snapshot(), held.requests.snapshot());
    wait.abort();
    let waited_out = wait.await;
    guard.release().await.map_err(|e| e.to_string())?;
    if let Ok(Ok(_)) = waited_out {
        return Err("the waiter was granted a lock that was held".into());
    }
    Ok(Polling {
        window,
        waiter: waiter_after.since(&waiter_before),
        holder: holder_after.since(&holder_before),
    })
}

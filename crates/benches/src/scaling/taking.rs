//! Taking many distinct names through one client, a fixed number of calls
//! in flight: the way the names and held-locks curves take their locks.

use std::time::{Duration, Instant};

use distlock::{LockClient, LockGuard, LockName};
use futures::StreamExt;

use crate::outcome::Outcome;

/// How many acquisitions and releases are kept in flight while many names
/// are taken and given back: enough to keep a server busy, few enough that
/// the client's own queueing does not dominate.
pub(crate) const IN_FLIGHT: usize = 64;

/// The `i`th of the names under `prefix`.
pub(crate) fn nth_name(prefix: &LockName, i: usize) -> Outcome<LockName> {
    LockName::new(format!("{}-{i}", prefix.as_str())).map_err(|e| e.to_string())
}

/// Takes `count` fresh names under `prefix` once each, [`IN_FLIGHT`] at a
/// time, and returns their guards; a name already held is an error, as
/// every name is new, and so is not having taken them all `within` (no
/// acquisition starts after it). On an error the locks taken are given
/// back before it returns, so that their releases do not run on into the
/// next measurement.
pub(crate) async fn take_all(
    client: &LockClient,
    prefix: &LockName,
    count: usize,
    within: Duration,
) -> Outcome<Vec<LockGuard>> {
    let deadline = Instant::now() + within;
    let taken = futures::stream::iter(0..count)
        .take_while(|_| std::future::ready(Instant::now() < deadline))
        .map(|i| take_fresh(client, prefix, i))
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<Outcome<_>>>()
        .await;
    let mut guards = Vec::with_capacity(taken.len());
    let mut first_error = None;
    for outcome in taken {
        match outcome {
            Ok(guard) => guards.push(guard),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    if first_error.is_none() && guards.len() < count {
        first_error = Some(format!(
            "{} of {count} taken in {}, when the point stopped taking",
            guards.len(),
            humantime::format_duration(within)
        ));
    }
    match first_error {
        None => Ok(guards),
        Some(error) => {
            release_all(guards).await;
            Err(error)
        }
    }
}

/// Takes each of `count` fresh names under `prefix` and gives it back at
/// once, [`IN_FLIGHT`] names at a time: one cycle per name.
pub(crate) async fn cycle_all(client: &LockClient, prefix: &LockName, count: usize) -> Outcome<()> {
    futures::stream::iter(0..count)
        .map(|i| async move {
            let guard = take_fresh(client, prefix, i).await?;
            guard.release().await.map(drop).map_err(|e| e.to_string())
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<Outcome<()>>>()
        .await
        .into_iter()
        .collect()
}

/// Gives back every guard, [`IN_FLIGHT`] at a time; a failed release is
/// left to the lease's expiry.
pub(crate) async fn release_all(guards: Vec<LockGuard>) {
    futures::stream::iter(guards)
        .map(|guard| async move {
            let _ = guard.release().await;
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
}

async fn take_fresh(client: &LockClient, prefix: &LockName, i: usize) -> Outcome<LockGuard> {
    let name = nth_name(prefix, i)?;
    client
        .try_acquire(&name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("a fresh lock was held: {}", name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn client() -> LockClient {
        distlock::connect("memory://").await.unwrap()
    }

    #[tokio::test]
    async fn every_name_is_taken_within_time() {
        let client = client().await;
        let prefix = LockName::new("taking-all").unwrap();
        let guards = take_all(&client, &prefix, 100, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(guards.len(), 100);
        release_all(guards).await;
    }

    /// Past the time allowed no acquisition starts: the point is an error
    /// that says how far it got, and leaves no name held.
    #[tokio::test]
    async fn a_point_past_its_time_says_how_far_it_got_and_gives_back() {
        let client = client().await;
        let prefix = LockName::new("taking-late").unwrap();
        let error = take_all(&client, &prefix, 100, Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(error, "0 of 100 taken in 0s, when the point stopped taking");
        let again = take_all(&client, &prefix, 100, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(again.len(), 100);
        release_all(again).await;
    }
}

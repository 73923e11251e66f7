//! Release wake-ups: backends that learn of releases wake the waiters of
//! this process through a [`ReleaseHub`], so waiters need not sleep.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use tokio::sync::{Notify, watch};

use crate::name::LockName;
use crate::sync::{Mutex, MutexGuard};

/// The names this process waits for, each with a counter that a backend
/// bumps when it sees that name released.
///
/// A backend keeps one hub, hands out [`ReleaseWatch`]es from
/// its [`Wakeups::watch`](crate::backend::Wakeups::watch), and calls
/// [`notify`](Self::notify) for each release it observes. Backends that
/// subscribe to the server per name (a change stream filtered to the names
/// waited for) read [`watched`](Self::watched) whenever
/// [`changed`](Self::changed) fires.
#[derive(Debug, Clone, Default)]
pub struct ReleaseHub {
    inner: Arc<HubInner>,
}

#[derive(Debug, Default)]
struct HubInner {
    names: Mutex<HashMap<LockName, Watched>>,
    changed: Notify,
}

#[derive(Debug)]
struct Watched {
    releases: watch::Sender<u64>,
    watchers: usize,
}

impl ReleaseHub {
    /// A hub with no watched names.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts watching `name`; releases reported after this call wake the
    /// returned watch.
    pub fn watch(&self, name: &LockName) -> ReleaseWatch {
        let mut names = self.lock();
        let is_new = !names.contains_key(name);
        let watched = names.entry(name.clone()).or_insert_with(|| Watched {
            releases: watch::channel(0).0,
            watchers: 0,
        });
        watched.watchers += 1;
        let mut releases = watched.releases.subscribe();
        releases.mark_unchanged();
        drop(names);
        if is_new {
            self.inner.changed.notify_one();
        }
        ReleaseWatch {
            hub: self.clone(),
            name: name.clone(),
            releases,
        }
    }

    /// Reports that `name` was released.
    pub fn notify(&self, name: &LockName) {
        if let Some(watched) = self.lock().get(name) {
            watched.releases.send_modify(|count| *count += 1);
        }
    }

    /// Reports a release of every watched name, for when the backend may
    /// have missed events (a reconnect).
    pub fn notify_all(&self) {
        for watched in self.lock().values() {
            watched.releases.send_modify(|count| *count += 1);
        }
    }

    /// The names watched now.
    pub fn watched(&self) -> Vec<LockName> {
        self.lock().keys().cloned().collect()
    }

    /// Resolves after the set of watched names gained a name.
    pub async fn changed(&self) {
        self.inner.changed.notified().await;
    }

    fn unwatch(&self, name: &LockName) {
        let mut names = self.lock();
        if let Some(watched) = names.get_mut(name) {
            watched.watchers -= 1;
            if watched.watchers == 0 {
                names.remove(name);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<LockName, Watched>> {
        self.inner
            .names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A registration to hear of releases of one name; dropping it stops
/// watching.
#[derive(Debug)]
pub struct ReleaseWatch {
    hub: ReleaseHub,
    name: LockName,
    releases: watch::Receiver<u64>,
}

impl ReleaseWatch {
    /// Resolves at the first release reported since the last call (or since
    /// the watch began), at once if one already was.
    ///
    /// # Cancel safety
    /// Cancel safe: a release seen by a cancelled call is still reported to
    /// the next call.
    pub async fn released(&mut self) {
        if self.releases.changed().await.is_err() {
            // The hub dropped this name, which cannot happen while we watch
            // it; never resolve rather than spin.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for ReleaseWatch {
    fn drop(&mut self) {
        self.hub.unwatch(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_release_after_watching_wakes_the_watcher() {
        let hub = ReleaseHub::new();
        let name = LockName::new("n").unwrap();
        let mut watch = hub.watch(&name);
        hub.notify(&name);
        tokio::time::timeout(Duration::from_secs(5), watch.released())
            .await
            .expect("woken");
    }

    #[tokio::test]
    async fn names_are_unwatched_when_the_last_watch_drops() {
        let hub = ReleaseHub::new();
        let name = LockName::new("n").unwrap();
        let a = hub.watch(&name);
        let b = hub.watch(&name);
        drop(a);
        assert_eq!(hub.watched(), vec![name.clone()]);
        drop(b);
        assert!(hub.watched().is_empty());
    }

    #[tokio::test]
    async fn releases_before_watching_are_not_reported() {
        let hub = ReleaseHub::new();
        let name = LockName::new("n").unwrap();
        let _keep = hub.watch(&name);
        hub.notify(&name);
        let mut late = hub.watch(&name);
        let woke = tokio::time::timeout(Duration::from_millis(50), late.released()).await;
        assert!(woke.is_err());
    }
}

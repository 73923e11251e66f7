//! The names this backend's waiters wait for, by their hash and their
//! channel's bucket, so that a release heard finds its waiters without
//! looking at every name watched, and the buckets to listen to are known
//! without hashing every name again.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use distlock_core::LockName;
use distlock_core::backend::{ReleaseHub, ReleaseWatch};

use super::calls::Calls;
use super::channel::{Bucket, NameHash};

/// The names watched, and the hub that wakes their waiters.
///
/// A name is indexed when a waiter starts watching it, and dropped from
/// the index only by [`prune`](Self::prune), which keeps the names the
/// hub still watches: the index may hold names nobody waits for any more
/// until then, never lack one somebody waits for.
#[derive(Debug, Default)]
pub(super) struct Watched {
    hub: ReleaseHub,
    index: Mutex<Index>,
    /// Fair mode's waiters' places, told which were granted.
    calls: Calls,
}

#[derive(Debug, Default)]
struct Index {
    by_hash: HashMap<NameHash, Vec<LockName>>,
    /// How many indexed names each bucket has.
    per_bucket: HashMap<Bucket, usize>,
}

impl Index {
    fn add(&mut self, name: &LockName) {
        let hash = NameHash::of(name);
        let names = self.by_hash.entry(hash).or_default();
        if !names.contains(name) {
            names.push(name.clone());
            *self.per_bucket.entry(hash.bucket()).or_default() += 1;
        }
    }
}

impl Watched {
    pub(super) fn hub(&self) -> &ReleaseHub {
        &self.hub
    }

    pub(super) fn calls(&self) -> &Calls {
        &self.calls
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A watch on `name`'s releases. The name is indexed before the hub
    /// says that it gained a name, and under the index's lock, so that
    /// neither the listening session nor a prune misses it.
    pub(super) fn watch(&self, name: &LockName) -> ReleaseWatch {
        let mut index = self.index();
        index.add(name);
        self.hub.watch(name)
    }

    /// Wakes the waiters of the names of `hash`, after a release that
    /// named no place: each asks the store again.
    pub(super) fn wake(&self, hash: NameHash) {
        self.calls.call_everyone();
        self.wake_names(hash);
    }

    /// Wakes the waiters of the names of `hash` after a release that
    /// granted `place`, when the place is one of this backend's: its
    /// waiter asks the store, and the others answer without it.
    pub(super) fn wake_place(&self, hash: NameHash, place: &str) {
        if self.calls.call(place) {
            self.wake_names(hash);
        }
    }

    /// Wakes every waiter, to ask the store again: releases may have gone
    /// unheard.
    pub(super) fn wake_all(&self) {
        self.calls.call_everyone();
        self.hub.notify_all();
    }

    fn wake_names(&self, hash: NameHash) {
        let names = self.index().by_hash.get(&hash).cloned().unwrap_or_default();
        for name in &names {
            self.hub.notify(name);
        }
    }

    /// Wakes the waiters of the names in `buckets`.
    pub(super) fn wake_in(&self, buckets: &[Bucket]) {
        self.calls.call_everyone();
        let names: Vec<LockName> = self
            .index()
            .by_hash
            .iter()
            .filter(|(hash, _)| buckets.contains(&hash.bucket()))
            .flat_map(|(_, names)| names.iter().cloned())
            .collect();
        for name in &names {
            self.hub.notify(name);
        }
    }

    /// The buckets of the names indexed.
    pub(super) fn buckets(&self) -> HashSet<Bucket> {
        self.index().per_bucket.keys().copied().collect()
    }

    /// Drops the names nobody watches any more.
    pub(super) fn prune(&self) {
        let mut index = self.index();
        let watched: HashSet<LockName> = self.hub.watched().into_iter().collect();
        let mut per_bucket: HashMap<Bucket, usize> = HashMap::new();
        index.by_hash.retain(|hash, names| {
            names.retain(|name| watched.contains(name));
            if !names.is_empty() {
                *per_bucket.entry(hash.bucket()).or_default() += names.len();
            }
            !names.is_empty()
        });
        index.per_bucket = per_bucket;
    }

    /// How many names are indexed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.index().by_hash.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    /// Whether `watch` had a release reported: a ready watch answers on
    /// its first poll, which a zero timeout makes.
    async fn woken(watch: &mut ReleaseWatch) -> bool {
        tokio::time::timeout(std::time::Duration::ZERO, watch.released())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_release_wakes_the_waiters_of_its_name_only() {
        let watched = Watched::default();
        let (a, b) = (name("a"), name("b"));
        let mut on_a = watched.watch(&a);
        let mut on_b = watched.watch(&b);
        watched.wake(NameHash::of(&a));
        assert!(woken(&mut on_a).await);
        assert!(!woken(&mut on_b).await);
        assert_eq!(
            watched.buckets(),
            [NameHash::of(&a).bucket(), NameHash::of(&b).bucket()].into()
        );
        watched.wake_in(&[NameHash::of(&b).bucket()]);
        assert!(woken(&mut on_b).await);
    }

    #[test]
    fn names_nobody_watches_are_pruned_and_watched_ones_kept() {
        let watched = Watched::default();
        let kept = name("kept");
        let _kept = watched.watch(&kept);
        for i in 0..100 {
            drop(watched.watch(&name(&format!("gone-{i}"))));
        }
        assert_eq!(watched.len(), 101);
        watched.prune();
        assert_eq!(watched.len(), 1);
        assert_eq!(watched.buckets(), [NameHash::of(&kept).bucket()].into());
    }
}

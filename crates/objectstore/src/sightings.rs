//! How long this process has seen each held lock's object unchanged.
//!
//! No store expires an object by itself, and a waiter must not compare its
//! wall clock with the holder's. So a waiter presumes a holder dead only
//! once it has read the same version (ETag) of the lock's object for a
//! whole lease, counted on its own monotonic clock from the answer of the
//! first read that returned that version. The holder counts its lease from
//! the *sending* of its last write that succeeded, which came before that
//! answer, and gives it up a safety margin early: so the holder's lease
//! always ends first, as long as the two clocks run at the same rate to
//! within the margin.
//!
//! The sightings are kept per backend, not per wait, so that single tries
//! (which keep no wait state) take over an abandoned lock too. Forgetting a
//! sighting is always safe: the count starts again, and only the take-over
//! comes later.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use object_store::path::Path;
use tokio::time::Instant;

/// The most objects whose versions are kept; past it, the oldest sightings
/// are forgotten.
const MOST_KEPT: usize = 65_536;

/// One object's version, and when this process first read it.
#[derive(Debug)]
struct Sighting {
    version: String,
    since: Instant,
}

/// The versions this process has read of held locks.
#[derive(Debug, Default)]
pub(crate) struct Sightings {
    seen: Mutex<HashMap<Path, Sighting>>,
}

impl Sightings {
    /// How long `version` of the object at `key` has been seen unchanged,
    /// given that a read answered with it at `read_at`: zero at the first
    /// read of a version.
    pub(crate) fn unchanged_for(&self, key: &Path, version: &str, read_at: Instant) -> Duration {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(sighting) = seen.get(key)
            && sighting.version == version
        {
            return read_at.saturating_duration_since(sighting.since);
        }
        if seen.len() >= MOST_KEPT && !seen.contains_key(key) {
            forget_oldest_half(&mut seen);
        }
        seen.insert(
            key.clone(),
            Sighting {
                version: version.to_owned(),
                since: read_at,
            },
        );
        Duration::ZERO
    }

    /// Forgets the object at `key`: it was found free, or taken.
    pub(crate) fn forget(&self, key: &Path) {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(key);
    }

    /// How many objects are remembered, for tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// Forgets the older half of `seen`: their counts start again if they are
/// read again, which delays a take-over and never hastens one.
fn forget_oldest_half(seen: &mut HashMap<Path, Sighting>) {
    let mut since: Vec<Instant> = seen.values().map(|sighting| sighting.since).collect();
    since.sort_unstable();
    let cut = since[since.len() / 2];
    seen.retain(|_, sighting| sighting.since > cut);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_counted_from_its_first_read() {
        let sightings = Sightings::default();
        let key = Path::from("k");
        let start = Instant::now();
        assert_eq!(sightings.unchanged_for(&key, "v1", start), Duration::ZERO);
        let later = start + Duration::from_secs(3);
        assert_eq!(
            sightings.unchanged_for(&key, "v1", later),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn a_new_version_starts_the_count_again() {
        let sightings = Sightings::default();
        let key = Path::from("k");
        let start = Instant::now();
        sightings.unchanged_for(&key, "v1", start);
        let later = start + Duration::from_secs(3);
        assert_eq!(sightings.unchanged_for(&key, "v2", later), Duration::ZERO);
        let after = later + Duration::from_secs(1);
        assert_eq!(
            sightings.unchanged_for(&key, "v2", after),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn a_forgotten_object_starts_the_count_again() {
        let sightings = Sightings::default();
        let key = Path::from("k");
        let start = Instant::now();
        sightings.unchanged_for(&key, "v1", start);
        sightings.forget(&key);
        let later = start + Duration::from_secs(3);
        assert_eq!(sightings.unchanged_for(&key, "v1", later), Duration::ZERO);
    }

    #[test]
    fn a_full_table_forgets_its_oldest_half() {
        let sightings = Sightings::default();
        let start = Instant::now();
        for i in 0..MOST_KEPT {
            let at = start + Duration::from_millis(i as u64);
            sightings.unchanged_for(&Path::from(format!("k{i}")), "v", at);
        }
        assert_eq!(sightings.len(), MOST_KEPT);
        let at = start + Duration::from_secs(3_600);
        sightings.unchanged_for(&Path::from("new"), "v", at);
        assert!(sightings.len() <= MOST_KEPT / 2 + 1, "{}", sightings.len());
        // The newest are kept, with their counts.
        let newest = Path::from(format!("k{}", MOST_KEPT - 1));
        let newest_at = start + Duration::from_millis(MOST_KEPT as u64 - 1);
        assert_eq!(sightings.unchanged_for(&newest, "v", at), at - newest_at);
    }
}

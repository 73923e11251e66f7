//! Fair mode's calls: the places in line of this backend's waiters, and
//! whether a release has granted each since its waiter last asked.
//!
//! A release that grants a place names it in its notification, so that
//! only that place's waiter needs to ask the store; the others of the name
//! that wake with it answer from here, without a statement, until their
//! place is due for renewal. Whatever may have been missed (a release
//! naming no place, a reconnect, an overflow) calls everyone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The places of this backend's waiters, each with whether it was called.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    places: Mutex<HashMap<String, bool>>,
    /// Bumped each time everyone is called.
    everyone: AtomicU64,
}

/// Where a waiter's calls stood when it last asked the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallsSeen(u64);

impl Calls {
    fn places(&self) -> MutexGuard<'_, HashMap<String, bool>> {
        self.places.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that the waiter of `place` asks the store now: calls so far
    /// are answered by it.
    pub(crate) fn asking(&self, place: &str) -> CallsSeen {
        // Read before the place is cleared: a call to everyone in between
        // is then seen as new.
        let asked = CallsSeen(self.everyone.load(Ordering::SeqCst));
        self.places().insert(place.to_owned(), false);
        asked
    }

    /// Whether `place` was called since its waiter asked at `asked`; also
    /// when it is not recorded.
    pub(crate) fn called(&self, place: &str, asked: CallsSeen) -> bool {
        self.everyone.load(Ordering::SeqCst) != asked.0
            || self.places().get(place).is_none_or(|called| *called)
    }

    /// Forgets `place`: its wait ended, or it was granted.
    pub(crate) fn forget(&self, place: &str) {
        self.places().remove(place);
    }

    /// Calls `place`; answers whether it is one of this backend's.
    pub(super) fn call(&self, place: &str) -> bool {
        match self.places().get_mut(place) {
            Some(called) => {
                *called = true;
                true
            }
            None => false,
        }
    }

    /// Calls every place.
    pub(super) fn call_everyone(&self) {
        self.everyone.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_call_to_the_place_or_to_everyone_counts() {
        let calls = Calls::default();
        let asked = calls.asking("a");
        calls.asking("b");
        assert!(!calls.called("a", asked));
        assert!(calls.call("b"));
        assert!(!calls.called("a", asked), "another place's call");
        assert!(!calls.call("elsewhere"), "another backend's place");
        assert!(calls.call("a"));
        assert!(calls.called("a", asked));
        let asked = calls.asking("a");
        assert!(!calls.called("a", asked), "answered by asking");
        calls.call_everyone();
        assert!(calls.called("a", asked));
        calls.forget("a");
        let asked_now = CallsSeen(calls.everyone.load(Ordering::SeqCst));
        assert!(calls.called("a", asked_now), "a forgotten place asks");
    }
}

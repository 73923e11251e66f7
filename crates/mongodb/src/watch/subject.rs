//! What a release watcher watches, and whose waiters an event wakes.

use distlock_core::LockName;
use distlock_core::backend::ReleaseHub;
use mongodb::bson::{Bson, Document};

use crate::document::{FREED, LOCK_ID, PASSED_TO};
use crate::entity::id::entity_id;
use crate::fair::{PassOn, Places, passed_to_us};

/// What a watcher watches: which field holds a grant, and how the ids of
/// documents and the lock names of this process relate.
#[derive(Debug, Clone)]
pub(crate) enum Subject {
    /// The lock collection: a document's `_id` is its lock's name.
    Locks,
    /// The lock collection of a backend in fair mode, whose waiters keep
    /// `places` in line: a write that passes a lock on to one of them wakes
    /// this backend's waiters of the name, and tells only that place.
    FairLocks(Places),
    /// A collection of entities, each locked in place through the field
    /// `lock_id`; lock names are made from the entities' ids.
    Entities {
        /// The field that holds a grant's identity.
        lock_id: String,
    },
}

impl Subject {
    pub(super) fn lock_id_field(&self) -> &str {
        match self {
            Self::Locks | Self::FairLocks(_) => LOCK_ID,
            Self::Entities { lock_id } => lock_id,
        }
    }

    /// The identity that begins the places of this backend's waiters, in
    /// fair mode: a write whose `passedTo` begins with it wakes us.
    pub(super) fn places_of(&self) -> Option<&str> {
        match self {
            Self::FairLocks(places) => Some(places.backend()),
            _ => None,
        }
    }

    /// The field a write sets afresh when it may let a waiter in without
    /// removing the grant's identity (a permit's release, a writer that
    /// stopped waiting); entities have none.
    pub(super) fn freed_field(&self) -> Option<&'static str> {
        match self {
            Self::Locks | Self::FairLocks(_) => Some(FREED),
            Self::Entities { .. } => None,
        }
    }

    /// The `_id` of the document that `name` locks.
    pub(super) fn id_of(&self, name: &LockName) -> Option<Bson> {
        match self {
            Self::Locks | Self::FairLocks(_) => Some(Bson::String(name.as_str().to_owned())),
            Self::Entities { .. } => entity_id(name),
        }
    }

    /// Wakes the waiters of the document whose `_id` is `id`; `filtered`
    /// when the stream's filter names the ids waited for; `pass_on` what
    /// the write wrote, if it passed the lock on to a place.
    pub(super) fn notify(
        &self,
        hub: &ReleaseHub,
        id: &Bson,
        filtered: bool,
        pass_on: Option<&Document>,
    ) {
        match self {
            Self::Locks => {
                if let Some(name) = id.as_str().and_then(|id| LockName::new(id).ok()) {
                    tracing::trace!(name = %name, "release seen");
                    hub.notify(&name);
                }
            }
            Self::FairLocks(places) => {
                let Some(name) = id.as_str().and_then(|id| LockName::new(id).ok()) else {
                    return;
                };
                let ours = pass_on.and_then(|written| {
                    let place = written.get_str(PASSED_TO).ok()?;
                    passed_to_us(place, places.backend()).then_some((place, written))
                });
                match ours {
                    Some((place, written)) => {
                        tracing::trace!(name = %name, "pass-on seen");
                        // A place that ended meanwhile needs nobody woken.
                        if places.tell(place, PassOn::read(written)).is_some() {
                            hub.notify(&name);
                        }
                    }
                    None => self.notify_name(hub, &name),
                }
            }
            Self::Entities { .. } => {
                // Several names may lock one entity (each `lock_or_insert`
                // call has its own), and the server matches ids as MongoDB
                // compares them (the number 7 is one id whatever its type),
                // so names are matched the same way. Should none match an
                // event the filter let through, it is for a waiter all the
                // same: every waiter is woken rather than that one missed.
                let watched = hub.watched();
                let mut woken = 0;
                for name in &watched {
                    if entity_id(name).is_some_and(|watched| same_id(&watched, id)) {
                        tracing::trace!(name = %name, "release seen");
                        hub.notify(name);
                        woken += 1;
                    }
                }
                if woken == 0 && filtered && !watched.is_empty() {
                    tracing::debug!(%id, "a release matched no waiter's entity; waking them all");
                    hub.notify_all();
                }
            }
        }
    }
}

impl Subject {
    /// Wakes every waiter of `name`, and tells every place of it.
    pub(super) fn notify_name(&self, hub: &ReleaseHub, name: &LockName) {
        if let Self::FairLocks(places) = self {
            places.tell_name(name);
        }
        tracing::trace!(name = %name, "release seen");
        hub.notify(name);
    }

    /// Wakes every waiter, and tells every place, for when events may
    /// have been missed.
    pub(super) fn notify_all(&self, hub: &ReleaseHub) {
        if let Self::FairLocks(places) = self {
            places.tell_all();
        }
        hub.notify_all();
    }
}

/// Whether two `_id`s are the same to MongoDB's equality, as far as a
/// wake-up needs: equal values, or numbers of equal value in any type. A
/// false match only wakes a waiter to try again.
fn same_id(a: &Bson, b: &Bson) -> bool {
    fn number(value: &Bson) -> Option<f64> {
        match value {
            Bson::Int32(n) => Some(f64::from(*n)),
            // Precision lost above 2^53 can only make a false match.
            Bson::Int64(n) => Some(*n as f64),
            Bson::Double(n) => Some(*n),
            _ => None,
        }
    }
    a == b || matches!((number(a), number(b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_as_mongodb_compares_them() {
        assert!(same_id(&Bson::Int32(7), &Bson::Int64(7)));
        assert!(same_id(&Bson::Double(7.0), &Bson::Int32(7)));
        assert!(same_id(&Bson::from("a"), &Bson::from("a")));
        assert!(!same_id(&Bson::Int32(7), &Bson::Int32(8)));
        assert!(!same_id(&Bson::from("7"), &Bson::Int32(7)));
    }
}

//! The identities of fair waiters' places, the places this backend's
//! waiters keep in fair queues, and what the
//! release watcher has told about them: so that a waiter woken by an event
//! meant for another waiter of the name asks the server nothing, and a
//! waiter passed the lock holds it as passed when it may (see `passed`).
//!
//! A waiter in line needs to ask only when its place was passed the lock
//! (the watcher saw a write name it in `passedTo`) and it may not hold it
//! as passed, when something else
//! may have changed (a release to nobody, a lost stream: every place of
//! the name, or every place, is told), or when its place is due for
//! renewal or the holder's lease for its end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use distlock_core::LockName;
use distlock_core::backend::LeaseId;
use mongodb::bson::Document;

use super::passed::{PassOn, Standing};
use crate::document::{ENTRY_ID, QUEUE};

/// The identity of one wait's place, kept in its
/// [`WaitState`](distlock_core::backend::WaitState) across attempts (each attempt
/// has a lease identity of its own).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PlaceId(String);

impl PlaceId {
    /// A fresh identity for a waiter of the backend `backend` (see
    /// [`Places::backend`]): 32 hex digits, the backend's 16 first.
    pub(crate) fn new(backend: &str) -> Self {
        Self(format!(
            "{backend}{:016x}",
            LeaseId::random().as_u128() as u64
        ))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the document `found` has this place in line.
    pub(crate) fn is_in(&self, found: &Document) -> bool {
        self.entry_in(found).is_some()
    }

    /// This place's entry in the document `found`'s line, if it is there.
    pub(crate) fn entry_in<'a>(&self, found: &'a Document) -> Option<&'a Document> {
        found.get_array(QUEUE).ok()?.iter().find_map(|place| {
            place
                .as_document()
                .filter(|place| place.get_str(ENTRY_ID).ok() == Some(self.as_str()))
        })
    }
}

/// This backend's places, by identity. Cheap to clone: clones share them.
#[derive(Debug, Clone)]
pub(crate) struct Places {
    backend: Arc<str>,
    notes: Arc<Mutex<HashMap<PlaceId, Note>>>,
}

#[derive(Debug)]
struct Note {
    name: LockName,
    /// Bumped by each word that the place may have changed.
    told: u64,
    /// What `told` was when the latest reply was asked for.
    heard: u64,
    /// When the place must ask anyway: its renewal, or the holder's end.
    due: Option<Instant>,
    /// Where the place stood at its latest reply, while no command of its
    /// waiter is unanswered.
    standing: Option<Standing>,
    /// The latest pass-on to the place heard of.
    passed: Option<PassOn>,
}

impl Places {
    /// An empty set, under a fresh backend identity.
    pub(crate) fn new() -> Self {
        Self {
            backend: format!("{:016x}", LeaseId::random().as_u128() as u64).into(),
            notes: Arc::default(),
        }
    }

    /// The backend's identity: 16 hex digits that begin each of its
    /// places' identities.
    pub(crate) fn backend(&self) -> &str {
        &self.backend
    }

    fn notes(&self) -> MutexGuard<'_, HashMap<PlaceId, Note>> {
        self.notes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long `place` may wait without asking: `Some` while nothing was
    /// told of it since its latest reply and it is not due.
    pub(crate) fn quiet_for(&self, place: &PlaceId) -> Option<Duration> {
        let notes = self.notes();
        let note = notes.get(place)?;
        let left = note.due?.checked_duration_since(Instant::now())?;
        (note.told == note.heard && !left.is_zero()).then_some(left)
    }

    /// Records that `place` of `name` asks now; returns what it has heard.
    /// Until a reply shows the place in line again, no pass-on is held as
    /// passed: should this command's answer be lost, it may have taken a
    /// grant passed on over under its own identity.
    pub(crate) fn asking(&self, place: &PlaceId, name: &LockName) -> u64 {
        let mut notes = self.notes();
        let note = notes.entry(place.clone()).or_insert_with(|| Note {
            name: name.clone(),
            told: 0,
            heard: 0,
            due: None,
            standing: None,
            passed: None,
        });
        note.due = None;
        note.standing = None;
        note.told
    }

    /// Records that `place`, having heard `heard` when it asked, is in
    /// line as `standing` says and must ask again within `within`.
    pub(crate) fn in_line(
        &self,
        place: &PlaceId,
        heard: u64,
        within: Duration,
        standing: Option<Standing>,
    ) {
        if let Some(note) = self.notes().get_mut(place) {
            note.heard = heard;
            note.due = Some(Instant::now() + within);
            note.standing = standing;
        }
    }

    /// The token of the grant passed on to `place`, when its waiter may
    /// hold it as passed at `now` (see `passed`); the place is then
    /// forgotten.
    pub(crate) fn take_passed(&self, place: &PlaceId, now: Instant) -> Option<u64> {
        let mut notes = self.notes();
        let note = notes.get(place)?;
        let token = note.standing?.holds(&note.passed?, now)?;
        notes.remove(place);
        Some(token)
    }

    /// Forgets `place`: its wait ended, or it was granted.
    pub(crate) fn forget(&self, place: &PlaceId) {
        self.notes().remove(place);
    }

    /// Tells the place `id` (a `passedTo` value) that it was passed the
    /// lock, by a write that showed the grant as `passed` when it showed
    /// it; returns the name it waits for, if it is ours.
    pub(crate) fn tell(&self, id: &str, passed: Option<PassOn>) -> Option<LockName> {
        let mut notes = self.notes();
        let note = notes.get_mut(&PlaceId(id.to_owned()))?;
        note.told += 1;
        if let Some(passed) = passed {
            note.passed = Some(passed.latest(note.passed));
        }
        Some(note.name.clone())
    }

    /// Tells every place of `name` that the lock may have changed.
    pub(crate) fn tell_name(&self, name: &LockName) {
        for note in self.notes().values_mut() {
            if &note.name == name {
                note.told += 1;
            }
        }
    }

    /// Tells every place that anything may have changed.
    pub(crate) fn tell_all(&self) {
        for note in self.notes().values_mut() {
            note.told += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_asks_again_when_told_or_due() {
        let places = Places::new();
        let name = LockName::new("n").unwrap();
        let place = PlaceId::new(places.backend());
        assert_eq!(places.quiet_for(&place), None, "unknown: ask");
        let heard = places.asking(&place, &name);
        assert_eq!(places.quiet_for(&place), None, "asking: no reply yet");
        places.in_line(&place, heard, Duration::from_secs(60), None);
        assert!(places.quiet_for(&place).is_some());
        assert_eq!(places.tell(place.as_str(), None), Some(name.clone()));
        assert_eq!(places.quiet_for(&place), None, "told");
        let heard = places.asking(&place, &name);
        places.in_line(&place, heard, Duration::from_secs(60), None);
        places.tell_name(&name);
        assert_eq!(places.quiet_for(&place), None, "told by name");
        let heard = places.asking(&place, &name);
        places.tell_all();
        places.in_line(&place, heard, Duration::from_secs(60), None);
        assert_eq!(places.quiet_for(&place), None, "told while asking");
        places.in_line(&place, places.asking(&place, &name), Duration::ZERO, None);
        assert_eq!(places.quiet_for(&place), None, "due");
        places.forget(&place);
        assert_eq!(places.tell(place.as_str(), None), None);
    }

    #[test]
    fn a_pass_on_is_held_only_while_a_reply_shows_the_place_in_line() {
        use mongodb::bson::{DateTime, doc};

        use crate::document::{EXPIRES_AT, FENCING_TOKEN};

        let places = Places::new();
        let name = LockName::new("n").unwrap();
        let place = PlaceId::new(places.backend());
        let sent = Instant::now();
        let reply = doc! {
            FENCING_TOKEN: 5_i64,
            QUEUE: [{ ENTRY_ID: place.as_str(), EXPIRES_AT: DateTime::from_millis(10_000) }],
        };
        let passed = doc! { FENCING_TOKEN: 6_i64, EXPIRES_AT: DateTime::from_millis(60_000) };
        let entry = place.entry_in(&reply).unwrap();
        let standing = || Standing::read(&reply, entry, sent);

        let heard = places.asking(&place, &name);
        places.in_line(&place, heard, Duration::from_secs(60), standing());
        assert_eq!(places.take_passed(&place, sent), None, "nothing heard");
        places.tell(place.as_str(), PassOn::read(&passed));
        // A command sent since, whose answer never came.
        places.asking(&place, &name);
        assert_eq!(places.take_passed(&place, sent), None, "unanswered");
        places.in_line(&place, heard, Duration::from_secs(60), standing());
        assert_eq!(places.take_passed(&place, sent), Some(6));
        assert_eq!(places.quiet_for(&place), None, "held: forgotten");
        assert_eq!(places.tell(place.as_str(), None), None);
    }
}

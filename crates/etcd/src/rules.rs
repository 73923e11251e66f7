//! Who holds a name: its keys in create-revision order, and the rules
//! between kinds.
//!
//! - An exclusive key (a writer) holds when no key precedes it.
//! - A shared key (a reader) holds when no writer precedes it.
//! - A permit of a semaphore of N holds when fewer than N keys precede it.
//! - A key whose claim is not of the same family as an earlier key's (a
//!   permit after a lock, a lock after a permit, another limit) is a kind
//!   conflict: a name takes the kind of whoever came first.

use crate::raw::mvccpb::KeyValue;
use distlock_core::{Claim, LockName, Result};

use crate::keys::Record;

/// One key of a name, as read.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) key: Vec<u8>,
    pub(crate) revision: i64,
    /// The revision that last wrote it: above `revision` once a fair
    /// campaign took its grant over.
    pub(crate) modified: i64,
    /// The etcd lease (session) the key hangs on.
    pub(crate) session: i64,
    pub(crate) claim: Claim,
    pub(crate) record: Option<Record>,
}

impl Entry {
    pub(crate) fn from_kv(kv: &KeyValue) -> Self {
        let record = Record::parse(&kv.value);
        Self {
            key: kv.key.clone(),
            revision: kv.create_revision,
            modified: kv.mod_revision,
            session: kv.lease,
            claim: record.as_ref().map_or(Claim::Exclusive, Record::claim),
            record,
        }
    }
}

/// Sorts entries by create revision, oldest first.
pub(crate) fn in_order(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_by_key(|entry| entry.revision);
    entries
}

/// What the key at `position` in `entries` (or one appended after them,
/// when `position` is `entries.len()`) is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    Holds,
    /// Waits; the index of the key whose deletion may let it in: the one
    /// just before for writers and permits, the last earlier writer for
    /// readers.
    Waits(usize),
}

/// Where a key for `claim` at `position` stands.
///
/// # Errors
/// [`distlock_core::Error::KindConflict`] when an earlier key is of
/// another family.
pub(crate) fn standing(
    name: &LockName,
    claim: Claim,
    entries: &[Entry],
    position: usize,
) -> Result<Standing> {
    let before = &entries[..position.min(entries.len())];
    if let Some(other) = before.iter().find(|e| !claim.same_family(e.claim)) {
        return Err(claim.conflict(name, other.claim));
    }
    Ok(match claim {
        Claim::Exclusive => match before.len() {
            0 => Standing::Holds,
            n => Standing::Waits(n - 1),
        },
        Claim::Shared => match before.iter().rposition(|e| e.claim == Claim::Exclusive) {
            None => Standing::Holds,
            Some(writer) => Standing::Waits(writer),
        },
        Claim::Permit { limit } => {
            if before.len() < limit as usize {
                Standing::Holds
            } else {
                Standing::Waits(before.len() - 1)
            }
        }
    })
}

/// Whether the key at `position` holds (for `list`), ignoring conflicts.
pub(crate) fn holds(entries: &[Entry], position: usize) -> bool {
    let Some(entry) = entries.get(position) else {
        return false;
    };
    let name = LockName::new("list").expect("a valid name");
    matches!(
        standing(&name, entry.claim, entries, position),
        Ok(Standing::Holds)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(claims: &[Claim]) -> Vec<Entry> {
        claims
            .iter()
            .enumerate()
            .map(|(i, &claim)| Entry {
                key: vec![],
                revision: i as i64,
                modified: i as i64,
                session: 0,
                claim,
                record: None,
            })
            .collect()
    }

    #[test]
    fn the_rules() {
        let name = LockName::new("n").unwrap();
        let (w, r, p2) = (Claim::Exclusive, Claim::Shared, Claim::Permit { limit: 2 });
        let all = entries(&[r, r, w, r]);
        assert_eq!(standing(&name, r, &all, 1).unwrap(), Standing::Holds);
        assert_eq!(standing(&name, w, &all, 2).unwrap(), Standing::Waits(1));
        assert_eq!(standing(&name, r, &all, 3).unwrap(), Standing::Waits(2));
        assert_eq!(standing(&name, w, &all, 4).unwrap(), Standing::Waits(3));
        let sem = entries(&[p2, p2, p2]);
        assert_eq!(standing(&name, p2, &sem, 1).unwrap(), Standing::Holds);
        assert_eq!(standing(&name, p2, &sem, 2).unwrap(), Standing::Waits(1));
        assert!(standing(&name, w, &sem, 3).is_err());
        assert!(standing(&name, Claim::Permit { limit: 3 }, &sem, 3).is_err());
        assert!(holds(&sem, 1) && !holds(&sem, 2));
    }
}

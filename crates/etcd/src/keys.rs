//! Keys and values: where each waiter's key lives, and what it records.
//!
//! A name's keys are `<prefix><encoded name>/<32 hex digits>`. The encoded
//! name is the name's UTF-8 with every byte outside `A-Z a-z 0-9 - _ . ~`
//! written `%XX`, so it never holds a `/`: the range `<prefix><encoded>/`
//! holds that name's keys and no other name's (`a/` and `a%2Fb/` do not
//! nest).
//!
//! An election's record of terms is the one other key of a name:
//! `<prefix>#terms/<encoded name>`. An encoded name never starts with `#`
//! (it is written `%23`), and every encoded name starts with a byte from
//! `%` (0x25) up, above `#` (0x23): so every record of terms sorts before
//! every lock key, in a range of its own that no name's range holds, and
//! `list` reads the lock keys from [`locks_start`] on without reading the
//! records.

use distlock_core::backend::LeaseId;
use distlock_core::{Claim, Holder, LockKind, LockName};
use serde::{Deserialize, Serialize};

/// A name's key range under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NameRange {
    /// `<prefix><encoded name>/`: every key of the name starts with it.
    pub(crate) start: Vec<u8>,
}

impl NameRange {
    pub(crate) fn new(prefix: &str, name: &LockName) -> Self {
        let mut start = prefix.as_bytes().to_vec();
        encode_name(name.as_str(), &mut start);
        start.push(b'/');
        Self { start }
    }

    /// The end of the range (exclusive): the start with its last byte,
    /// `/`, bumped to `0`.
    pub(crate) fn end(&self) -> Vec<u8> {
        let mut end = self.start.clone();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        end
    }

    /// The key of one waiter or grant of this name.
    pub(crate) fn key(&self, id: u128) -> Vec<u8> {
        let mut key = self.start.clone();
        key.extend_from_slice(format!("{id:032x}").as_bytes());
        key
    }

    /// The key a single try with identity `id` writes.
    pub(crate) fn try_key(&self, id: LeaseId) -> Vec<u8> {
        self.key(id.as_u128())
    }
}

/// Where the records of terms live: `<prefix>#terms/`.
const TERMS: &[u8] = b"#terms/";

/// The key of `name`'s record of election terms, under `prefix`.
pub(crate) fn terms_key(prefix: &str, name: &LockName) -> Vec<u8> {
    let mut key = prefix.as_bytes().to_vec();
    key.extend_from_slice(TERMS);
    encode_name(name.as_str(), &mut key);
    key
}

/// The first key (inclusive) any lock key under `prefix` can have: an
/// encoded name starts with `%` or a byte above it, and the records of
/// terms (`#…`) sort before it.
pub(crate) fn locks_start(prefix: &str) -> Vec<u8> {
    let mut start = prefix.as_bytes().to_vec();
    start.push(b'%');
    start
}

/// Whether `byte` is written as itself in an encoded name.
fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~')
}

/// Appends `name`, percent-encoded, to `out`.
pub(crate) fn encode_name(name: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in name.as_bytes() {
        if unreserved(byte) {
            out.push(byte);
        } else {
            out.extend_from_slice(&[
                b'%',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 15)],
            ]);
        }
    }
}

/// The end (exclusive) of the keys that start with `prefix`: `prefix`
/// with its last byte below 0xff bumped and the bytes after it dropped, or
/// `\0`, etcd's end of the key space, when every byte is 0xff.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The name whose key `key` is, if it is one of ours under `prefix`: a
/// record of terms, or a key someone else wrote, is none.
pub(crate) fn name_of_key(prefix: &str, key: &[u8]) -> Option<LockName> {
    let rest = key.strip_prefix(prefix.as_bytes())?;
    let slash = rest.iter().rposition(|&b| b == b'/')?;
    let encoded = &rest[..slash];
    if !encoded.iter().all(|&b| unreserved(b) || b == b'%') {
        return None;
    }
    let encoded = std::str::from_utf8(encoded).ok()?;
    let name = distlock_core::backend::percent_decode(encoded).ok()?;
    LockName::new(name).ok()
}

/// What each key holds: the claim it was made for, who made it, and the
/// identity of the grant it is (or will be), for `list`, for the rules
/// between kinds, and for a resume, which finds a grant by its identity
/// and writes the new one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) kind: LockKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) limit: Option<u32>,
    pub(crate) holder: Holder,
    /// The grant's identity, as 32 hex digits; `None` in a key written
    /// before identities were recorded, which no resume takes up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
}

impl Record {
    pub(crate) fn new(claim: Claim, holder: &Holder, id: LeaseId) -> Self {
        Self {
            kind: claim.kind(),
            limit: claim.limit(),
            holder: holder.clone(),
            id: Some(id.to_string()),
        }
    }

    /// Whether the key is the grant or wait with identity `id`.
    pub(crate) fn is_of(&self, id: LeaseId) -> bool {
        self.id.as_deref() == Some(id.to_string().as_str())
    }

    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The record in `value`; `None` for a value that is not one (a key
    /// someone else wrote under our prefix), which then counts as a writer.
    pub(crate) fn parse(value: &[u8]) -> Option<Self> {
        serde_json::from_slice(value).ok()
    }

    /// The claim the key was made for.
    pub(crate) fn claim(&self) -> Claim {
        match (self.kind, self.limit) {
            (LockKind::Shared, _) => Claim::Shared,
            (LockKind::Semaphore, Some(limit)) => Claim::Permit { limit },
            _ => Claim::Exclusive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    #[test]
    fn no_name_range_holds_another() {
        let a = NameRange::new("p/", &name("a"));
        let ab = NameRange::new("p/", &name("a/b"));
        assert_eq!(a.start, b"p/a/");
        assert_eq!(ab.start, b"p/a%2Fb/");
        assert!(!ab.start.starts_with(&a.start));
        let key = ab.key(7);
        assert!(key.as_slice() >= ab.start.as_slice() && key < ab.end());
        assert!(!(key.as_slice() >= a.start.as_slice() && key < a.end()));
    }

    #[test]
    fn a_prefix_ends_past_its_last_key() {
        assert_eq!(prefix_end(b"distlock/"), b"distlock0");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }

    #[test]
    fn names_round_trip() {
        for text in ["a", "a/b", "nul\0x", "%41", "ü ☃\r\n$.", &"x".repeat(1024)] {
            let range = NameRange::new("distlock/", &name(text));
            let key = range.key(u128::MAX);
            assert_eq!(name_of_key("distlock/", &key), Some(name(text)), "{text:?}");
        }
        assert_eq!(name_of_key("other/", b"distlock/a/00"), None);
    }

    #[test]
    fn records_of_terms_are_no_lock_keys_and_sort_before_them() {
        for text in ["a", "#terms", "%23terms", "~", "-", "a/b", "\0"] {
            let name = name(text);
            let terms = terms_key("p/", &name);
            assert_eq!(name_of_key("p/", &terms), None, "{text:?}");
            assert!(terms < locks_start("p/"), "{text:?}");
            let range = NameRange::new("p/", &name);
            assert!(range.start >= locks_start("p/"), "{text:?}");
            assert!(!(terms >= range.start && terms < range.end()), "{text:?}");
        }
        assert_ne!(terms_key("p/", &name("a")), terms_key("p/", &name("a/")));
    }
}

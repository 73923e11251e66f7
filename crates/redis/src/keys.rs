//! Where a name's keys live, and what they hold.
//!
//! Every key and the channel of one name are
//! `<prefix>{<tag>}:<role>`, where the tag is the SHA-256 of the name's
//! UTF-8 in hex: all 256 bits, so that names chosen to collide would take
//! a second-preimage search, not a birthday one. Redis Cluster hashes only what is
//! between the braces, so all of one name's keys share a slot (a script
//! may touch them all), and no name can choose another's slot: the name
//! itself never appears in a key, only in the values, as JSON.
//!
//! | role | type | holds |
//! |---|---|---|
//! | `x` | string, `PX` the lease | the exclusive grant: `<id>:<token>:<record>` (in quorum mode the token starts with `~` until the grant is decided) |
//! | `s` | sorted set | the readers' or permits' grant ids, scored by expiry (ms, server clock) |
//! | `i` | hash | for `s`: `kind` (`s` or `p`), `limit`, and `<id>` → `<token>:<record>` |
//! | `w` | sorted set | waiting writers' marks, scored by expiry (ms, server clock) |
//! | `wi` | hash | for `w`: `<mark>` → `<since>:<record>`, who waits and since when (µs, server clock), for `list` |
//! | `t` | string | the latest fencing token of the name |
//! | `a` | string, `PX` a waiter's wait | there while an attempt that found the exclusive grant held waits: its release is announced only then |
//! | `terms` | list | an election's last terms, newest first: `<term>:<previous term>:<record>` (only campaigns write it) |
//! | `done` | sorted set, in cluster mode | the releases (and forced releases) that ended a grant, by their call's identity, scored by when they are forgotten (ms, server clock): a call the driver sends again answers as its first run did |
//! | `released` | channel | a message on each release that someone waits for |
//!
//! Quorum mode keeps one more key per server and prefix, of no name:
//! `<prefix>epoch`, a string with no expiry, the server's `TIME` in ms
//! when an attempt first found it missing, that is, when the server last
//! came back empty; for a lease after that, the server's grants count
//! towards no majority (see `ABSTAIN` in the scripts).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use distlock_core::{Holder, LockName};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How many hex digits of the name's SHA-256 make its tag: all of them.
const TAG_LEN: usize = 64;

/// How many names' keys a key space keeps at most, so that a name taken
/// again and again is not hashed and formatted again each time. When it
/// is full it starts over, empty: a bound, not a policy.
const CACHED_NAMES: usize = 1024;

/// How many hex digits a grant's 128-bit identity takes.
const ID_LEN: usize = 32;

/// The keys of one prefix, and those of the names used lately (shared by
/// the clones).
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    prefix: String,
    /// `<prefix>epoch`, in quorum mode.
    epoch: String,
    cache: Arc<Mutex<HashMap<LockName, Arc<NameKeys>>>>,
}

/// The keys and channel of one name.
#[derive(Debug, Clone)]
pub(crate) struct NameKeys {
    pub(crate) exclusive: String,
    pub(crate) holders: String,
    pub(crate) records: String,
    pub(crate) waiting: String,
    pub(crate) waiting_records: String,
    pub(crate) token: String,
    pub(crate) awaited: String,
    pub(crate) terms: String,
    pub(crate) done: String,
    pub(crate) channel: String,
}

impl NameKeys {
    /// The keys a release and a forced release touch, in the order their
    /// scripts take them: `done` last, since only cluster mode sends it.
    pub(crate) fn ended_by_release(&self) -> [&str; 5] {
        [
            &self.exclusive,
            &self.holders,
            &self.records,
            &self.awaited,
            &self.done,
        ]
    }
}

impl KeySpace {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            epoch: format!("{prefix}epoch"),
            cache: Arc::default(),
        }
    }

    /// The keys of `name`, from the cache when it has them. The cache is
    /// keyed by the whole name, so one name's keys never serve another.
    pub(crate) fn of(&self, name: &LockName) -> Arc<NameKeys> {
        let lock = || self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(keys) = lock().get(name) {
            return Arc::clone(keys);
        }
        // Hashed outside the lock; should two tasks both miss, both
        // compute the same keys.
        let keys = Arc::new(self.of_uncached(name));
        let mut cache = lock();
        if cache.len() >= CACHED_NAMES {
            cache.clear();
        }
        cache.insert(name.clone(), Arc::clone(&keys));
        keys
    }

    /// The keys of `name`, computed now and not kept.
    pub(crate) fn of_uncached(&self, name: &LockName) -> NameKeys {
        self.of_tag(&tag(name))
    }

    pub(crate) fn of_tag(&self, tag: &str) -> NameKeys {
        let base = format!("{}{{{tag}}}:", self.prefix);
        NameKeys {
            exclusive: format!("{base}x"),
            holders: format!("{base}s"),
            records: format!("{base}i"),
            waiting: format!("{base}w"),
            waiting_records: format!("{base}wi"),
            token: format!("{base}t"),
            awaited: format!("{base}a"),
            terms: format!("{base}terms"),
            done: format!("{base}done"),
            channel: format!("{base}released"),
        }
    }

    /// The `SCAN … MATCH` pattern of the keys that hold grants: every glob
    /// character of the prefix escaped.
    pub(crate) fn grant_pattern(&self) -> String {
        self.pattern("{*}:[xs]")
    }

    /// The `SCAN … MATCH` pattern of the keys that hold waiting writers'
    /// marks (`w`), the prefix escaped as in
    /// [`grant_pattern`](Self::grant_pattern).
    pub(crate) fn waiting_pattern(&self) -> String {
        self.pattern("{*}:w")
    }

    fn pattern(&self, roles: &str) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + roles.len());
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push_str(roles);
        pattern
    }

    /// The tag of `key`, if it is a key of ours that holds grants.
    pub(crate) fn tag_of_grant_key<'k>(&self, key: &'k str) -> Option<&'k str> {
        self.tag_of(key, &["}:x", "}:s"])
    }

    /// The tag of `key`, if it is a key of ours that holds waiting
    /// writers' marks.
    pub(crate) fn tag_of_waiting_key<'k>(&self, key: &'k str) -> Option<&'k str> {
        self.tag_of(key, &["}:w"])
    }

    /// The tag of `key`, if it is a key of ours with one of `roles`.
    fn tag_of<'k>(&self, key: &'k str, roles: &[&str]) -> Option<&'k str> {
        let rest = key.strip_prefix(self.prefix.as_str())?;
        let rest = rest.strip_prefix('{')?;
        let (tag, role) = rest.split_at_checked(TAG_LEN)?;
        let is_tag = tag
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        (is_tag && roles.contains(&role)).then_some(tag)
    }

    /// The key that tells, in quorum mode, since when a server holds its
    /// copies: `<prefix>epoch`.
    pub(crate) fn epoch(&self) -> &str {
        &self.epoch
    }

    /// The channel a name's releases are published on.
    pub(crate) fn channel(&self, name: &LockName) -> String {
        self.of(name).channel.clone()
    }
}

/// A name's tag: the SHA-256 of its UTF-8, in hex.
pub(crate) fn tag(name: &LockName) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(name.as_str().as_bytes());
    let mut tag = String::with_capacity(TAG_LEN);
    for byte in &digest[..TAG_LEN / 2] {
        tag.push(char::from(HEX[usize::from(byte >> 4)]));
        tag.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    tag
}

/// What each grant records beside its identity and token, for `list`: the
/// name (which its keys do not show) and who holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) name: String,
    pub(crate) holder: Holder,
}

impl Record {
    pub(crate) fn json(name: &LockName, holder: &Holder) -> String {
        /// A record as written: borrowed, where a [`Record`] would copy
        /// the name and the holder at every attempt.
        #[derive(Serialize)]
        struct Written<'a> {
            name: &'a str,
            holder: &'a Holder,
        }
        serde_json::to_string(&Written {
            name: name.as_str(),
            holder,
        })
        .unwrap_or_default()
    }
}

/// One entry of a name's list of terms: `<term>:<previous>:<record>`,
/// the previous term empty for the first; `None` for anything else.
pub(crate) fn parse_term(value: &[u8]) -> Option<distlock_core::backend::Term> {
    let text = std::str::from_utf8(value).ok()?;
    let (term, rest) = text.split_once(':')?;
    let (previous, record) = rest.split_once(':')?;
    let previous = match previous {
        "" => None,
        previous => Some(previous.parse().ok()?),
    };
    let record: Record = serde_json::from_str(record).ok()?;
    Some(distlock_core::backend::Term::new(
        term.parse().ok()?,
        previous,
        record.holder,
    ))
}

/// A grant as stored: `<token>:<record>`, after the identity for an
/// exclusive grant (`<id>:<token>:<record>`). A token that starts with `~`
/// is a quorum copy's own, written before the grant was decided: the
/// grant's token is the largest of its majority's, written over it when
/// the grant is decided.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) token: u64,
    /// Whether the token is a quorum copy's own, not yet the grant's.
    pub(crate) provisional: bool,
    pub(crate) record: Record,
}

impl Stored {
    /// Reads `<token>:<record>`; `None` for anything else (a value someone
    /// else wrote under our prefix).
    pub(crate) fn parse(value: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(value).ok()?;
        let (token, record) = text.split_once(':')?;
        let (token, provisional) = match token.strip_prefix('~') {
            Some(token) => (token, true),
            None => (token, false),
        };
        Some(Self {
            token: token.parse().ok()?,
            provisional,
            record: serde_json::from_str(record).ok()?,
        })
    }

    /// Reads an exclusive grant's `<id>:<token>:<record>`, and gives the
    /// identity beside it.
    pub(crate) fn parse_exclusive(value: &[u8]) -> Option<(&[u8], Self)> {
        let (id, rest) = value.split_at_checked(ID_LEN + 1)?;
        let id = id.strip_suffix(b":")?;
        Some((id, Self::parse(rest)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    #[test]
    fn keys_carry_a_tag_of_the_name_and_never_the_name() {
        let keys = KeySpace::new("p:");
        let braces = keys.of(&name("{a}"));
        assert!(braces.exclusive.starts_with("p:{"), "{}", braces.exclusive);
        assert!(!braces.exclusive.contains("{a}"));
        assert_eq!(braces.exclusive.len(), "p:{}:x".len() + TAG_LEN);
        let tag = keys.tag_of_grant_key(&braces.holders).unwrap();
        assert_eq!(tag, super::tag(&name("{a}")));
        assert_eq!(keys.tag_of_grant_key(&braces.token), None);
        assert_eq!(keys.tag_of_grant_key("p:{zz}:x"), None);
        assert_eq!(keys.tag_of_grant_key("q:{zz}:x"), None);
        assert_ne!(keys.of(&name("a")).exclusive, keys.of(&name("b")).exclusive);
    }

    #[test]
    fn a_tag_is_the_names_sha256_in_lowercase_hex() {
        // SHA-256("abc"), from FIPS 180-2's examples.
        assert_eq!(
            tag(&name("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn cached_keys_are_each_names_own_past_the_bound() {
        let keys = KeySpace::new("p:");
        // Names that differ only in the braces, case, a NUL or a trailing
        // space, and enough of them that the cache starts over twice.
        let mut names: Vec<LockName> = ["{a}", "{A}", "a", "a ", "a\0", "a\0b", "}{"]
            .iter()
            .map(|text| name(text))
            .collect();
        names.extend((0..2 * CACHED_NAMES + 10).map(|n| name(&format!("n{n}"))));
        for round in 0..2 {
            for each in &names {
                let cached = keys.of(each);
                let fresh = keys.of_uncached(each);
                assert_eq!(
                    (&cached.exclusive, &cached.channel),
                    (&fresh.exclusive, &fresh.channel),
                    "{each} in round {round}"
                );
                assert_eq!(
                    [
                        &cached.holders,
                        &cached.records,
                        &cached.waiting,
                        &cached.token
                    ],
                    [&fresh.holders, &fresh.records, &fresh.waiting, &fresh.token]
                );
            }
        }
        let exclusive: std::collections::HashSet<String> = names
            .iter()
            .map(|each| keys.of(each).exclusive.clone())
            .collect();
        assert_eq!(exclusive.len(), names.len(), "no two names share a key");
        assert!(keys.cache.lock().unwrap().len() <= CACHED_NAMES);
        // Another prefix's cache is its own.
        let other = KeySpace::new("q:");
        assert!(other.of(&names[0]).exclusive.starts_with("q:{"));
        assert!(keys.of(&names[0]).exclusive.starts_with("p:{"));
    }

    #[test]
    fn the_pattern_escapes_the_prefix() {
        assert_eq!(
            KeySpace::new("a*b?[c]\\:").grant_pattern(),
            "a\\*b\\?\\[c\\]\\\\:{*}:[xs]"
        );
        assert_eq!(
            KeySpace::new("a*b?[c]\\:").waiting_pattern(),
            "a\\*b\\?\\[c\\]\\\\:{*}:w"
        );
    }

    #[test]
    fn waiting_keys_are_told_from_grant_keys() {
        let keys = KeySpace::new("p:");
        let of = keys.of(&name("a"));
        let tag = super::tag(&name("a"));
        assert_eq!(keys.tag_of_waiting_key(&of.waiting), Some(tag.as_str()));
        assert_eq!(keys.tag_of_waiting_key(&of.waiting_records), None);
        assert_eq!(keys.tag_of_waiting_key(&of.exclusive), None);
        assert_eq!(keys.tag_of_grant_key(&of.waiting), None);
    }

    #[test]
    fn terms_are_read_back_and_foreign_values_are_not() {
        let record = Record::json(&name("e"), &Holder::this_process(Some("http://a:1")));
        let first = parse_term(format!("17::{record}").as_bytes()).unwrap();
        assert_eq!((first.term, first.previous), (17, None));
        assert_eq!(first.holder.label.as_deref(), Some("http://a:1"));
        let next = parse_term(format!("20:17:{record}").as_bytes()).unwrap();
        assert_eq!((next.term, next.previous), (20, Some(17)));
        assert!(parse_term(b"20:x:{}").is_none());
        assert!(parse_term(b"garbage").is_none());
    }

    #[test]
    fn stored_grants_round_trip() {
        let holder = Holder::this_process(Some("l"));
        let odd = name("nul\0 cr\r\n {} * ü");
        let value = format!("{:032x}:42:{}", 7u128, Record::json(&odd, &holder));
        let (id, stored) = Stored::parse_exclusive(value.as_bytes()).unwrap();
        assert_eq!(id, format!("{:032x}", 7u128).as_bytes());
        assert_eq!(
            (stored.token, stored.record.name.as_str()),
            (42, odd.as_str())
        );
        assert!(!stored.provisional);
        let provisional = format!("~43:{}", Record::json(&odd, &holder));
        let stored = Stored::parse(provisional.as_bytes()).unwrap();
        assert_eq!((stored.token, stored.provisional), (43, true));
        assert!(Stored::parse(b"x:{}").is_none());
        assert!(Stored::parse_exclusive(b"short").is_none());
    }
}

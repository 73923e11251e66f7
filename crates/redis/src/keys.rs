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
//! | `w` | sorted set | waiting writers' marks, scored by expiry |
//! | `t` | string | the latest fencing token of the name |
//! | `terms` | list | an election's last terms, newest first: `<term>:<previous term>:<record>` (only campaigns write it) |
//! | `released` | channel | a message on each release |

use distlock_core::{Holder, LockName};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How many hex digits of the name's SHA-256 make its tag: all of them.
const TAG_LEN: usize = 64;

/// How many hex digits a grant's 128-bit identity takes.
const ID_LEN: usize = 32;

/// The keys of one prefix.
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    prefix: String,
}

/// The keys and channel of one name.
#[derive(Debug, Clone)]
pub(crate) struct NameKeys {
    pub(crate) exclusive: String,
    pub(crate) holders: String,
    pub(crate) records: String,
    pub(crate) waiting: String,
    pub(crate) token: String,
    pub(crate) terms: String,
    pub(crate) channel: String,
}

impl KeySpace {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    pub(crate) fn of(&self, name: &LockName) -> NameKeys {
        self.of_tag(&tag(name))
    }

    pub(crate) fn of_tag(&self, tag: &str) -> NameKeys {
        let base = format!("{}{{{tag}}}:", self.prefix);
        NameKeys {
            exclusive: format!("{base}x"),
            holders: format!("{base}s"),
            records: format!("{base}i"),
            waiting: format!("{base}w"),
            token: format!("{base}t"),
            terms: format!("{base}terms"),
            channel: format!("{base}released"),
        }
    }

    /// The `SCAN … MATCH` pattern of the keys that hold grants: every glob
    /// character of the prefix escaped.
    pub(crate) fn grant_pattern(&self) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + 8);
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push_str("{*}:[xs]");
        pattern
    }

    /// The tag of `key`, if it is a key of ours that holds grants.
    pub(crate) fn tag_of_grant_key<'k>(&self, key: &'k str) -> Option<&'k str> {
        let rest = key.strip_prefix(self.prefix.as_str())?;
        let rest = rest.strip_prefix('{')?;
        let (tag, role) = rest.split_at_checked(TAG_LEN)?;
        let is_tag = tag
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        (is_tag && matches!(role, "}:x" | "}:s")).then_some(tag)
    }

    /// The channel a name's releases are published on.
    pub(crate) fn channel(&self, name: &LockName) -> String {
        self.of(name).channel
    }
}

/// A name's tag: the SHA-256 of its UTF-8, in hex.
pub(crate) fn tag(name: &LockName) -> String {
    let digest = Sha256::digest(name.as_str().as_bytes());
    let mut tag = String::with_capacity(TAG_LEN);
    for byte in &digest[..TAG_LEN / 2] {
        tag.push_str(&format!("{byte:02x}"));
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
        serde_json::to_string(&Record {
            name: name.as_str().to_owned(),
            holder: holder.clone(),
        })
        .unwrap_or_default()
    }
}

/// One entry of a name's list of terms: `<term>:<previous>:<record>`,
/// the previous term empty for the first; `None` for anything else.
pub(crate) fn parse_term(value: &[u8]) -> Option<distlock_core::Term> {
    let text = std::str::from_utf8(value).ok()?;
    let (term, rest) = text.split_once(':')?;
    let (previous, record) = rest.split_once(':')?;
    let previous = match previous {
        "" => None,
        previous => Some(previous.parse().ok()?),
    };
    let record: Record = serde_json::from_str(record).ok()?;
    Some(distlock_core::Term::new(
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
    fn the_pattern_escapes_the_prefix() {
        assert_eq!(
            KeySpace::new("a*b?[c]\\:").grant_pattern(),
            "a\\*b\\?\\[c\\]\\\\:{*}:[xs]"
        );
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

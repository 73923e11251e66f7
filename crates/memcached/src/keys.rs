//! Lock names to memcached keys, and keys to servers.
//!
//! A name becomes `<prefix><kind><encoding>`:
//! - `<kind>` is `L` for the lock itself (or a semaphore's record, see
//!   [`crate::semaphore`]), `T` for its fencing-token counter, and `S` and
//!   a permit's slot number (`S0`, `S17`) for a semaphore's permit slots,
//!   so no two of them share a key;
//! - `<encoding>` is `=` and the name percent-encoded (every byte outside
//!   `A-Z a-z 0-9 - . _ ~ / :` becomes `%XX`, `%` included) when that fits
//!   in memcached's 250 bytes, and otherwise `#` and the hex SHA-256 of the
//!   name.
//!
//! Percent-encoding is one-to-one and SHA-256 is collision-resistant, and
//! the two forms start differently, so distinct names never share a key.
//! Every key is printable ASCII without spaces, so no name can add a token
//! or a command to the wire.

use sha2::{Digest, Sha256};

use distlock_core::{Error, LockName, MAX_PERMITS, Result};

use crate::proto::{Key, MAX_KEY_LEN};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "lock:";

/// The longest key prefix accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 128;

/// The bytes kept as they are in the readable form of a key.
fn is_plain(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b'/' | b':')
}

/// Checks a key prefix: printable ASCII without spaces, at most
/// [`MAX_PREFIX_LEN`] bytes.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::config(
            "prefix",
            format!(
                "the key prefix has {} bytes; use at most {MAX_PREFIX_LEN}",
                prefix.len()
            ),
        ));
    }
    if !prefix.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::config(
            "prefix",
            "the key prefix may hold only printable ASCII without spaces",
        ));
    }
    Ok(())
}

/// The keys of one backend.
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    prefix: String,
}

impl KeySpace {
    /// Keys under `prefix`, which [`check_prefix`] accepted.
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// The key holding `name`'s lock.
    pub(crate) fn lock_key(&self, name: &LockName) -> Key {
        self.key(LOCK, name)
    }

    /// The key holding `name`'s fencing-token counter.
    pub(crate) fn token_key(&self, name: &LockName) -> Key {
        self.key(TOKEN, name)
    }

    /// The lock key and the token key of `name`, encoding the name once:
    /// every acquisition needs both.
    pub(crate) fn both_keys(&self, name: &LockName) -> (Key, Key) {
        let lock = self.key(LOCK, name);
        let mut token = lock.as_str().as_bytes().to_vec();
        token[self.prefix.len()] = TOKEN;
        let token = String::from_utf8(token).expect("keys are ASCII");
        (lock, Key::new(token).expect("the lock key was a key"))
    }

    /// The keys of `name`'s permit slots, the name encoded once: a look at
    /// a semaphore makes one per slot.
    pub(crate) fn slot_keys(&self, name: &LockName) -> SlotKeys {
        // Every slot number gets room for the longest one, so all slots of
        // a name encode it the same way.
        let budget = MAX_KEY_LEN - self.prefix.len() - 1 - SLOT_DIGITS;
        let encoding = Encoding::of(name.as_str().as_bytes(), budget);
        let mut text = Vec::with_capacity(encoding.len());
        encoding.write(&mut text);
        SlotKeys {
            head: format!("{}{}", self.prefix, char::from(SLOT)),
            encoding: String::from_utf8(text).expect("encodings are ASCII"),
        }
    }

    fn key(&self, kind: u8, name: &LockName) -> Key {
        let budget = MAX_KEY_LEN - self.prefix.len() - 1;
        let encoding = Encoding::of(name.as_str().as_bytes(), budget);
        // Built in one allocation of the right size: every operation makes one.
        let mut text = Vec::with_capacity(self.prefix.len() + 1 + encoding.len());
        text.extend_from_slice(self.prefix.as_bytes());
        text.push(kind);
        encoding.write(&mut text);
        let text = String::from_utf8(text).expect("keys are ASCII");
        Key::new(text).expect("prefixes are checked and encodings are printable ASCII")
    }
}

/// The kind byte of a lock's own key.
const LOCK: u8 = b'L';
/// The kind byte of a lock's fencing-token counter.
const TOKEN: u8 = b'T';
/// The kind byte of a semaphore's permit slots, followed by the slot number.
const SLOT: u8 = b'S';

/// The most digits a slot number has (slots are numbered from 0).
const SLOT_DIGITS: usize = 3;
const _: () = assert!(MAX_PERMITS <= 1000, "slot numbers must fit in SLOT_DIGITS");

/// The keys of one name's permit slots: `<prefix>S<slot><encoding>`. The
/// encoding starts with `=` or `#`, never a digit, so the slot number ends
/// where it begins and distinct (name, slot) pairs never share a key.
#[derive(Debug, Clone)]
pub(crate) struct SlotKeys {
    /// The prefix and the kind byte.
    head: String,
    encoding: String,
}

impl SlotKeys {
    /// The key of slot `slot`, which is below [`MAX_PERMITS`].
    pub(crate) fn key(&self, slot: u32) -> Key {
        debug_assert!(slot < MAX_PERMITS, "slot {slot}");
        Key::new(format!("{}{slot}{}", self.head, self.encoding))
            .expect("prefixes are checked, and encodings leave room for the slot")
    }
}

/// How a name is written into its keys: readable when that fits in the
/// key's budget, hashed otherwise.
enum Encoding<'a> {
    /// `=` and the name percent-encoded, with this many bytes escaped.
    Readable { name: &'a [u8], escaped: usize },
    /// `#` and the hex SHA-256 of the name.
    Hashed(&'a [u8]),
}

impl<'a> Encoding<'a> {
    fn of(name: &'a [u8], budget: usize) -> Self {
        let escaped = name.iter().filter(|&&b| !is_plain(b)).count();
        if 1 + name.len() + 2 * escaped <= budget {
            Self::Readable { name, escaped }
        } else {
            Self::Hashed(name)
        }
    }

    /// The encoding's length in bytes.
    fn len(&self) -> usize {
        match self {
            Self::Readable { name, escaped } => 1 + name.len() + 2 * escaped,
            Self::Hashed(_) => 1 + 64,
        }
    }

    /// Appends the encoding to `out`: printable ASCII without spaces.
    fn write(&self, out: &mut Vec<u8>) {
        match *self {
            Self::Readable { name, .. } => {
                out.push(b'=');
                // Runs of plain bytes are copied whole: names are mostly plain.
                let mut rest = name;
                while let Some(at) = rest.iter().position(|&b| !is_plain(b)) {
                    out.extend_from_slice(&rest[..at]);
                    out.push(b'%');
                    push_hex(out, rest[at], b"0123456789ABCDEF");
                    rest = &rest[at + 1..];
                }
                out.extend_from_slice(rest);
            }
            Self::Hashed(name) => {
                out.push(b'#');
                for byte in Sha256::digest(name) {
                    push_hex(out, byte, b"0123456789abcdef");
                }
            }
        }
    }
}

/// Appends `byte` as two hex digits from `digits`.
fn push_hex(out: &mut Vec<u8>, byte: u8, digits: &[u8; 16]) {
    out.push(digits[usize::from(byte >> 4)]);
    out.push(digits[usize::from(byte & 0x0f)]);
}

/// Consistent hashing of names onto servers, so that adding or removing a
/// server moves only about its share of names.
///
/// Each server gets [`POINTS_PER_SERVER`] points on a 64-bit ring, from the
/// SHA-256 of its address as written; a name belongs to the first point at
/// or after the SHA-256 of the name. Clients agree on where a name lives as
/// long as they list the same servers, spelled the same way, in any order.
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    points: Vec<(u64, usize)>,
    servers: usize,
}

const POINTS_PER_SERVER: usize = 160;

impl Ring {
    pub(crate) fn new<'a>(servers: impl IntoIterator<Item = &'a str>) -> Self {
        let mut points = Vec::new();
        let mut count = 0;
        for (index, addr) in servers.into_iter().enumerate() {
            for point in 0..POINTS_PER_SERVER {
                points.push((hash64(format!("{addr}-{point}").as_bytes()), index));
            }
            count = index + 1;
        }
        points.sort_unstable();
        Self {
            points,
            servers: count,
        }
    }

    /// The index of the server that holds `name`.
    pub(crate) fn server_of(&self, name: &LockName) -> usize {
        // A lone server holds every name: hashing would only cost time on
        // each operation.
        if self.servers <= 1 {
            return 0;
        }
        let hash = hash64(name.as_str().as_bytes());
        let at = self.points.partition_point(|&(point, _)| point < hash);
        self.points
            .get(at)
            .or_else(|| self.points.first())
            .map_or(0, |&(_, server)| server)
    }
}

fn hash64(bytes: &[u8]) -> u64 {
    let digest = Sha256::digest(bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    #[test]
    fn readable_names_stay_readable() {
        let keys = KeySpace::new(DEFAULT_PREFIX);
        assert_eq!(
            keys.lock_key(&name("reports/42")).as_str(),
            "lock:L=reports/42"
        );
        assert_eq!(
            keys.token_key(&name("reports/42")).as_str(),
            "lock:T=reports/42"
        );
        assert_eq!(
            keys.lock_key(&name("a b\r\n%")).as_str(),
            "lock:L=a%20b%0D%0A%25"
        );
    }

    #[test]
    fn keys_are_safe_for_every_name() {
        let keys = KeySpace::new(&"p".repeat(MAX_PREFIX_LEN));
        let long = "é".repeat(512);
        for raw in [
            "\0",
            "\r\n",
            " ",
            "flush_all",
            "x\r\nflush_all\r\n",
            "🦀",
            long.as_str(),
            &"%".repeat(1024),
        ] {
            for key in [keys.lock_key(&name(raw)), keys.token_key(&name(raw))] {
                assert!(key.as_str().len() <= MAX_KEY_LEN, "{key:?}");
                assert!(
                    key.as_str().bytes().all(|b| b.is_ascii_graphic()),
                    "{key:?}"
                );
            }
        }
    }

    #[test]
    fn distinct_names_get_distinct_keys() {
        let keys = KeySpace::new("");
        let long_a = "a".repeat(300);
        let long_b = format!("{}b", "a".repeat(299));
        let names = [
            "a",
            "A",
            "a%",
            "a%25",
            "a ",
            "a%20",
            "=a",
            "#a",
            long_a.as_str(),
            long_b.as_str(),
        ];
        let mut seen = HashSet::new();
        for raw in names {
            let name = name(raw);
            assert!(seen.insert(keys.lock_key(&name)), "{raw:?}");
            assert!(seen.insert(keys.token_key(&name)), "{raw:?}");
        }
        // The hashed form is used only when the readable one does not fit.
        assert!(keys.lock_key(&name(&long_a)).as_str().starts_with("L#"));
        assert!(
            keys.lock_key(&name(&"a".repeat(248)))
                .as_str()
                .starts_with("L=")
        );
        assert!(
            keys.lock_key(&name(&"a".repeat(249)))
                .as_str()
                .starts_with("L#")
        );
    }

    #[test]
    fn both_keys_are_the_keys_made_one_by_one() {
        let keys = KeySpace::new(DEFAULT_PREFIX);
        for raw in ["reports/42", "a b\r\n%", &"x".repeat(300), &"é".repeat(200)] {
            let name = name(raw);
            assert_eq!(
                keys.both_keys(&name),
                (keys.lock_key(&name), keys.token_key(&name)),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn prefixes_are_checked() {
        assert!(check_prefix("").is_ok());
        assert!(check_prefix("app/locks:").is_ok());
        for bad in ["a b", "a\r\n", "é", &"p".repeat(MAX_PREFIX_LEN + 1)] {
            match check_prefix(bad) {
                Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "prefix"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_ring_spreads_names_and_ignores_server_order() {
        let servers = ["10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211"];
        let ring = Ring::new(servers);
        let reversed = Ring::new(servers.iter().rev().copied());
        let mut counts = [0usize; 3];
        for i in 0..3000 {
            let name = name(&format!("job-{i}"));
            let server = ring.server_of(&name);
            counts[server] += 1;
            assert_eq!(servers[server], servers[2 - reversed.server_of(&name)]);
        }
        assert!(counts.iter().all(|&c| c > 500), "{counts:?}");
    }

    #[test]
    fn removing_a_server_moves_only_its_names() {
        let all = Ring::new(["a:1", "b:1", "c:1"]);
        let fewer = Ring::new(["a:1", "b:1"]);
        for i in 0..1000 {
            let name = name(&format!("n{i}"));
            let before = all.server_of(&name);
            if before != 2 {
                assert_eq!(fewer.server_of(&name), before);
            }
        }
    }

    #[test]
    fn slot_keys_are_distinct_safe_and_readable() {
        let keys = KeySpace::new("lock:");
        let slots = keys.slot_keys(&name("reports/42"));
        assert_eq!(slots.key(0).as_str(), "lock:S0=reports/42");
        assert_eq!(slots.key(999).as_str(), "lock:S999=reports/42");

        let long_prefix = KeySpace::new(&"p".repeat(MAX_PREFIX_LEN));
        let long = "a".repeat(1024);
        let mut seen = HashSet::new();
        for space in [&keys, &long_prefix] {
            // "a1" with slot 1 against "a" with slot 11: the encoding's
            // first byte keeps them apart.
            for raw in ["a", "a1", "1", "=a", "#a", long.as_str()] {
                let name = name(raw);
                assert!(seen.insert(space.lock_key(&name)), "{raw:?}");
                assert!(seen.insert(space.token_key(&name)), "{raw:?}");
                let slots = space.slot_keys(&name);
                for slot in [0, 1, 11, 110, MAX_PERMITS - 1] {
                    let key = slots.key(slot);
                    assert!(key.as_str().len() <= MAX_KEY_LEN, "{key:?}");
                    assert!(key.as_str().bytes().all(|b| b.is_ascii_graphic()));
                    assert!(seen.insert(key), "{raw:?} slot {slot}");
                }
            }
        }
    }

    #[test]
    fn a_lone_server_holds_every_name() {
        let ring = Ring::new(["a:1"]);
        for i in 0..100 {
            assert_eq!(ring.server_of(&name(&format!("n{i}"))), 0);
        }
    }
}

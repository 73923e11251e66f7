//! The channels releases are announced on, and what they carry.
//!
//! Each table has 64 channels, `distlock_<table>_<bucket>`, and a
//! name's releases go to the channel of its bucket, with the name's hash
//! as the payload. A process listens only on the buckets of the names it
//! waits for, so a release reaches the processes that wait for that name,
//! or for one of the few names that share its bucket. Channel names are
//! made of distlock's prefix, hex digits and underscores only, never of a
//! user's text, so they are valid identifiers under any quoting.

use distlock_core::LockName;
use distlock_core::backend::LeaseId;

use crate::table::TableName;

/// One table's releases are spread over 2^BUCKET_BITS channels.
const BUCKET_BITS: u32 = 6;

/// What every channel name starts with.
const PREFIX: &str = "distlock_";

/// A 64-bit FNV-1a hash: the same in every process and every release, as
/// the channels of a table must be.
fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

/// MurmurHash3's 64-bit finalizer: every bit of `hash` then moves every
/// bit of the result, which FNV-1a alone does not do for its top bits.
fn mix(mut hash: u64) -> u64 {
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// A name's hash, which picks its bucket and is its releases' payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct NameHash(u64);

impl NameHash {
    pub(crate) fn of(name: &LockName) -> Self {
        Self(mix(fnv1a(name.as_str().as_bytes())))
    }

    /// The hash a release's payload carries; `None` for a payload distlock
    /// did not send.
    pub(crate) fn from_payload(payload: &str) -> Option<Self> {
        let hex = payload.len() == 16 && payload.bytes().all(|byte| byte.is_ascii_hexdigit());
        hex.then(|| u64::from_str_radix(payload, 16).ok())
            .flatten()
            .map(Self)
    }

    /// The hash and the place of a release that granted a waiter's place
    /// in fair mode: the name's payload, `/` and the place's id (32 hex
    /// digits); `None` for another payload.
    pub(crate) fn granting(payload: &str) -> Option<(Self, &str)> {
        let (hash, place) = payload.split_once('/')?;
        let place_ok = place.len() == 32 && place.bytes().all(|byte| byte.is_ascii_hexdigit());
        place_ok.then_some(())?;
        Some((Self::from_payload(hash)?, place))
    }

    /// The hash itself, for other uses of a stable hash of a name.
    pub(crate) fn bits(self) -> u64 {
        self.0
    }

    /// The payload of this name's releases: 16 hex digits.
    pub(crate) fn payload(self) -> String {
        format!("{:016x}", self.0)
    }

    /// The name's bucket: the hash's top bits.
    pub(crate) fn bucket(self) -> Bucket {
        Bucket(u8::try_from(self.0 >> (64 - BUCKET_BITS)).expect("a bucket fits a byte"))
    }
}

/// One of a table's channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Bucket(u8);

/// A channel's name: [`PREFIX`], then hex digits and underscores.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Channel(String);

impl Channel {
    /// A channel no other connection uses, for probing whether
    /// notifications arrive.
    pub(crate) fn probe() -> Self {
        Self(format!("{PREFIX}probe_{}", LeaseId::random()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The statement that starts listening on this channel.
    pub(crate) fn listen(&self) -> String {
        format!("LISTEN {};", self.quoted())
    }

    /// The statement that stops listening on this channel.
    pub(crate) fn unlisten(&self) -> String {
        format!("UNLISTEN {};", self.quoted())
    }

    /// The name as an SQL identifier. Quoting keeps the case; the name has
    /// no quote to double.
    fn quoted(&self) -> String {
        debug_assert!(
            self.0
                .bytes()
                .all(|byte| byte == b'_' || byte.is_ascii_lowercase() || byte.is_ascii_digit())
        );
        format!("\"{}\"", self.0)
    }
}

/// A table's channels.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Channels {
    /// The hash of the schema-qualified table name: tables of one database
    /// have channels of their own.
    table: u64,
}

impl Channels {
    pub(crate) fn new(table: &TableName) -> Self {
        Self {
            table: fnv1a(table.quoted().as_bytes()),
        }
    }

    /// The channel of `bucket`.
    pub(crate) fn of(self, bucket: Bucket) -> Channel {
        Channel(format!("{PREFIX}{:016x}_{:02x}", self.table, bucket.0))
    }

    /// What a release of `name` sends: the channel and the payload, as the
    /// statement's parameters.
    pub(crate) fn announce(self, name: &LockName) -> (String, String) {
        let hash = NameHash::of(name);
        (self.of(hash.bucket()).0, hash.payload())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_fnv1a_and_stable() {
        // The published FNV-1a test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn channels_are_short_safe_identifiers_of_their_table() {
        let one = Channels::new(&TableName::new("public", "locks").unwrap());
        let other = Channels::new(&TableName::new("public", "other \"locks\"").unwrap());
        let name = LockName::new("'); DROP TABLE x; --\"").unwrap();
        let (channel, payload) = one.announce(&name);
        assert!(channel.len() <= 63, "{channel}");
        assert!(channel.starts_with(PREFIX), "{channel}");
        assert!(
            channel
                .bytes()
                .all(|b| b == b'_' || b.is_ascii_hexdigit() || b.is_ascii_lowercase()),
            "{channel}"
        );
        assert_ne!(channel, other.announce(&name).0);
        assert_eq!(NameHash::from_payload(&payload), Some(NameHash::of(&name)));
        let listen = Channel(channel.clone()).listen();
        assert_eq!(listen, format!("LISTEN \"{channel}\";"));
    }

    #[test]
    fn names_spread_over_every_bucket() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            let name = LockName::new(format!("job-{i}")).unwrap();
            seen.insert(NameHash::of(&name).bucket());
        }
        assert_eq!(seen.len(), 1 << BUCKET_BITS);
    }

    #[test]
    fn foreign_payloads_are_ignored() {
        assert_eq!(NameHash::from_payload("hello"), None);
        assert_eq!(NameHash::from_payload("+123456789abcdef"), None);
        assert_eq!(NameHash::from_payload(""), None);
        let place = "0123456789abcdef0123456789abcdef";
        let hash = NameHash::of(&LockName::new("x").unwrap());
        let granting = format!("{}/{place}", hash.payload());
        assert_eq!(NameHash::from_payload(&granting), None);
        assert_eq!(NameHash::granting(&granting), Some((hash, place)));
        assert_eq!(
            NameHash::granting(&format!("{}/short", hash.payload())),
            None
        );
        assert_eq!(NameHash::granting(&hash.payload()), None);
    }
}

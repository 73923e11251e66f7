//! Leases as memcached expiry times, fencing-token seeds, and what a lock
//! key stores.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use distlock_core::backend::LeaseId;
use distlock_core::{Error, Holder, LockName, Result};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// The longest relative expiry memcached accepts, in seconds (30 days).
/// A larger number is read as a Unix timestamp.
pub(crate) const MAX_RELATIVE_EXPIRY: u64 = 60 * 60 * 24 * 30;

/// The longest lease this backend accepts: 30 days less one second, since
/// the expiry sent is one second longer than the lease (see [`lease_ttl`]).
pub const MAX_LEASE: Duration = Duration::from_secs(MAX_RELATIVE_EXPIRY - 1);

/// The expiry, in whole seconds, that memcached is sent for `lease`.
///
/// memcached keeps time in whole seconds and advances its clock once a
/// second, so an item stored with an expiry of `n` seconds lives somewhere
/// between `n - 1` and `n` seconds ("a TTL of 1 will sometimes immediately
/// expire", says its protocol description). So the lease is rounded up to a
/// whole second, never down, and one second is added: the item then lives
/// at least as long as the lease. 200 ms becomes 2 s, 1 s becomes 2 s,
/// 1.5 s becomes 3 s. The result is never 0, which memcached reads as
/// "never expires".
///
/// # Errors
/// [`Error::InvalidConfig`] for the field `lease` when the lease is zero or
/// longer than [`MAX_LEASE`] (30 days less a second): memcached would read
/// a longer expiry as a Unix timestamp in 1970 and drop the lock at once.
///
/// ```
/// use std::time::Duration;
/// use distlock_memcached::lease_ttl;
///
/// assert_eq!(lease_ttl(Duration::from_millis(200))?, 2);
/// assert_eq!(lease_ttl(Duration::from_secs(30))?, 31);
/// assert!(lease_ttl(Duration::from_secs(31 * 86_400)).is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
pub fn lease_ttl(lease: Duration) -> Result<u32> {
    if lease.is_zero() {
        return Err(Error::config("lease", "a lease must be longer than zero"));
    }
    if lease > MAX_LEASE {
        return Err(Error::config(
            "lease",
            format!(
                "{lease:?} is too long for memcached, which takes expiry times of at most 30 days; \
                 use a lease of at most {}s",
                MAX_LEASE.as_secs()
            ),
        ));
    }
    let whole = lease.as_secs() + u64::from(lease.subsec_nanos() > 0);
    u32::try_from(whole + 1).map_err(|_| Error::config("lease", "too long"))
}

/// The seed of a fencing-token counter created now: the core's
/// [`token_floor`](distlock_core::backend::token_floor), microseconds since the Unix
/// epoch on this machine's clock.
pub(crate) fn token_seed(now: SystemTime) -> u64 {
    distlock_core::backend::token_floor(now)
}

/// The longest lock value stored. memcached cannot be told to refuse an
/// item too large for it without harm: when it cannot allocate a store, it
/// deletes the key's current item, which for a competitor's `add` is the
/// holder's lock. So lock values stay small enough for the smallest item
/// size memcached allows (`-I 1k`), with a 250-byte key.
pub(crate) const MAX_LOCK_VALUE: usize = 600;

/// How many characters of the name and of each holder field a lock value
/// keeps when the whole would be longer than [`MAX_LOCK_VALUE`].
const SHORTENED_FIELD: usize = 24;

/// What a lock key holds: the grant's identity in 32 hex digits, a line
/// feed, and JSON naming the lock and its holder, for people inspecting
/// the cache. The JSON is informative only, and shortened (or, at worst,
/// left empty) to keep the value within [`MAX_LOCK_VALUE`] bytes, except
/// for one mark that a resume reads ([`Passing::OnInProcess`]), which is
/// never left out.
pub(crate) fn lock_value(id: LeaseId, name: &LockName, holder: &Holder) -> Arc<[u8]> {
    Arc::from(&lock_value_inline(id, name, holder, Passing::Never)[..])
}

/// Whether a hold may pass from grant to grant within its process
/// without a server command, as hand-over's tokens reserved in advance
/// let it (see `LockGrant::pass_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Passing {
    /// The identity stored is that of the grant that holds the lock.
    Never,
    /// A hold made by a hand-over through the server: the identity stored
    /// may be that of a grant that handed the lock on since, so the value
    /// says so (`"passes_on":true`), and a resume never takes it up.
    OnInProcess,
}

/// [`lock_value`], without an allocation of its own: a grant keeps it
/// inline, in the one allocation of its state.
pub(crate) fn lock_value_inline(
    id: LeaseId,
    name: &LockName,
    holder: &Holder,
    passing: Passing,
) -> LockValue {
    let value = value_with(id, name.as_str(), holder, passing);
    if value.len() <= MAX_LOCK_VALUE {
        return value;
    }
    let shortened = Holder {
        host: shorten(&holder.host),
        pid: holder.pid,
        label: holder.label.as_deref().map(shorten),
    };
    let value = value_with(id, &shorten(name.as_str()), &shortened, passing);
    if value.len() <= MAX_LOCK_VALUE {
        return value;
    }
    let mut value = LockValue::new();
    value.extend_from_slice(&hex_id(id));
    value.extend_from_slice(match passing {
        Passing::Never => b"\n{}".as_slice(),
        Passing::OnInProcess => b"\n{\"passes_on\":true}".as_slice(),
    });
    value
}

/// A lock value: on the stack, or inline in a grant's state, up to
/// [`MAX_LOCK_VALUE`] and some, so that a grant allocates no value of its
/// own.
pub(crate) type LockValue = SmallVec<[u8; MAX_LOCK_VALUE + 40]>;

fn value_with(id: LeaseId, name: &str, holder: &Holder, passing: Passing) -> LockValue {
    #[derive(Serialize)]
    struct Details<'a> {
        name: &'a str,
        holder: &'a Holder,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        passes_on: bool,
    }
    let details = Details {
        name,
        holder,
        passes_on: passing == Passing::OnInProcess,
    };
    let mut value = LockValue::new();
    value.extend_from_slice(&hex_id(id));
    value.push(b'\n');
    serde_json::to_writer(&mut value, &details).expect("serialising to memory cannot fail");
    value
}

/// `id` as 32 lowercase hex digits, as its `Display` writes it, without
/// the formatting machinery: every grant writes one.
fn hex_id(id: LeaseId) -> [u8; 32] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let bits = id.as_u128();
    std::array::from_fn(|at| DIGITS[((bits >> (4 * (31 - at))) & 0xf) as usize])
}

/// The first [`SHORTENED_FIELD`] characters of `text`, with an ellipsis
/// when some were left out.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(SHORTENED_FIELD) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Whether `value` is the lock value of grant `id`.
pub(crate) fn is_ours(value: &[u8], id: LeaseId) -> bool {
    let id = hex_id(id);
    value.len() > id.len() && value.starts_with(&id) && value[id.len()] == b'\n'
}

/// Whether lock value `value` (one that [`is_ours`] accepted) is marked
/// as a hold that may have passed on within its process
/// ([`Passing::OnInProcess`]). A value whose JSON cannot be read is taken
/// as marked: a resume then refuses it, which is safe.
pub(crate) fn may_pass_on(value: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Marks {
        #[serde(default)]
        passes_on: bool,
    }
    let json = value.get(hex_id(LeaseId::from_u128(0)).len() + 1..);
    json.and_then(|json| serde_json::from_slice::<Marks>(json).ok())
        .is_none_or(|marks| marks.passes_on)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(result: Result<u32>) -> String {
        match result {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn leases_round_up_and_gain_a_second() {
        let cases = [
            (Duration::from_millis(1), 2),
            (Duration::from_millis(200), 2),
            (Duration::from_millis(999), 2),
            (Duration::from_secs(1), 2),
            (Duration::from_millis(1001), 3),
            (Duration::from_secs(2), 3),
            (Duration::from_secs(30), 31),
            (MAX_LEASE, 2_592_000),
        ];
        for (lease, ttl) in cases {
            assert_eq!(lease_ttl(lease).unwrap(), ttl, "{lease:?}");
        }
    }

    #[test]
    fn zero_and_over_thirty_days_are_refused() {
        assert_eq!(field_of(lease_ttl(Duration::ZERO)), "lease");
        assert_eq!(
            field_of(lease_ttl(MAX_LEASE + Duration::from_nanos(1))),
            "lease"
        );
        assert_eq!(
            field_of(lease_ttl(Duration::from_secs(31 * 86_400))),
            "lease"
        );
    }

    #[test]
    fn seeds_are_microseconds() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(token_seed(at), 1_700_000_000_123_456);
    }

    #[test]
    fn values_carry_the_identity_first() {
        let id = LeaseId::random();
        let name = LockName::new("a\r\nb\0").unwrap();
        let holder = Holder::this_process(Some("x"));
        let value = lock_value(id, &name, &holder);
        assert!(is_ours(&value, id));
        assert!(!is_ours(&value, LeaseId::random()));
        assert!(!is_ours(id.to_string().as_bytes(), id));
        let text = String::from_utf8(value.to_vec()).unwrap();
        let (_, json) = text.split_once('\n').unwrap();
        let parsed: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(parsed["name"], "a\r\nb\0");
        assert_eq!(parsed["holder"]["label"], "x");
    }

    #[test]
    fn a_hand_over_marks_its_value_whatever_its_length() {
        let id = LeaseId::random();
        let holder = Holder::this_process(Some("x"));
        let huge = Holder::this_process(Some(&"é".repeat(1 << 20)));
        let short = LockName::new("a").unwrap();
        let long = LockName::new("\0".repeat(1024)).unwrap();
        for (name, holder) in [(&short, &holder), (&long, &huge)] {
            let marked = lock_value_inline(id, name, holder, Passing::OnInProcess);
            assert!(is_ours(&marked, id));
            assert!(marked.len() <= MAX_LOCK_VALUE, "{} bytes", marked.len());
            assert!(may_pass_on(&marked));
            let plain = lock_value_inline(id, name, holder, Passing::Never);
            assert!(!may_pass_on(&plain));
        }
        // A value whose JSON cannot be read is taken as marked.
        assert!(may_pass_on(format!("{id}\nnot json").as_bytes()));
        assert!(may_pass_on(id.to_string().as_bytes()));
    }

    #[test]
    fn identities_are_written_as_display_writes_them() {
        for id in [
            LeaseId::from_u128(0),
            LeaseId::from_u128(u128::MAX),
            LeaseId::random(),
        ] {
            assert_eq!(hex_id(id).to_vec(), id.to_string().into_bytes());
        }
    }

    #[test]
    fn values_stay_small_whatever_the_name_and_label() {
        let id = LeaseId::random();
        let long_name = LockName::new("n".repeat(1024)).unwrap();
        let escaped_name = LockName::new("\0".repeat(1024)).unwrap();
        let huge_label = "é".repeat(1 << 20);
        for name in [&long_name, &escaped_name] {
            for label in [None, Some("x"), Some(huge_label.as_str())] {
                let value = lock_value(id, name, &Holder::this_process(label));
                assert!(value.len() <= MAX_LOCK_VALUE, "{} bytes", value.len());
                assert!(is_ours(&value, id));
                let text = String::from_utf8(value.to_vec()).unwrap();
                let (_, json) = text.split_once('\n').unwrap();
                let parsed: serde_json::Value = serde_json::from_str(json).unwrap();
                assert!(parsed.is_object());
            }
        }
        let shortened = lock_value(id, &long_name, &Holder::this_process(Some("x")));
        let text = String::from_utf8(shortened.to_vec()).unwrap();
        assert!(
            text.contains(&format!("{}…", "n".repeat(SHORTENED_FIELD))),
            "{text}"
        );
    }
}

//! The handle a process keeps to take its lock up again after a restart:
//! which grant it holds, as a line of text.

use std::fmt;
use std::str::FromStr;

use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};

use crate::backend::LeaseId;
use crate::claim::Claim;
use crate::error::{Error, Result};
use crate::name::LockName;

/// What starts every handle's text, with its format's version.
const PREFIX: &str = "distlock-resume/1";

/// What a name escapes in a handle's text: what would end the field or the
/// line, and the escape sign itself (non-ASCII is always escaped).
const NAME_ESCAPES: &AsciiSet = &CONTROLS.add(b' ').add(b'%');

/// Which grant a guard holds, so that a process that restarts while it
/// holds a lock can take that very grant up again with
/// [`LockClient::resume`](crate::LockClient::resume), with the same
/// fencing token, instead of waiting behind itself until the lease runs
/// out.
///
/// Get one from [`LockGuard::handle`](crate::LockGuard::handle). Its text
/// form ([`Display`](fmt::Display) and [`FromStr`], and the same string
/// through serde) is one line, made to be written to a file and read back
/// by the next run of the process:
///
/// ```text
/// distlock-resume/1 redis exclusive 6f1c…9a2e 42 jobs%2Fnightly
/// ```
///
/// The grant's identity is in it, and whoever has the handle can take the
/// lock over: keep it as you would keep a credential (a file only its
/// owner reads). Its [`Debug`](fmt::Debug) form leaves the identity out.
///
/// A handle names one grant. Once resumed, the grant has a new identity,
/// so the handle is spent: a second resume of it fails with
/// [`Error::Lost`]. Take a new handle from the resumed guard.
#[derive(Clone, PartialEq, Eq)]
pub struct ResumeHandle {
    store: String,
    claim: Claim,
    id: LeaseId,
    fencing_token: u64,
    name: LockName,
}

impl ResumeHandle {
    /// The handle of the grant `id` of `claim` on `name`, made by a
    /// backend whose store is `store`.
    pub(crate) fn new(
        store: &str,
        name: LockName,
        claim: Claim,
        id: LeaseId,
        fencing_token: u64,
    ) -> Self {
        Self {
            store: store.to_owned(),
            claim,
            id,
            fencing_token,
            name,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// What the grant holds.
    pub fn claim(&self) -> Claim {
        self.claim
    }

    /// The grant's fencing token, which a resumed guard keeps.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The short name of the store that made the grant (`redis`,
    /// `mongodb`, …; see
    /// [`Backend::store_name`](crate::backend::Backend::store_name)).
    pub fn store(&self) -> &str {
        &self.store
    }

    /// The grant's identity.
    pub(crate) fn lease_id(&self) -> LeaseId {
        self.id
    }
}

impl fmt::Debug for ResumeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResumeHandle")
            .field("store", &self.store)
            .field("name", &self.name)
            .field("claim", &self.claim)
            .field("fencing_token", &self.fencing_token)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for ResumeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let claim = match self.claim {
            Claim::Exclusive => "exclusive".to_owned(),
            Claim::Shared => "shared".to_owned(),
            Claim::Permit { limit } => format!("permit/{limit}"),
        };
        write!(
            f,
            "{PREFIX} {} {claim} {} {} {}",
            self.store,
            self.id,
            self.fencing_token,
            utf8_percent_encode(self.name.as_str(), NAME_ESCAPES)
        )
    }
}

/// A handle's text that cannot be read, and why.
fn unreadable(reason: impl fmt::Display) -> Error {
    Error::config(
        "resume handle",
        format!(
            "{reason}; a handle reads `{PREFIX} <store> <claim> <identity> <token> <name>`, \
             as `LockGuard::handle()` wrote it"
        ),
    )
}

impl FromStr for ResumeHandle {
    type Err = Error;

    /// Reads a handle as [`Display`](fmt::Display) wrote it; whitespace
    /// around it (a file's last newline) is ignored.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for `resume handle`, saying what is wrong.
    fn from_str(text: &str) -> Result<Self> {
        let fields: Vec<&str> = text.split_ascii_whitespace().collect();
        let [prefix, store, claim, id, token, name] = fields[..] else {
            return Err(unreadable(format!("it has {} fields, not 6", fields.len())));
        };
        if prefix != PREFIX {
            return Err(unreadable(format!("it starts with `{prefix}`")));
        }
        let claim = match claim {
            "exclusive" => Claim::Exclusive,
            "shared" => Claim::Shared,
            other => {
                let limit = other
                    .strip_prefix("permit/")
                    .and_then(|limit| limit.parse().ok())
                    .ok_or_else(|| unreadable(format!("`{other}` is no claim")))?;
                Claim::permit(limit)?
            }
        };
        let id = u128::from_str_radix(id, 16)
            .ok()
            .filter(|_| id.len() == 32)
            .map(LeaseId::from_u128)
            .ok_or_else(|| unreadable("its identity is not 32 hexadecimal digits"))?;
        let fencing_token = token
            .parse()
            .map_err(|_| unreadable(format!("its token `{token}` is not a number")))?;
        let name = percent_decode_str(name)
            .decode_utf8()
            .map_err(|_| unreadable("its name is not UTF-8 once decoded"))?;
        Ok(Self {
            store: store.to_owned(),
            claim,
            id,
            fencing_token,
            name: LockName::new(name)?,
        })
    }
}

impl serde::Serialize for ResumeHandle {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ResumeHandle {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(claim: Claim, name: &str) -> ResumeHandle {
        ResumeHandle::new(
            "redis",
            LockName::new(name).unwrap(),
            claim,
            LeaseId::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            42,
        )
    }

    #[test]
    fn a_handle_reads_back_as_it_was_written() {
        for claim in [Claim::Exclusive, Claim::Shared, Claim::Permit { limit: 3 }] {
            for name in [
                "jobs/nightly",
                "with space",
                "50%",
                "line\nbreak",
                "ünïcode",
            ] {
                let written = handle(claim, name);
                let text = written.to_string();
                assert_eq!(text.lines().count(), 1, "{text}");
                let read: ResumeHandle = format!("  {text}\n").parse().unwrap();
                assert_eq!(read, written, "{text}");
            }
        }
        assert_eq!(
            handle(Claim::Permit { limit: 3 }, "a b").to_string(),
            "distlock-resume/1 redis permit/3 0123456789abcdef0011223344556677 42 a%20b"
        );
    }

    #[test]
    fn debug_leaves_the_identity_out() {
        let shown = format!("{:?}", handle(Claim::Exclusive, "x"));
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
        assert!(shown.contains("fencing_token: 42"), "{shown}");
    }

    #[test]
    fn bad_text_is_refused_saying_what_is_wrong() {
        let good = handle(Claim::Exclusive, "x").to_string();
        let cases = [
            ("", "0 fields"),
            (
                "distlock-resume/2 redis exclusive 0123456789abcdef0011223344556677 42 x",
                "starts with",
            ),
            (&good.replace("exclusive", "writer"), "no claim"),
            (&good.replace("exclusive", "permit/0"), "permits"),
            (
                &good.replace("0123456789abcdef0011223344556677", "0123"),
                "hexadecimal",
            ),
            (&good.replace(" 42 ", " -1 "), "not a number"),
            (&good.replace(" x", " %ff"), "UTF-8"),
            (&format!("{good} extra"), "7 fields"),
        ];
        for (text, says) in cases {
            let error = text.parse::<ResumeHandle>().unwrap_err().to_string();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn serde_reads_the_text_form() {
        use serde::de::value::{Error as ValueError, StrDeserializer};
        let written = handle(Claim::Shared, "jobs/nightly");
        let text = written.to_string();
        let read = <ResumeHandle as serde::Deserialize>::deserialize(
            StrDeserializer::<ValueError>::new(&text),
        )
        .unwrap();
        assert_eq!(read, written);
        let refused =
            <ResumeHandle as serde::Deserialize>::deserialize(StrDeserializer::<ValueError>::new(
                "not a handle",
            ));
        assert!(refused.is_err());
    }
}

//! The body of a lock's object: the name, its fencing token, the grant
//! that holds it (if any), and the identity of the write that stored it.
//!
//! Every write stores a fresh [`WriteId`]. It does two jobs:
//! - the body of every write differs from every earlier one, so its ETag
//!   does too (S3's ETag of a simple upload is the MD5 of its bytes): a
//!   holder's extension always changes what a waiter sees, and a waiter
//!   never mistakes a new write for the one it saw before;
//! - a write whose answer was lost, or that the HTTP client sent twice, is
//!   recognised afterwards by reading the object: it landed if and only if
//!   the object holds its identity.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use distlock_core::backend::{Holder, LeaseId};
use distlock_core::{Error, LockName, Result};

/// The format of the body, stored in it, so that a later version can read
/// what an earlier one wrote, and refuse what it cannot.
const FORMAT: u32 = 1;

/// The random identity of one write.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteId(u128);

impl WriteId {
    /// A fresh identity.
    pub(crate) fn random() -> Self {
        Self(rand::random())
    }
}

impl fmt::Debug for WriteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Who holds a lock, as its object records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The grant's identity: only its holder extends or releases it.
    pub(crate) id: LeaseId,
    pub(crate) holder: Holder,
    /// The lease the holder counts from each write: a waiter presumes the
    /// holder dead after seeing the object unchanged for this long.
    pub(crate) lease: Duration,
}

/// A lock's object, as read or to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) name: LockName,
    /// The fencing token of the last grant: a free lock keeps it, so the
    /// next grant's is greater.
    pub(crate) token: u64,
    pub(crate) grant: Option<Grant>,
    pub(crate) write: WriteId,
}

impl Record {
    /// `grant` holding `name` with `token`, as a new write.
    pub(crate) fn held(name: &LockName, token: u64, grant: Grant) -> Self {
        Self {
            name: name.clone(),
            token,
            grant: Some(grant),
            write: WriteId::random(),
        }
    }

    /// `name` free, keeping `token`, as a new write.
    pub(crate) fn free(name: &LockName, token: u64) -> Self {
        Self {
            name: name.clone(),
            token,
            grant: None,
            write: WriteId::random(),
        }
    }

    /// Whether `id` holds this record's lock.
    pub(crate) fn held_by(&self, id: LeaseId) -> bool {
        self.grant.as_ref().is_some_and(|grant| grant.id == id)
    }

    /// The body to store.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let stored = Stored {
            format: FORMAT,
            name: self.name.as_str().to_owned(),
            token: self.token,
            grant: self.grant.as_ref().map(|grant| StoredGrant {
                id: format!("{:032x}", grant.id.as_u128()),
                holder: grant.holder.clone(),
                lease_ms: u64::try_from(grant.lease.as_millis()).unwrap_or(u64::MAX),
            }),
            write: format!("{:032x}", self.write.0),
        };
        // A struct of strings and numbers always serialises.
        serde_json::to_vec(&stored).unwrap_or_default()
    }

    /// Reads the body of the object at `key`.
    ///
    /// # Errors
    /// [`Error::InvalidData`] naming the field at fault, for a body this
    /// version cannot read: not ours, damaged, or written by a later
    /// format.
    pub(crate) fn decode(key: &str, body: &[u8]) -> Result<Self> {
        let what = || format!("lock object {key}");
        let bad = |field: &str, reason: String| Error::InvalidData {
            what: what(),
            field: field.to_owned(),
            reason,
        };
        let stored: Stored = serde_json::from_slice(body)
            .map_err(|error| bad(".", format!("not a lock record: {error}")))?;
        if stored.format != FORMAT {
            return Err(bad(
                "format",
                format!(
                    "format {} is not {FORMAT}, the one this version of distlock writes",
                    stored.format
                ),
            ));
        }
        let name = LockName::new(&stored.name).map_err(|error| bad("name", error.to_string()))?;
        let grant = stored
            .grant
            .map(|grant| {
                let id = parse_hex(&grant.id)
                    .ok_or_else(|| bad("grant.id", "not 32 hexadecimal digits".to_owned()))?;
                Ok::<_, Error>(Grant {
                    id: LeaseId::from_u128(id),
                    holder: grant.holder,
                    lease: Duration::from_millis(grant.lease_ms),
                })
            })
            .transpose()?;
        let write = parse_hex(&stored.write)
            .ok_or_else(|| bad("write", "not 32 hexadecimal digits".to_owned()))?;
        Ok(Self {
            name,
            token: stored.token,
            grant,
            write: WriteId(write),
        })
    }
}

/// A 128-bit number written as 32 hexadecimal digits.
fn parse_hex(text: &str) -> Option<u128> {
    (text.len() == 32)
        .then(|| u128::from_str_radix(text, 16).ok())
        .flatten()
}

/// The body as stored: JSON, so that a person can read an object with the
/// cloud's own tools.
#[derive(Serialize, Deserialize)]
struct Stored {
    format: u32,
    name: String,
    token: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    grant: Option<StoredGrant>,
    write: String,
}

#[derive(Serialize, Deserialize)]
struct StoredGrant {
    id: String,
    holder: Holder,
    lease_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    fn grant() -> Grant {
        Grant {
            id: LeaseId::random(),
            holder: Holder {
                host: "web-1".into(),
                pid: 42,
                label: Some("nightly".into()),
            },
            lease: Duration::from_millis(30_000),
        }
    }

    #[test]
    fn a_record_reads_back_as_it_was_written() {
        for record in [
            Record::held(&name("a\u{0}b$.c\r\n"), 7, grant()),
            Record::free(&name("free"), u64::MAX),
        ] {
            assert_eq!(Record::decode("k", &record.encode()).unwrap(), record);
        }
    }

    #[test]
    fn every_write_has_a_body_of_its_own() {
        let grant = grant();
        let first = Record::held(&name("n"), 1, grant.clone());
        let second = Record::held(&name("n"), 1, grant);
        assert_ne!(first.encode(), second.encode());
    }

    #[test]
    fn a_body_that_is_not_a_record_names_the_field_at_fault() {
        let cases: [(&[u8], &str); 4] = [
            (b"hello", "."),
            (
                br#"{"format":2,"name":"n","token":1,"write":"00000000000000000000000000000001"}"#,
                "format",
            ),
            (
                br#"{"format":1,"name":"n","token":1,"write":"xyz"}"#,
                "write",
            ),
            (
                br#"{"format":1,"name":"","token":1,"write":"00000000000000000000000000000001"}"#,
                "name",
            ),
        ];
        for (body, field) in cases {
            match Record::decode("k", body) {
                Err(Error::InvalidData { field: got, .. }) => assert_eq!(got, field),
                other => panic!("{body:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn held_by_is_true_only_for_the_grant_itself() {
        let record = Record::held(&name("n"), 1, grant());
        let id = record.grant.as_ref().unwrap().id;
        assert!(record.held_by(id));
        assert!(!record.held_by(LeaseId::random()));
        assert!(!Record::free(&name("n"), 1).held_by(id));
    }
}

//! The scripts' replies, read into what they mean.

use std::time::{Duration, SystemTime};

use distlock_core::backend::Waiters;
use distlock_core::{Claim, LockInfo, LockKind, LockName, Permits};
use redis::Value;

use crate::keys::{Stored, tag};

/// What one server, or a quorum of them, answered to an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Granted, with this fencing token.
    Granted(u64),
    /// One server in quorum mode, which came back empty less than a lease
    /// ago: granted, with this fencing token, but the grant counts towards
    /// no majority for `left` yet (see `ABSTAIN` in the scripts).
    Abstained { token: u64, left: Duration },
    /// Held by others: the time until the first of them expires, when
    /// known, and whether this waiting writer's mark is stored.
    Held {
        left: Option<Duration>,
        marked: bool,
    },
    /// Held as another kind, or with another limit.
    Conflict(Claim),
    /// Quorum mode, to a waiting attempt: it may have taken some servers,
    /// but not a majority, and rolled them back; it took `took`.
    Split { took: Duration, marked: bool },
}

impl Answer {
    /// Reads the acquire script's reply (see scripts.rs); `None` for
    /// anything else.
    pub(crate) fn parse(reply: &Value) -> Option<Self> {
        let Value::Array(fields) = reply else {
            return None;
        };
        match (fields.first().and_then(int), fields.get(1), fields.get(2)) {
            (Some(1), Some(token), abstain) => {
                let token = fencing_token(token)?;
                match abstain.and_then(int).and_then(|ms| u64::try_from(ms).ok()) {
                    Some(ms) if ms > 0 => Some(Self::Abstained {
                        token,
                        left: Duration::from_millis(ms),
                    }),
                    _ => Some(Self::Granted(token)),
                }
            }
            (Some(0), Some(left), Some(marked)) => Some(Self::Held {
                left: int(left)
                    .and_then(|left| u64::try_from(left).ok())
                    .map(Duration::from_millis),
                marked: int(marked) == Some(1),
            }),
            (Some(2), Some(kind), Some(limit)) => {
                Some(Self::Conflict(match (text(kind).as_deref(), int(limit)) {
                    (Some("s"), _) => Claim::Shared,
                    (Some("p"), Some(limit)) => Claim::Permit {
                        limit: u32::try_from(limit).unwrap_or(0),
                    },
                    _ => Claim::Exclusive,
                }))
            }
            _ => None,
        }
    }
}

/// One live grant as one server lists it, with the grant's identity, by
/// which quorum mode matches the copies that several servers hold.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub(crate) id: String,
    pub(crate) info: LockInfo,
    /// Whether the token is a quorum copy's own, written before the grant
    /// was decided (see [`Stored`]).
    pub(crate) provisional: bool,
}

/// A granted token: a number, or its digits (the acquire script's common
/// path never turns them into a number).
fn fencing_token(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(digits) => std::str::from_utf8(digits).ok()?.parse().ok(),
        _ => None,
    }
}

pub(crate) fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

pub(crate) fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        _ => None,
    }
}

pub(crate) fn is_noscript(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(error) if error.code() == "NOSCRIPT")
}

/// Adds the live grants of one name, as the inspect script read them, to
/// `out`. Grants whose records do not parse, or whose name does not give
/// this tag, are not ours and are left out.
pub(crate) fn read_grants(name_tag: &str, fields: &[Value], out: &mut Vec<Listed>) {
    let ours = |stored: &Stored| -> Option<LockName> {
        let name = LockName::new(&stored.record.name).ok()?;
        (tag(&name) == name_tag).then_some(name)
    };
    let listed = |id: &[u8], name, kind, permits, stored: Stored, left: i64| Listed {
        id: String::from_utf8_lossy(id).into_owned(),
        info: LockInfo {
            name,
            kind,
            permits,
            holder: Some(stored.record.holder),
            fencing_token: Some(stored.token),
            expires_in: u64::try_from(left).ok().map(Duration::from_millis),
            waiters: Waiters::Unknown,
        },
        provisional: stored.provisional,
    };
    if let (Some(value), Some(left)) = (fields.first().and_then(bytes), fields.get(1).and_then(int))
        && let Some((id, stored)) = Stored::parse_exclusive(value)
        && let Some(name) = ours(&stored)
    {
        out.push(listed(id, name, LockKind::Exclusive, None, stored, left));
    }
    let kind = fields.get(2).and_then(text);
    let limit = fields
        .get(3)
        .and_then(int)
        .and_then(|limit| u32::try_from(limit).ok())
        .unwrap_or(0);
    let grants = fields.get(4..).unwrap_or_default();
    let in_use = u32::try_from(grants.len() / 3).unwrap_or(u32::MAX);
    let (kind, permits) = match kind.as_deref() {
        Some("s") => (LockKind::Shared, None),
        Some("p") => (LockKind::Semaphore, Some(Permits { in_use, limit })),
        _ => return,
    };
    for grant in grants.chunks_exact(3) {
        if let (Some(id), Some(left), Some(value)) =
            (bytes(&grant[0]), int(&grant[1]), bytes(&grant[2]))
            && let Some(stored) = Stored::parse(value)
            && let Some(name) = ours(&stored)
        {
            out.push(listed(id, name, kind, permits, stored, left));
        }
    }
}

/// The time in a reply to `TIME`: seconds and microseconds, as strings.
pub(crate) fn read_time(reply: &Value) -> Option<SystemTime> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let [seconds, micros] = parts.as_slice() else {
        return None;
    };
    let number = |part: &Value| match part {
        Value::BulkString(digits) => std::str::from_utf8(digits).ok()?.parse::<u64>().ok(),
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    let since_epoch =
        Duration::from_secs(number(seconds)?) + Duration::from_micros(number(micros)?);
    SystemTime::UNIX_EPOCH.checked_add(since_epoch)
}

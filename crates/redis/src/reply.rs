//! The scripts' replies, read into what they mean.

use std::time::{Duration, SystemTime};

use distlock_core::backend::Waiters;
use distlock_core::{Claim, LockInfo, LockKind, LockName, Permits, Waiter};
use redis::Value;

use crate::keys::{Record, Stored, tag};

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

/// One waiting writer's mark as one server lists it, with the mark's
/// identity, by which quorum mode matches the marks that one wait left on
/// several servers.
#[derive(Debug, Clone)]
pub(crate) struct ListedWait {
    pub(crate) mark: String,
    pub(crate) name: LockName,
    pub(crate) waiter: Waiter,
}

/// Puts waits in the order the listing shows them: by name, and each
/// name's longest waiting first, that is, in the order they began (by the
/// server's clock). Redis serves them in no order: whichever tries first
/// after a release is granted.
pub(crate) fn in_listing_order(waits: &mut [ListedWait]) {
    waits.sort_by(|a, b| {
        (&a.name, std::cmp::Reverse(a.waiter.waiting_for), &a.mark).cmp(&(
            &b.name,
            std::cmp::Reverse(b.waiter.waiting_for),
            &b.mark,
        ))
    });
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

/// Adds the live waiting writers of one name, as the waiters script read
/// them (`mark, µs waited, record` each), to `out`. Marks whose records do
/// not parse, or whose name does not give this tag, are not ours and are
/// left out.
pub(crate) fn read_waits(name_tag: &str, fields: &[Value], out: &mut Vec<ListedWait>) {
    for wait in fields.chunks_exact(3) {
        if let (Some(mark), Some(waited), Some(record)) =
            (bytes(&wait[0]), int(&wait[1]), bytes(&wait[2]))
            && let Ok(record) = serde_json::from_slice::<Record>(record)
            && let Ok(name) = LockName::new(&record.name)
            && tag(&name) == name_tag
        {
            out.push(ListedWait {
                mark: String::from_utf8_lossy(mark).into_owned(),
                name,
                waiter: Waiter {
                    kind: LockKind::Exclusive,
                    holder: Some(record.holder),
                    waiting_for: u64::try_from(waited).ok().map(Duration::from_micros),
                },
            });
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

#[cfg(test)]
mod tests {
    use distlock_core::Holder;

    use super::*;

    fn wait_reply(mark: &str, waited_us: i64, name: &LockName, label: &str) -> [Value; 3] {
        let record = Record::json(name, &Holder::this_process(Some(label)));
        [
            Value::BulkString(mark.as_bytes().to_vec()),
            Value::Int(waited_us),
            Value::BulkString(record.into_bytes()),
        ]
    }

    #[test]
    fn waits_are_read_with_their_holder_and_time_and_foreign_ones_are_not() {
        let name = LockName::new("job").unwrap();
        let other = LockName::new("other").unwrap();
        let mut fields = Vec::new();
        fields.extend(wait_reply("m1", 2_500, &name, "a"));
        // A record of another name under this name's keys is not ours.
        fields.extend(wait_reply("m2", 9_000, &other, "b"));
        fields.push(Value::BulkString(b"m3".to_vec()));
        fields.push(Value::Int(1));
        fields.push(Value::BulkString(b"not json".to_vec()));
        let mut waits = Vec::new();
        read_waits(&tag(&name), &fields, &mut waits);
        assert_eq!(waits.len(), 1, "{waits:?}");
        assert_eq!(waits[0].mark, "m1");
        assert_eq!(waits[0].waiter.kind, LockKind::Exclusive);
        assert_eq!(
            waits[0].waiter.waiting_for,
            Some(Duration::from_micros(2_500))
        );
        let holder = waits[0].waiter.holder.as_ref().unwrap();
        assert_eq!(holder.label.as_deref(), Some("a"));
    }

    #[test]
    fn the_longest_waiting_comes_first_within_each_name() {
        let (a, b) = (LockName::new("a").unwrap(), LockName::new("b").unwrap());
        let wait = |name: &LockName, mark: &str, waited: u64| ListedWait {
            mark: mark.to_owned(),
            name: name.clone(),
            waiter: Waiter {
                kind: LockKind::Exclusive,
                holder: None,
                waiting_for: Some(Duration::from_micros(waited)),
            },
        };
        let mut waits = vec![
            wait(&b, "late", 1),
            wait(&a, "late", 5),
            wait(&a, "early", 50),
            wait(&b, "early", 9),
        ];
        in_listing_order(&mut waits);
        let order: Vec<(&str, &str)> = waits
            .iter()
            .map(|wait| (wait.name.as_str(), wait.mark.as_str()))
            .collect();
        assert_eq!(
            order,
            [("a", "early"), ("a", "late"), ("b", "early"), ("b", "late")]
        );
    }
}

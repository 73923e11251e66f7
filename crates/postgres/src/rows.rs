//! Values as the table stores them, and rows read back as distlock's.

use std::time::Duration;

use distlock_core::backend::Waiters;
use distlock_core::{Claim, Error, Holder, LockInfo, LockName, Permits, Result};
use tokio_postgres::Row;

/// The most bytes of a holder's host and of its label kept in a row: a
/// long label must not make every row of a busy semaphore huge.
const MAX_HOLDER_TEXT: usize = 255;

/// A lease or an extension's length, in the microseconds the table counts.
pub(crate) fn micros(lease: Duration) -> i64 {
    i64::try_from(lease.as_micros()).unwrap_or(i64::MAX)
}

/// The holder as a row records it, as JSON text; host and label cut.
pub(crate) fn holder_json(who: &Holder) -> String {
    let cut = Holder {
        host: cut(&who.host).to_owned(),
        pid: who.pid,
        label: who.label.as_deref().map(|label| cut(label).to_owned()),
    };
    serde_json::to_string(&cut).unwrap_or_else(|_| "{}".to_owned())
}

/// `text`, cut to at most [`MAX_HOLDER_TEXT`] bytes at a character boundary.
fn cut(text: &str) -> &str {
    let mut end = text.len().min(MAX_HOLDER_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A stored token as distlock's; negative tokens are never written.
pub(crate) fn token(stored: i64, what: &str) -> Result<u64> {
    u64::try_from(stored).map_err(|_| invalid(what, "fencing_token", "a negative fencing token"))
}

fn invalid(what: &str, field: &str, reason: &str) -> Error {
    Error::InvalidData {
        what: what.to_owned(),
        field: field.to_owned(),
        reason: reason.to_owned(),
    }
}

/// A column of `row`, or an error that says which.
pub(crate) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: usize,
    what: &str,
) -> Result<T> {
    row.try_get(index).map_err(|error| {
        Error::backend("postgres", format!("{what}: reading column {index}"), error)
    })
}

/// What holds a name, as the held statement read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldBy {
    /// What the live holders hold; `None` when none lives any more.
    pub(crate) claim: Option<Claim>,
    /// How long until the first live holder's lease ends.
    pub(crate) first_expiry: Option<Duration>,
    /// How long until the first live mark of another waiting writer ends.
    pub(crate) first_mark_expiry: Option<Duration>,
    /// Whether this attempt's writer's mark is stored.
    pub(crate) marked: bool,
}

impl HeldBy {
    /// Reads a row of the held statement about `name`.
    pub(crate) fn read(row: &Row, name: &LockName) -> Result<Self> {
        let what = format!("lock {name}");
        let kind: String = get(row, 0, &what)?;
        let limit: Option<i32> = get(row, 1, &what)?;
        let live: i32 = get(row, 2, &what)?;
        let first_us: Option<i64> = get(row, 3, &what)?;
        let first_mark_us: Option<i64> = get(row, 4, &what)?;
        let marked: bool = get(row, 5, &what)?;
        let claim = if live > 0 {
            Some(claim(&kind, limit, &what)?)
        } else {
            None
        };
        Ok(Self {
            claim,
            first_expiry: first_us.map(duration),
            first_mark_expiry: first_mark_us.map(duration),
            marked,
        })
    }
}

/// A span of microseconds the server computed; a negative one is zero.
pub(crate) fn duration(us: i64) -> Duration {
    Duration::from_micros(us.max(0).unsigned_abs())
}

/// The claim the stored `kind` and `limit` stand for.
pub(crate) fn claim(kind: &str, limit: Option<i32>, what: &str) -> Result<Claim> {
    match kind {
        "exclusive" => Ok(Claim::Exclusive),
        "shared" => Ok(Claim::Shared),
        "semaphore" => limit
            .and_then(|limit| u32::try_from(limit).ok())
            .map(|limit| Claim::Permit { limit })
            .ok_or_else(|| invalid(what, "permit_limit", "a semaphore without a limit")),
        _ => Err(invalid(what, "kind", "not exclusive, shared or semaphore")),
    }
}

/// The lock name in a row's first column, stored as bytes.
pub(crate) fn name(row: &Row, what: &str) -> Result<LockName> {
    let raw: &[u8] = get(row, 0, what)?;
    let text = std::str::from_utf8(raw).map_err(|_| invalid(what, "name", "not UTF-8"))?;
    LockName::new(text)
}

/// Reads a row of the list statement.
pub(crate) fn lock_info(row: &Row) -> Result<LockInfo> {
    let name = name(row, "a listed lock")?;
    let what = format!("lock {name}");
    let kind: String = get(row, 1, &what)?;
    let limit: Option<i32> = get(row, 2, &what)?;
    let stored_token: i64 = get(row, 3, &what)?;
    let left_us: i64 = get(row, 4, &what)?;
    let holder: Option<String> = get(row, 5, &what)?;
    let live: i32 = get(row, 6, &what)?;
    let claim = claim(&kind, limit, &what)?;
    Ok(LockInfo {
        kind: claim.kind(),
        permits: match claim {
            Claim::Permit { limit } => Some(Permits {
                in_use: live.unsigned_abs(),
                limit,
            }),
            _ => None,
        },
        holder: holder.and_then(|json| serde_json::from_str(&json).ok()),
        fencing_token: Some(token(stored_token, &what)?),
        expires_in: Some(duration(left_us)),
        name,
        waiters: Waiters::Unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_holder_texts_are_cut_at_a_character_boundary() {
        let label = "é".repeat(200);
        let json = holder_json(&Holder {
            host: "h".into(),
            pid: 7,
            label: Some(label.clone()),
        });
        let back: Holder = serde_json::from_str(&json).unwrap();
        let kept = back.label.unwrap();
        assert!(kept.len() <= MAX_HOLDER_TEXT && kept.len() >= MAX_HOLDER_TEXT - 1);
        assert!(label.starts_with(&kept));
    }

    #[test]
    fn stored_kinds_read_back_as_claims() {
        assert_eq!(claim("shared", None, "x").unwrap(), Claim::Shared);
        assert_eq!(
            claim("semaphore", Some(3), "x").unwrap(),
            Claim::Permit { limit: 3 }
        );
        assert!(claim("semaphore", None, "x").is_err());
        assert!(claim("other", None, "x").is_err());
    }
}

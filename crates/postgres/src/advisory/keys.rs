//! Names as advisory keys: the two-`int4` key `(class, objid)`, where the
//! class is distlock's (`advisory_class`) and the table gives each name
//! an `objid` of its own.
//!
//! A name's `objid` is first tried at its hash, and, when another name
//! already has that one, at the next even numbers until a free one is
//! found; the table's unique constraint on `objid` decides races. So two
//! names never share a key, and every process agrees on each name's key,
//! since it reads it from the table. `objid`s are even: `objid + 1` is the
//! name's writers' intent key (see the module on fairness in
//! [`super`]).

use std::time::Duration;

use distlock_core::{Error, LockName, Result};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use super::session::Session;
use crate::pool::Connections;
use crate::prepared::Params;
use crate::wake::NameHash;

/// How many `objid`s one name tries before giving up: each try past the
/// first means another name took that one, which a table far from full
/// makes rare.
const MAX_PROBES: usize = 64;

/// The even, non-negative `int4`s.
const OBJID_MASK: i32 = 0x7fff_fffe;

/// One name's advisory key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) class: i32,
    pub(crate) objid: i32,
}

/// Where `name`'s search for an `objid` starts.
fn first_objid(name: &LockName) -> i32 {
    // The low 31 bits; the wake-up channel takes the top ones.
    let low = (NameHash::of(name).bits() & 0x7fff_ffff) as i32;
    low & OBJID_MASK
}

/// The `objid` tried after `objid` was taken.
pub(crate) fn next_objid(objid: i32) -> i32 {
    objid.wrapping_add(2) & OBJID_MASK
}

/// Where the statements that give names their keys run: on an advisory
/// session of the attempt's, or, for a transaction lock
/// ([`crate::xact`]), on a pooled connection, so that the key is committed
/// at once, outside the caller's transaction.
#[derive(Clone, Copy)]
pub(crate) enum Runner<'a> {
    Session(&'a Session),
    Pool(&'a Connections),
}

impl Runner<'_> {
    async fn query(
        self,
        what: &str,
        sql: &str,
        params: &Params<'_>,
        timeout: Duration,
    ) -> Result<Vec<tokio_postgres::Row>> {
        match self {
            Self::Session(session) => session.query(what, sql, params, timeout).await,
            Self::Pool(connections) => connections.query(what, sql, params, timeout).await,
        }
    }
}

/// Gives `name` an `objid` in the table, unless it has one, trying from
/// its hash ([`first_objid`]) on.
///
/// # Errors
/// A backend error; [`Error::InvalidData`] when [`MAX_PROBES`] `objid`s
/// in a row belong to other names.
///
/// # Cancel safety
/// Dropping the future leaves the name with an `objid` or without one.
pub(crate) async fn allocate(
    runner: Runner<'_>,
    insert: &str,
    name: &LockName,
    timeout: Duration,
) -> Result<()> {
    let what = format!("giving {name} an advisory key");
    let bytes = name.as_str().as_bytes();
    let mut objid = first_objid(name);
    for _ in 0..MAX_PROBES {
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
            [(&bytes, Type::BYTEA), (&objid, Type::INT4)];
        match runner.query(&what, insert, &params, timeout).await {
            // Inserted, or the name had a key already.
            Ok(_) => return Ok(()),
            Err(error) if is_unique_violation(&error) => objid = next_objid(objid),
            Err(error) => return Err(error),
        }
    }
    Err(Error::InvalidData {
        what,
        field: "objid".into(),
        reason: format!("{MAX_PROBES} keys in a row belong to other names"),
    })
}

/// Whether `error` is the driver's unique violation: only the `objid`
/// constraint raises one, since a name that exists is skipped.
fn is_unique_violation(error: &Error) -> bool {
    let Error::Backend {
        source: Some(source),
        ..
    } = error
    else {
        return false;
    };
    source
        .downcast_ref::<tokio_postgres::Error>()
        .and_then(tokio_postgres::Error::code)
        .is_some_and(|code| *code == SqlState::UNIQUE_VIOLATION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objids_are_even_non_negative_and_wrap() {
        for i in 0..1000 {
            let objid = first_objid(&LockName::new(format!("n{i}")).unwrap());
            assert!(objid >= 0 && objid % 2 == 0, "{objid}");
        }
        assert_eq!(next_objid(4), 6);
        assert_eq!(next_objid(OBJID_MASK), 0);
        // The intent key, `objid + 1`, stays an `int4`.
        assert!(OBJID_MASK.checked_add(1).is_some());
    }
}

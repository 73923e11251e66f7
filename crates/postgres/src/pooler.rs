//! Looking for a transaction pooler (PgBouncer in transaction mode)
//! between us and the server, which would hand a server connection, with
//! its session advisory locks and its prepared statements, to other
//! clients between transactions. Advisory mode refuses one; lease mode
//! prepares its statements only without one.
//!
//! Two connections of ours take the same key, which one of them holds: on
//! a server of our own, the second is refused and the first unlocks it.
//! Behind a transaction pooler the second usually runs on the very server
//! connection that holds the key, and is granted again (advisory locks
//! are re-entrant within a session), or the unlock runs on a connection
//! that never held it. Either gives the pooler away, as does a prepared
//! statement gone astray. A pooler busy with other clients can pass one
//! round by chance, so the check runs a few. A round a pooler failed may
//! leave its probe's lock on one of the pooler's server connections, on a
//! negative key, which no name's key or writers' intent is, until that
//! connection closes.

use std::time::Duration;

use deadpool_postgres::ClientWrapper;
use distlock_core::backend::LeaseId;
use distlock_core::{Error, Result};
use tokio_postgres::types::Type;

use crate::error::{from_driver, within};
use crate::prepared;
use crate::rows::get;

const LOCK: &str = "SELECT pg_try_advisory_lock($1, $2)";
const UNLOCK: &str = "SELECT pg_advisory_unlock($1, $2)";

/// How many times the check runs: a pooler busy with other clients can
/// pass one round by chance, seldom several.
const ROUNDS: usize = 4;

/// Whether `first` and `second`, two connections open at once, reach a
/// transaction pooler rather than two server sessions of their own, each
/// step within `timeout`; keys of `class` are used.
///
/// # Errors
/// A backend error.
///
/// # Cancel safety
/// Dropping the future may leave the probe's lock held on `first`, until
/// its connection closes.
pub(crate) async fn reaches_transaction_pooler(
    first: &ClientWrapper,
    second: &ClientWrapper,
    class: i32,
    timeout: Duration,
) -> Result<bool> {
    for _ in 0..ROUNDS {
        match shares_sessions(first, second, class, timeout).await {
            Ok(false) => {}
            Ok(true) => return Ok(true),
            Err(error) if went_astray(&error) => return Ok(true),
            Err(error) => return Err(error),
        }
    }
    Ok(false)
}

/// Whether `error` is a prepared statement gone astray (see
/// [`prepared::went_astray`]), which only a pooler between us causes.
fn went_astray(error: &Error) -> bool {
    let mut cause = std::error::Error::source(error);
    while let Some(error) = cause {
        if let Some(error) = error.downcast_ref::<tokio_postgres::Error>() {
            return prepared::went_astray(error);
        }
        cause = error.source();
    }
    false
}

/// One round of the check on a fresh key: whether `first` and `second`
/// showed themselves to be other than two server sessions of their own.
async fn shares_sessions(
    first: &ClientWrapper,
    second: &ClientWrapper,
    class: i32,
    timeout: Duration,
) -> Result<bool> {
    // A negative key: names' keys and their writers' intents are not.
    let random = LeaseId::random().as_u128() as u32;
    let probe = (random as i32 | i32::MIN) & !1;
    let key = (class, probe, timeout);
    if !ask(first, LOCK, key).await? {
        // Someone else holds this random key: nothing to learn from it.
        return Ok(false);
    }
    let second_granted = ask(second, LOCK, key).await?;
    if second_granted {
        ask(second, UNLOCK, key).await?;
    }
    let first_unlocked = ask(first, UNLOCK, key).await?;
    Ok(second_granted || !first_unlocked)
}

/// Runs `sql` on `client` for the key `(class, objid)`, as a prepared
/// statement; its answer.
async fn ask(
    client: &ClientWrapper,
    sql: &str,
    (class, objid, timeout): (i32, i32, Duration),
) -> Result<bool> {
    let what = "checking for a transaction pooler";
    let params = [(&class as _, Type::INT4), (&objid as _, Type::INT4)];
    let rows = within(what, timeout, prepared::query(client, sql, &params))
        .await?
        .map_err(|error| from_driver(what, error))?;
    match rows.first() {
        Some(row) => get::<bool>(row, 0, what),
        None => Ok(false),
    }
}

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
//! that never held it. Either gives the pooler away. A pooler busy with
//! other clients can pass one round by chance, so the check runs a few. A
//! round a pooler failed may leave its probe's lock on one of the
//! pooler's server connections, on a negative key, which no name's key or
//! writers' intent is, until that connection closes.
//!
//! The check's statements are sent unnamed, each in one exchange. A named
//! one would stay prepared on a pooler's server connection, where another
//! process's statement of the same name (the driver numbers them from
//! zero in each process) would run it, or ours would run theirs: an
//! unlock taken for a lock made a round look like a key someone else
//! held, and a test opening through PgBouncer five times failed in 2 of
//! 50 runs.

use std::time::Duration;

use deadpool_postgres::ClientWrapper;
use distlock_core::backend::LeaseId;
use distlock_core::Result;
use tokio_postgres::types::Type;

use crate::error::{from_driver, within};
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
        if shares_sessions(first, second, class, timeout).await? {
            return Ok(true);
        }
    }
    Ok(false)
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

/// Runs `sql` on `client` for the key `(class, objid)`, unnamed; its
/// answer.
async fn ask(
    client: &ClientWrapper,
    sql: &str,
    (class, objid, timeout): (i32, i32, Duration),
) -> Result<bool> {
    let what = "checking for a transaction pooler";
    let params = [(&class as _, Type::INT4), (&objid as _, Type::INT4)];
    let rows = within(what, timeout, client.query_typed(sql, &params))
        .await?
        .map_err(|error| from_driver(what, error))?;
    match rows.first() {
        Some(row) => get::<bool>(row, 0, what),
        None => Ok(false),
    }
}

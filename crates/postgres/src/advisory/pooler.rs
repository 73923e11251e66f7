//! Refusing a transaction pooler (PgBouncer in transaction mode), which
//! would hand the server connection holding a session advisory lock to
//! other clients, and run our release on another connection.
//!
//! Two sessions of ours take the same key, which one of them holds: on a
//! server of our own, the second is refused and the first unlocks it.
//! Behind a transaction pooler the second usually runs on the very server
//! connection that holds the key, and is granted again (advisory locks
//! are re-entrant within a session), or the unlock runs on a connection
//! that never held it. Either gives the pooler away. A pooler busy with
//! other clients can pass one round by chance, so the check runs a few.

use std::time::Duration;

use distlock_core::backend::LeaseId;
use distlock_core::{Error, Result};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use super::session::{Session, Spares};
use crate::rows::get;

const LOCK: &str = "SELECT pg_try_advisory_lock($1, $2)";
const UNLOCK: &str = "SELECT pg_advisory_unlock($1, $2)";

/// How many times the check runs: a pooler busy with other clients can
/// pass one round by chance, seldom several.
const ROUNDS: usize = 4;

/// Checks that `spares` reach the server itself, within `timeout`; the
/// two sessions used go back to the spares.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `mode` behind a transaction pooler
/// (which a prepared statement gone astray shows too); a backend error.
///
/// # Cancel safety
/// Dropping the future closes the sessions, which ends the probe's lock
/// on a server of our own.
pub(crate) async fn refuse_transaction_pooling(
    spares: &Spares,
    class: i32,
    timeout: Duration,
) -> Result<()> {
    let first = spares.take(timeout).await?;
    let second = spares.take(timeout).await?;
    for _ in 0..ROUNDS {
        let pooled = match shares_sessions(&first, &second, class, timeout).await {
            Ok(pooled) => pooled,
            Err(error) if statements_went_astray(&error) => true,
            Err(error) => return Err(error),
        };
        if pooled {
            return Err(Error::config(
                "mode",
                "mode=advisory holds session advisory locks, and this URL reaches a \
                 transaction pooler (PgBouncer in transaction mode), which hands a server \
                 connection and its locks to other clients between transactions: connect \
                 straight to the server, or use mode=lease",
            ));
        }
    }
    spares.put(first);
    spares.put(second);
    Ok(())
}

/// Whether `error` is the server finding a session's prepared statement
/// missing, or there already: a statement prepared on one server session
/// and run on another, which only a pooler between us does.
fn statements_went_astray(error: &Error) -> bool {
    let mut cause = std::error::Error::source(error);
    while let Some(error) = cause {
        if let Some(code) = error
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::code)
        {
            return *code == SqlState::INVALID_SQL_STATEMENT_NAME
                || *code == SqlState::DUPLICATE_PSTATEMENT;
        }
        cause = error.source();
    }
    false
}

/// One round of the check on a fresh key: whether `first` and `second`
/// showed themselves to be other than two server sessions of their own.
async fn shares_sessions(
    first: &Session,
    second: &Session,
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

/// Runs `sql` on `session` for the key `(class, objid)`; its answer.
async fn ask(
    session: &Session,
    sql: &str,
    (class, objid, timeout): (i32, i32, Duration),
) -> Result<bool> {
    let what = "checking for a transaction pooler";
    let rows = session
        .query(
            what,
            sql,
            &[(&class, Type::INT4), (&objid, Type::INT4)],
            timeout,
        )
        .await?;
    match rows.first() {
        Some(row) => get::<bool>(row, 0, what),
        None => Ok(false),
    }
}

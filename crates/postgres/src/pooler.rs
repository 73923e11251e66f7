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
//! that never held it. Either gives the pooler away, as does a statement
//! of one connection's run by another server process than its earlier
//! ones, or by the other connection's. A pooler busy with other clients
//! can pass one round by chance, so the check runs a few. A round a
//! pooler failed may leave its probe's lock on one of the pooler's server
//! connections, on a negative key, which no name's key or writers' intent
//! is, until that connection closes.
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
use distlock_core::{Error, Result};
use tokio_postgres::types::Type;

use crate::error::{from_driver, within};
use crate::rows::get;

const LOCK: &str = "SELECT pg_try_advisory_lock($1, $2), pg_backend_pid()";
const UNLOCK: &str = "SELECT pg_advisory_unlock($1, $2), pg_backend_pid()";

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
    let mut sessions = Sessions::default();
    for _ in 0..ROUNDS {
        if shares_sessions(first, second, &mut sessions, class, timeout).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One round of the check on a fresh key: whether `first` and `second`
/// showed themselves to be other than two server sessions of their own,
/// by their locks or by the server processes that ran their statements.
async fn shares_sessions(
    first: &ClientWrapper,
    second: &ClientWrapper,
    sessions: &mut Sessions,
    class: i32,
    timeout: Duration,
) -> Result<bool> {
    // A negative key: names' keys and their writers' intents are not.
    let random = LeaseId::random().as_u128() as u32;
    let probe = (random as i32 | i32::MIN) & !1;
    let key = (class, probe, timeout);
    let first_granted = ask(first, LOCK, key).await?;
    if !sessions.ran(Side::First, first_granted.pid) {
        return Ok(true);
    }
    if !first_granted.yes {
        // Someone else holds this random key: nothing to learn from it.
        return Ok(false);
    }
    let second_granted = ask(second, LOCK, key).await?;
    if !sessions.ran(Side::Second, second_granted.pid) {
        return Ok(true);
    }
    if second_granted.yes {
        let unlocked = ask(second, UNLOCK, key).await?;
        if !sessions.ran(Side::Second, unlocked.pid) {
            return Ok(true);
        }
    }
    let first_unlocked = ask(first, UNLOCK, key).await?;
    if !sessions.ran(Side::First, first_unlocked.pid) {
        return Ok(true);
    }
    Ok(second_granted.yes || !first_unlocked.yes)
}

/// Which of the check's two connections ran a statement.
#[derive(Clone, Copy)]
enum Side {
    First,
    Second,
}

/// The server processes seen running each connection's statements. On a
/// server of our own a connection is one process, never the other's; a
/// transaction pooler runs each transaction on whichever it has free.
#[derive(Default)]
struct Sessions {
    first: Option<i32>,
    second: Option<i32>,
}

impl Sessions {
    /// Notes that process `pid` ran a statement of `side`'s: whether that
    /// is still what two sessions of our own would show.
    fn ran(&mut self, side: Side, pid: i32) -> bool {
        let (own, other) = match side {
            Side::First => (&mut self.first, self.second),
            Side::Second => (&mut self.second, self.first),
        };
        let own = *own.get_or_insert(pid);
        own == pid && other != Some(pid)
    }
}

/// What one of the check's statements answered, and which server process
/// ran it.
struct Answer {
    yes: bool,
    pid: i32,
}

/// Runs `sql` on `client` for the key `(class, objid)`, unnamed.
async fn ask(
    client: &ClientWrapper,
    sql: &str,
    (class, objid, timeout): (i32, i32, Duration),
) -> Result<Answer> {
    let what = "checking for a transaction pooler";
    let params = [(&class as _, Type::INT4), (&objid as _, Type::INT4)];
    let rows = within(what, timeout, client.query_typed(sql, &params))
        .await?
        .map_err(|error| from_driver(what, error))?;
    let row = rows.first().ok_or_else(|| Error::Backend {
        backend: "postgres",
        message: format!("{what}: the server answered no row"),
        source: None,
    })?;
    Ok(Answer {
        yes: get::<bool>(row, 0, what)?,
        pid: get::<i32>(row, 1, what)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sessions_of_our_own_each_keep_one_process_of_their_own() {
        let mut sessions = Sessions::default();
        for _ in 0..3 {
            assert!(sessions.ran(Side::First, 10));
            assert!(sessions.ran(Side::Second, 11));
        }
    }

    #[test]
    fn a_process_that_changes_or_is_shared_gives_a_pooler_away() {
        let mut sessions = Sessions::default();
        assert!(sessions.ran(Side::First, 10));
        assert!(!sessions.ran(Side::Second, 10), "one process for both");

        let mut sessions = Sessions::default();
        assert!(sessions.ran(Side::First, 10));
        assert!(sessions.ran(Side::Second, 11));
        assert!(
            !sessions.ran(Side::First, 12),
            "another process for the first"
        );
    }
}

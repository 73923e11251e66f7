//! The SQL of transaction locks, for both drivers: the statements sent in
//! the caller's transaction, which name no table, and those sent on the
//! pool, built once per token table from advisory mode's own pieces, so
//! that a transaction lock and an advisory-mode grant of a name take the
//! same key and raise the same token the same way. Only the table's quoted
//! name is put into the text; every value goes as a bind parameter.

use crate::advisory::statements::{
    NEXT_TOKEN, Statements as AdvisoryStatements, flush_wait_unless_floored, holders_after_grant,
};
use crate::clock::CLOCK;
use crate::table::TableName;

/// Opens the savepoint each lock is taken under, until its token is
/// raised, and answers the session's server process id, in one exchange
/// (the simple protocol: no parameters, two statements). Outside a
/// transaction block, or in an aborted one, the server refuses the
/// `SAVEPOINT`. A caller's savepoint of the same name is shadowed
/// meanwhile, never touched: `ROLLBACK TO` and `RELEASE` name the latest
/// one.
pub(crate) const OPEN: &str = "SAVEPOINT distlock_xact_lock; SELECT pg_backend_pid()";

/// Keeps what was done under the savepoint, the lock, in the transaction.
pub(crate) const KEEP: &str = "RELEASE SAVEPOINT distlock_xact_lock";

/// Undoes everything done under the savepoint (a lock taken, the
/// `lock_timeout` set, an error) and closes it: the transaction is as it
/// was before the call, and usable.
pub(crate) const UNDO: &str =
    "ROLLBACK TO SAVEPOINT distlock_xact_lock; RELEASE SAVEPOINT distlock_xact_lock";

/// Takes the key `($1, $2)` for the rest of the transaction, waiting for
/// it at most `$3` (a `lock_timeout`: milliseconds, `'0'` for no bound),
/// set for this statement alone: the caller's value is read first and
/// put back in the same statement once the lock is granted. A wait that
/// runs out fails the statement (55P03, `lock_not_available`), and rolling
/// back to the savepoint then undoes the setting with the rest. Answers
/// `true`.
///
/// `set_config(…, true)` lasts to the end of the transaction, like `SET
/// LOCAL`: putting the old value back is what keeps it to one statement.
/// The lock waits in a `MATERIALIZED` expression read after the one that
/// sets the timeout, and the value goes back in the final select list,
/// evaluated after both (as in advisory mode's wait in line).
fn take(shared: bool) -> String {
    let lock = if shared {
        "pg_advisory_xact_lock_shared"
    } else {
        "pg_advisory_xact_lock"
    };
    format!(
        "WITH o AS MATERIALIZED (SELECT current_setting('lock_timeout') AS old),
         s AS MATERIALIZED (SELECT set_config('lock_timeout', $3, true) FROM o),
         l AS MATERIALIZED (SELECT {lock}($1, $2) FROM s)
         SELECT true, set_config('lock_timeout', o.old, true) FROM l, o"
    )
}

/// Tries the key `($1, $2)` once, for the rest of the transaction:
/// answers whether it was granted.
fn try_take(shared: bool) -> String {
    let lock = if shared {
        "pg_try_advisory_xact_lock_shared"
    } else {
        "pg_try_advisory_xact_lock"
    };
    format!("SELECT {lock}($1, $2)")
}

/// Cancels the statement of server process `$3`, only while it waits for
/// the key `($1, $2)`, which the lock statement a dropped call left
/// running is doing (see [`super::waiting`]); answers whether it was
/// cancelled, and whether the process still runs a statement (the lock
/// statement may not have reached its wait yet). A `CASE` evaluates in
/// order: nothing is cancelled unless the process waits for that key.
const CANCEL_WAIT: &str = "SELECT CASE WHEN EXISTS (
             SELECT FROM pg_locks AS p
             WHERE p.locktype = 'advisory'
               AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND p.classid = $1::oid AND p.objid = $2::oid AND p.objsubid = 2
               AND p.pid = $3 AND NOT p.granted
         ) THEN pg_cancel_backend($3) ELSE false END,
         EXISTS (SELECT FROM pg_stat_activity WHERE pid = $3 AND state = 'active')";

/// Every statement of transaction locks, for one token table.
#[derive(Debug)]
pub(crate) struct Statements {
    take_exclusive: String,
    take_shared: String,
    try_exclusive: String,
    try_shared: String,
    raise_exclusive: String,
    raise_shared: String,
    /// The name's `objid`, if it has one: `$1` name.
    pub(crate) key: String,
    /// Advisory mode's: gives a name its `objid` unless it has one.
    pub(crate) insert_key: String,
    /// Advisory mode's sweep of the rows nobody uses.
    pub(crate) sweep: String,
    pub(crate) cancel_wait: &'static str,
}

impl Statements {
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.quoted();
        let advisory = AdvisoryStatements::new(table);
        Self {
            take_exclusive: take(false),
            take_shared: take(true),
            try_exclusive: try_take(false),
            try_shared: try_take(true),
            raise_exclusive: raise(t, false),
            raise_shared: raise(t, true),
            key: format!("SELECT objid FROM {t} WHERE name = $1"),
            insert_key: advisory.insert_key,
            sweep: advisory.sweep,
            cancel_wait: CANCEL_WAIT,
        }
    }

    /// The statement that takes the lock in the caller's transaction:
    /// waiting (three parameters) or trying once (two).
    pub(crate) fn take(&self, shared: bool, waits: bool) -> &str {
        match (shared, waits) {
            (false, true) => &self.take_exclusive,
            (true, true) => &self.take_shared,
            (false, false) => &self.try_exclusive,
            (true, false) => &self.try_shared,
        }
    }

    pub(crate) fn raise(&self, shared: bool) -> &str {
        if shared {
            &self.raise_shared
        } else {
            &self.raise_exclusive
        }
    }
}

/// Raises the name's token for a grant its transaction holds, as advisory
/// mode's grant does ([`NEXT_TOKEN`], the grant recorded in `holders`,
/// and no wait for the disk when the token is the server's clock), but on
/// a pooled connection, in a transaction of its own that commits at once,
/// after the lock was granted in the caller's transaction. Only where the
/// name's row still has the key the lock was taken on: a row deleted, or
/// made again with another key, since the key was read, answers no token,
/// and the lock, on a key that is no longer the name's, is undone.
///
/// `$1` name, `$2` objid, `$3` the server process id of the caller's
/// transaction (its grant's entry in `holders`, for `list`), `$4` holder
/// as JSON text. Answers the token, `NULL` without a row.
fn raise(t: &str, shared: bool) -> String {
    let holders = holders_after_grant(shared, "$3::text", "$4::text");
    let flush = flush_wait_unless_floored(None);
    format!(
        "WITH bumped AS (
             UPDATE {t} AS t SET fencing_token = {NEXT_TOKEN}, holders = {holders}
             FROM {CLOCK}
             WHERE t.name = $1 AND t.objid = $2
             RETURNING t.fencing_token, t.fencing_token = c.now_us AS floored
         )
         SELECT (SELECT fencing_token FROM bumped), {flush}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_quoted_table_name_is_interpolated() {
        let table = TableName::new("s", "a \"b\"; --").unwrap();
        let statements = Statements::new(&table);
        for sql in [
            statements.raise(false),
            statements.raise(true),
            &statements.key,
            &statements.insert_key,
            &statements.sweep,
        ] {
            assert!(sql.contains(r#""s"."a ""b""; --""#), "{sql}");
        }
        for shared in [false, true] {
            for waits in [false, true] {
                let sql = statements.take(shared, waits);
                assert!(!sql.contains("\"s\""), "{sql}");
                assert!(sql.contains("($1, $2)"), "{sql}");
            }
        }
    }

    #[test]
    fn the_kinds_take_the_advisory_modes_matching_locks() {
        let statements = Statements::new(&TableName::new("s", "t").unwrap());
        assert!(
            statements
                .take(false, true)
                .contains("pg_advisory_xact_lock($1, $2)")
        );
        assert!(
            statements
                .take(true, true)
                .contains("pg_advisory_xact_lock_shared($1, $2)")
        );
        assert!(
            statements
                .take(false, false)
                .contains("pg_try_advisory_xact_lock($1, $2)")
        );
        assert!(
            statements
                .take(true, false)
                .contains("pg_try_advisory_xact_lock_shared($1, $2)")
        );
        // The token is raised as advisory mode raises it, and a writer's
        // grant leaves its entry alone in `holders`.
        assert!(statements.raise(false).contains(NEXT_TOKEN));
        assert!(!statements.raise(false).contains("t.holders END"));
        assert!(statements.raise(true).contains("t.holders END"));
    }

    #[test]
    fn one_savepoint_is_opened_kept_and_undone() {
        for sql in [OPEN, KEEP, UNDO] {
            assert!(sql.contains("SAVEPOINT distlock_xact_lock"), "{sql}");
        }
        assert!(UNDO.starts_with("ROLLBACK TO SAVEPOINT"));
        assert!(UNDO.ends_with("RELEASE SAVEPOINT distlock_xact_lock"));
    }

    #[test]
    fn the_wait_is_set_for_the_one_statement() {
        let statements = Statements::new(&TableName::new("s", "t").unwrap());
        let take = statements.take(false, true);
        assert!(take.contains("set_config('lock_timeout', $3, true)"));
        assert!(take.contains("set_config('lock_timeout', o.old, true)"));
        assert!(!take.contains("SET LOCAL"));
    }
}

//! Lease mode's gate between grants and deletions of a name's row.
//!
//! A row that nobody holds or waits for is deleted (see
//! [`statements`](super::statements)), and the next grant creates it
//! again with the server's clock, in microseconds, as its token. That
//! token must exceed every token the deleted row handed out, and the
//! clock alone does not promise it: an acquire reads the clock before it
//! inserts, and a row could be granted, released and deleted in between,
//! leaving the insert a reading older than the deleted row's last token.
//!
//! So each acquire first takes the name's gate, a transaction-scoped
//! advisory lock, shared, and reads the clock only then; a deletion takes
//! the gate exclusively, without waiting (a name with an acquire in flight
//! keeps its row for a later sweep), and only deletes a row whose token
//! is below its own reading of the clock. Both hold the gate until they
//! commit, so an acquire that inserts after a deletion read the clock
//! after the deletion committed: its token is at least the deletion's
//! reading, which is above every token of the deleted row.
//!
//! Gates live in the one-`bigint` advisory key space, at a hash of the
//! name (advisory mode's keys are two `int4`s, another space). Two names
//! that share a gate only make one's acquire wait out the other's
//! deletion, a single statement; nothing else takes these keys but an
//! application that picks the same 64-bit number.

/// The name's gate key, for the `bytea` name `name` (an SQL expression).
fn key(name: &str) -> String {
    format!("hashtextextended('distlock gate ' || encode({name}, 'hex'), 0)")
}

/// The server's clock in microseconds, as the `FROM` item `c` with the
/// column `now_us`, read only once the gate of `name` is held shared (a
/// `CASE` evaluates its condition first).
pub(crate) fn gated_clock(name: &str) -> String {
    format!(
        "(SELECT CASE WHEN pg_advisory_xact_lock_shared({key})::text IS NOT NULL
                 THEN (extract(epoch FROM clock_timestamp()) * 1000000)::bigint END AS now_us) AS c",
        key = key(name)
    )
}

/// Whether the gate of `name` was taken exclusively, without waiting:
/// false while an acquire of the name is in flight.
pub(crate) fn try_exclusive(name: &str) -> String {
    format!("pg_try_advisory_xact_lock({})", key(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_read_after_the_gate_and_both_sides_share_a_key() {
        let clock = gated_clock("$1");
        let lock = clock.find("pg_advisory_xact_lock_shared").unwrap();
        assert!(lock < clock.find("clock_timestamp").unwrap(), "{clock}");
        assert!(clock.contains(&key("$1")));
        assert!(try_exclusive("t.name").contains(&key("t.name")));
    }
}

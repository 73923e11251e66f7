//! The report's account of the gap between PostgreSQL advisory mode's
//! uncontended cycle and sqlx's advisory lock: the measured-only steps
//! from sqlx's pair to the backend's cycle, each with what it buys.

use crate::markdown::opt;
use crate::pg_steps::Step;
use crate::uncontended::{Contender, Side, Uncontended};

/// The paragraph on advisory mode's steps; `None` without the steps,
/// sqlx's lock and the backend's direct calls.
pub(super) fn steps_findings(u: &Uncontended) -> Option<String> {
    Steps::of(u).map(|steps| steps.describe())
}

/// The rows from sqlx's pair to the backend's cycle, in order.
struct Steps<'a> {
    sqlx: &'a Side,
    bare: &'a Side,
    key_read: &'a Side,
    token: &'a Side,
    kept: &'a Side,
    ours: &'a Side,
    client: Option<&'a Side>,
}

impl<'a> Steps<'a> {
    fn of(u: &'a Uncontended) -> Option<Self> {
        let step = |step| u.side(Contender::PgStep(step));
        Some(Self {
            sqlx: u.side(Contender::PgAdvisoryLock)?,
            bare: step(Step::BarePair)?,
            key_read: step(Step::KeyRead)?,
            token: step(Step::TokenBumped)?,
            kept: step(Step::RowKept)?,
            ours: u.side(Contender::BackendCalls)?,
            client: u.side(Contender::Client),
        })
    }

    fn describe(&self) -> String {
        let rate = |side: &Side, of: &Side| side.per_second() / of.per_second();
        let per = |side: &Side| opt(side.commands_per_cycle());
        let deleting = rate(self.ours, self.kept);
        let guarantees = rate(self.key_read, self.bare)
            * rate(self.token, self.key_read)
            * rate(self.kept, self.token);
        let client = self.client.map_or(String::new(), |client| {
            format!(" (the client's, {:.2})", rate(client, self.sqlx))
        });
        format!(
            "**PostgreSQL, advisory mode: the gap to sqlx's lock, step by step.** Counted in \
             passes of their own (see the header), the backend's cycle is {} transactions and \
             sqlx's {} (each statement is one, and a release's `pg_notify` adds one: the \
             notification read by a connection of the database that listens). The measured-only rows add the backend's work to sqlx's pair one part \
             at a time, each sent directly with tokio-postgres on one connection, its \
             statements prepared once, in the same rounds, on the backend's table and class; \
             each gives its rate against the step before:\n\n\
             1. **The pair, as a try on advisory mode's key**: `pg_try_advisory_lock(class, \
             objid)` and `pg_advisory_unlock`, {:.2} of sqlx's lock. No guarantee differs \
             here: uncontended, sqlx's waiting call is granted at once.\n\
             2. **The name's key, read from its row** in the acquire: {:.2}. Every process \
             finds the same key for a name, and no two names share one; a key hashed from \
             the name alone could put two names on one lock.\n\
             3. **The fencing token**, bumped in the row when granted: {:.2}. The acquire \
             now writes a row and commits (without waiting for the WAL flush when the token \
             is the server's clock, as in this loop, which keeps it increasing across a \
             crash). Without it the lock has no fencing token, as sqlx's has none.\n\
             4. **The holder's record, the lease and the wake-up**: the grant recorded under \
             the session's process id (what `distlock list` shows), the session's \
             `idle_session_timeout` and TCP keepalives set to the lease (a holder that stops \
             loses its session, and so the lock, within the lease; sqlx's lock lasts as long \
             as the connection) and reset on release, and the release's `pg_notify` (waiters \
             in other processes are woken, not left polling): {:.2}. This is the backend's \
             cycle with the name's row kept on release, {} transactions.\n\
             5. **Deleting the row on release**, as the backend does: {deleting:.2}. The \
             release deletes the row of a name nobody holds, so that the table does not \
             grow with every name ever used; the next acquire then finds no key, inserts one \
             and asks again: {} transactions a cycle.\n\n\
             The steps multiply to the backend's {:.2} of sqlx's cycles{client}. Of that, \
             steps 2 to 4, what the fencing token, the lease, the holder's record and the \
             wake-up cost on a kept row, make {guarantees:.2}, and the row's deletion and \
             re-keying {deleting:.2}. Dropping any of steps 2 to 4 gives up what it buys. \
             Step 5 buys only a table that does not keep idle names: leaving them to the \
             backend's sweep (about once a minute, or `remove_idle_rows`) instead of \
             deleting each on release would win back up to its factor, and the table would \
             then hold every name used since the last sweep.",
            per(self.ours),
            per(self.sqlx),
            rate(self.bare, self.sqlx),
            rate(self.key_read, self.bare),
            rate(self.token, self.key_read),
            rate(self.kept, self.token),
            per(self.kept),
            per(self.ours),
            rate(self.ours, self.sqlx),
        )
    }
}

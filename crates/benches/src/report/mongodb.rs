//! The report's finding on MongoDB's uncontended cycle: what the lock
//! client adds to the backend's two commands, and where distributed-lock-mongo's
//! lead comes from, measured step by step in the same rounds.

use std::fmt::Write;

use super::{BackendResults, PEER};
use crate::uncontended::{Contender, Side, Uncontended};

/// The paragraph on MongoDB's uncontended rows; `None` without the client
/// and its baseline.
pub(super) fn uncontended_findings(b: &BackendResults) -> Option<String> {
    let u = &b.uncontended;
    let client = u.side(Contender::Client)?;
    let base = u.baseline()?;
    let mut t = format!(
        "**MongoDB.** The lock client sends exactly the baseline's two commands per cycle (one \
         `findAndModify` upsert, one `updateOne`; counted above), so the only difference is the \
         client's own work in the process (the in-process slot, the attempt task, registering \
         the lease with the keeper): {:.2} of the baseline in this run.",
        client.per_second() / base.per_second()
    );
    if let Some(peer) = u.side(Contender::MongoPeer) {
        let _ = write!(
            t,
            " {PEER} also sends two commands per cycle, a `findAndModify` upsert and a \
             `deleteOne` (it deletes the document on release, so there is nothing to carry a \
             fencing token across grants), and made {:.2} of our baseline's cycles.",
            peer.per_second() / base.per_second()
        );
    }
    if let Some(steps) = Steps::of(u) {
        t.push(' ');
        t.push_str(&steps.describe());
    }
    Some(t)
}

/// The measured-only rows that take our cycle to the peer's one difference
/// at a time.
struct Steps<'a> {
    base: &'a Side,
    write_one: &'a Side,
    deleting: &'a Side,
    unindexed: &'a Side,
    unindexed_deleting: &'a Side,
    peer_commands: &'a Side,
    peer_with_token: &'a Side,
    peer: &'a Side,
}

impl<'a> Steps<'a> {
    fn of(u: &'a Uncontended) -> Option<Self> {
        Some(Self {
            base: u.baseline()?,
            write_one: u.side(Contender::WriteOne)?,
            deleting: u.side(Contender::DeletingRelease)?,
            unindexed: u.side(Contender::Unindexed)?,
            unindexed_deleting: u.side(Contender::UnindexedDeleting)?,
            peer_commands: u.side(Contender::PeerCommands)?,
            peer_with_token: u.side(Contender::PeerCommandsWithToken)?,
            peer: u.side(Contender::MongoPeer)?,
        })
    }

    fn describe(&self) -> String {
        let rate = |side: &Side, of: &Side| side.per_second() / of.per_second();
        let base = self.base;
        format!(
            "The measured-only rows change one thing at a time, in the same rounds, to find \
             where that lead comes from. Write concern `w: 1` instead of `majority` made {:.2} \
             of the baseline's cycles: no difference on SecantusDB, a one-node replica set, \
             whose majority is that one node. The other steps lead from our cycle to the \
             peer's, each giving the rate it reached against the step before:\n\n\
             1. **Keeping the document** on release, with its fencing token: releasing by \
             deleting it instead, {:.2}. The kept document is what lets the next grant's token \
             be greater than the last even within one millisecond of the server's clock; a \
             deleted one leaves only the clock to go by.\n\
             2. **The TTL index on `expiresAt`**, which removes idle lock documents once the \
             server's clock has passed their token: the same on a collection without it, \
             {:.2} (and without deleting, {:.2} of the baseline). Every write of a grant or a \
             release moves the document's key in that index. The peer's collection has none: \
             it deletes its document on release, and one left by a holder that died stays \
             until the name is locked again.\n\
             3. **The rest of our acquire**: the holder's record that `distlock list` shows, \
             and a pipeline that tells exclusive grants, readers and permits apart. The \
             peer's own two commands, sent directly on a collection without indexes, with a \
             fencing token added that the server computes and checks as ours (`max(previous \
             + 1, now in ms)`, granted only where the stored token is a whole number an int64 \
             holds), {:.2}.\n\
             4. **The fencing token**: the peer's commands without it, {:.2}.\n\
             5. **The peer's client**, its `try_acquire` and `release` around those commands, \
             {:.2}.\n\n\
             The steps multiply to the peer's {:.2} of our baseline. Of that lead, {:.2} \
             comes from what distlock guarantees and the peer does not: a fencing token that \
             survives a release (step 1) and is built and checked by the server (step 4), and \
             idle documents removed (step 2); and {:.2} from the holder records and lock kinds \
             (step 3). None of these is given up to close it.",
            rate(self.write_one, base),
            rate(self.deleting, base),
            rate(self.unindexed_deleting, self.deleting),
            rate(self.unindexed, base),
            rate(self.peer_with_token, self.unindexed_deleting),
            rate(self.peer_commands, self.peer_with_token),
            rate(self.peer, self.peer_commands),
            rate(self.peer, base),
            rate(self.deleting, base)
                * rate(self.unindexed_deleting, self.deleting)
                * rate(self.peer_commands, self.peer_with_token),
            rate(self.peer_with_token, self.unindexed_deleting),
        )
    }
}

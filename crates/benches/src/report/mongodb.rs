//! The report's findings on MongoDB: what the lock client adds to the
//! backend's two commands in the uncontended cycle, and where
//! distributed-lock-mongo's lead comes from, measured step by step in the
//! same rounds; and how the contended runs beside it went.

use std::fmt::Write;

use std::time::Duration;

use super::{BackendResults, Contestant, PEER, find};
use crate::commands::Counts;
use crate::markdown::{opt, short};
use crate::timeline::Contention;
use crate::uncontended::{Contender, Side, Uncontended};
use crate::worker::Workload;

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

/// The share of `r`'s hand-offs that went to another process, in percent.
fn share_across(r: &Contention) -> f64 {
    if r.hand_offs == 0 {
        0.0
    } else {
        r.cross_process as f64 / r.hand_offs as f64 * 100.0
    }
}

/// What the contended runs on MongoDB show, ours beside the peer with its
/// defaults: the tight loop, the rounds, and the server commands of the
/// rounds (over a window of `seconds`).
pub(super) fn contention_findings(b: &BackendResults, seconds: Duration) -> Vec<String> {
    let mut text = Vec::new();
    let by = |who, workload| find(b, who, workload);
    let (tight, rounds) = (Workload::TightLoop, Workload::ROUNDS);
    if let (Some(ours), Some(peer)) = (
        by(Contestant::Ours, tight),
        by(Contestant::MongoPeer, tight),
    ) {
        text.push(format!(
            "**MongoDB, tight loop.** The peer tries once before it first sleeps, so the task \
             that has just released often takes the lock back before any sleeper wakes: \
             {:.0} % of its hand-offs went to another process, when a sleeper's retry happened \
             to arrive right after the release ({:.0} acquisitions/s across processes of \
             {:.0}). Ours handed {:.0} % to another process ({:.0}/s of {:.0}), each through \
             the change stream (the release's event must reach the other process's `getMore` \
             before its `findAndModify` can go out); the rest went to the next task of the same \
             process, by hand-over: one `findAndModify` that ends one grant and makes the next, \
             in runs that end once they made {} hand-overs and lasted {}, after which the \
             process releases and lets other processes try first. Across processes, our \
             median hand-off was {} against the peer's {}; over all hand-offs, {} against {}.",
            share_across(peer),
            peer.per_second_across(),
            peer.per_second,
            share_across(ours),
            ours.per_second_across(),
            ours.per_second,
            distlock::LockOptions::DEFAULT_LOCAL_HAND_OVERS,
            humantime::format_duration(distlock::LockOptions::DEFAULT_MIN_LOCAL_RUN),
            short(ours.cross_p50),
            short(peer.cross_p50),
            short(ours.hand_off_p50),
            short(peer.hand_off_p50),
        ));
    }
    if let (Some(ours), Some(peer)) = (
        by(Contestant::Ours, rounds),
        by(Contestant::MongoPeer, rounds),
    ) {
        text.push(format!(
            "**MongoDB, rounds.** Every hand-off goes to a task that has been waiting. Across \
             processes, ours took {} at the median and {} on average, {:.0} times a second; \
             the peer's, {} and {}, {:.0} times a second: its waiters sleep 10 ms between \
             tries whatever happens, so the lock waits, free, for the next retry of any of \
             them, while ours are woken by the release. Over all hand-offs (ours within a \
             process are hand-overs): median {} against {}, {:.0} against {:.0} \
             acquisitions/s.",
            short(ours.cross_p50),
            short(ours.cross_mean),
            ours.per_second_across(),
            short(peer.cross_p50),
            short(peer.cross_mean),
            peer.per_second_across(),
            short(ours.hand_off_p50),
            short(peer.hand_off_p50),
            ours.per_second,
            peer.per_second,
        ));
    }
    if let (Some(ours), Some(peer)) = (
        by(Contestant::Ours, rounds),
        by(Contestant::MongoPeer, rounds),
    ) && let Some(commands) = &ours.commands
    {
        let per = ours.acquisitions.max(1) as f64;
        let count = |name: &str| commands.0.get(name).copied().unwrap_or(0) as f64 / per;
        text.push(format!(
            "**MongoDB, server commands.** Ours need {} per acquisition in rounds: {:.2} \
             `findAndModify` (grants, hand-overs, and tries that lose), {:.2} `update` \
             (releases: a hand-over is itself the release, so there is one per run of \
             hand-overs) and {:.2} `getMore`. A release is delivered to the change stream of \
             every process that has a waiter (one `getMore` reply per process, fewer when \
             events arrive together), and each woken process tries once; only one can win. A \
             hand-over wakes nobody. The peer's count has another cause: its waiters try every \
             10 ms whatever happens, so its commands per acquisition are its tries per second \
             over its acquisitions per second ({:.0} commands/s for {:.0} acquisitions/s \
             here); ours follow releases, not the clock. With nothing done under the lock, a \
             hold is far shorter than the peer's 10 ms sleep, so few of its tries fall inside \
             one, which keeps its count low; the rounds with work below show what its polling \
             costs while a holder works.",
            opt(ours.commands_per_acquisition()),
            count("findAndModify"),
            count("update"),
            count("getMore"),
            peer.commands.as_ref().map_or(0, Counts::total) as f64 / seconds.as_secs_f64(),
            peer.per_second,
        ));
    }
    text
}

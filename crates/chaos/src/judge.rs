//! Judging a run from the holders' records and the fenced counter.
//!
//! A holder is valid from the moment its grant arrived until the earliest
//! of: just before its release, when `lost()` fired, and its own deadline
//! (its guard's `valid_until`: the send time of its last confirmed grant
//! or extension, plus the lease, less the safety margin). All times are on
//! the machine's one monotonic clock. The history checker judges the
//! validities for exclusion, and an exclusive run's operations for
//! linearizability.

use distlock_history::Overlap;

use crate::fenced::{Entry, FencedStore, Op};
use crate::holdings::{Holding, holdings};
use crate::outcome::Outcome;
use crate::worker::{ClaimSpec, Event};

/// What a run showed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Grants recorded.
    pub(crate) acquisitions: usize,
    /// Validities that overlapped one they exclude: another writer's (or
    /// any reader's, for a writer), or, for a semaphore, validities begun
    /// while the limit was already held.
    pub(crate) overlaps: usize,
    /// Overlaps the fenced counter did not fence: a write of the earlier
    /// holder was accepted after the later holder had used the counter.
    pub(crate) unfenced_overlaps: usize,
    /// Most holders of a semaphore seen at once.
    pub(crate) most_at_once: usize,
    /// Accepted writes the counter does not show.
    pub(crate) lost_updates: u64,
    /// Writes of the unfenced witness that its value does not show: each
    /// one, two holders that acted at once.
    pub(crate) witness_lost_updates: u64,
    /// Holdings whose token is not above that of a holding the server
    /// must have granted first: one that began before this one was asked
    /// for, or one it excludes that ended before this one began. Between
    /// two holdings that may be held side by side (two readers, two
    /// permits), an end before a begin proves nothing: the server may
    /// grant a token before the next one and its holder record the grant
    /// after the next one's holder is done.
    pub(crate) token_regressions: usize,
    /// Writes the fenced counter turned away.
    pub(crate) rejected_writes: usize,
    /// Holdings whose `lost()` fired.
    pub(crate) losses: usize,
    /// Acquisitions that failed, or timed out.
    pub(crate) failed: usize,
    /// Runs whose history the checker decided: the validities of every
    /// run, and in exclusive runs the acquires, releases, losses and
    /// fenced operations too.
    pub(crate) histories_checked: usize,
    /// Locks and counters whose history no order fits.
    pub(crate) history_violations: usize,
    /// Locks and counters whose search ran out of moves: a row with one
    /// fails, since nothing was shown of them.
    pub(crate) undecided: usize,
    /// The first such violation, or a history left undecided, in words.
    pub(crate) history_note: Option<String>,
}

/// A documented cause of overlapping holders: what the lock cannot stop,
/// so that only the fencing token protects the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverlapCause {
    /// The server forgot its locks: a restart without persistence, or an
    /// eviction.
    ServerForgot,
    /// The server's clock stepped forward, ending leases early on the
    /// server.
    ServerClockStepped,
    /// One of memcached's documented edges (a server that restarts empty,
    /// an item evicted or flushed).
    MemcachedEdge,
}

impl OverlapCause {
    /// The cause, as the report names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            OverlapCause::ServerForgot => "the server forgot its locks",
            OverlapCause::ServerClockStepped => "the server's clock stepped forward",
            OverlapCause::MemcachedEdge => "a memcached edge",
        }
    }
}

impl Verdict {
    /// Whether the overlaps fit what a row allows: none, and no update of
    /// the unfenced witness lost, where it names no cause; only fenced
    /// ones, where it names one.
    pub(crate) fn overlaps_fit(&self, allowed: Option<OverlapCause>) -> bool {
        match allowed {
            Some(_) => self.unfenced_overlaps == 0,
            None => self.overlaps == 0 && self.witness_lost_updates == 0,
        }
    }

    /// Adds `other`'s counts to these, for a scenario of several runs.
    pub(crate) fn add(&mut self, other: &Verdict) {
        self.acquisitions += other.acquisitions;
        self.overlaps += other.overlaps;
        self.unfenced_overlaps += other.unfenced_overlaps;
        self.most_at_once = self.most_at_once.max(other.most_at_once);
        self.lost_updates += other.lost_updates;
        self.witness_lost_updates += other.witness_lost_updates;
        self.token_regressions += other.token_regressions;
        self.rejected_writes += other.rejected_writes;
        self.losses += other.losses;
        self.failed += other.failed;
        self.histories_checked += other.histories_checked;
        self.history_violations += other.history_violations;
        self.undecided += other.undecided;
        if self.history_note.is_none() {
            self.history_note.clone_from(&other.history_note);
        }
    }
}

/// Judges one name's run: `events` from every holder of it, and its
/// fenced counter.
///
/// # Errors
/// The counter's state or log cannot be read, or the run's records make a
/// malformed history.
pub(crate) fn judge(events: &[Event], store: &FencedStore) -> Outcome<Verdict> {
    let holdings = holdings(events);
    let state = store.state()?;
    let log = store.log()?;
    let accepted_writes = log
        .iter()
        .filter(|entry| entry.op == Op::Write && entry.accepted)
        .count() as u64;
    let report = crate::history::check(events, &holdings, &log)?;
    let witnessed = events
        .iter()
        .filter(|event| {
            matches!(
                event,
                Event::Ended {
                    witnessed: true,
                    ..
                }
            )
        })
        .count() as u64;
    Ok(Verdict {
        witness_lost_updates: witnessed.saturating_sub(store.witness().read()?),
        acquisitions: holdings.len(),
        overlaps: report.overlaps.len(),
        unfenced_overlaps: report
            .overlaps
            .iter()
            .filter(|overlap| !fenced(overlap, &log))
            .count(),
        most_at_once: report.most_at_once,
        lost_updates: accepted_writes.saturating_sub(state.value),
        token_regressions: token_regressions(&holdings),
        rejected_writes: log
            .iter()
            .filter(|entry| entry.op == Op::Write && !entry.accepted)
            .count(),
        losses: holdings
            .iter()
            .filter(|holding| holding.lost_ns.is_some())
            .count(),
        failed: events
            .iter()
            .filter(|event| matches!(event, Event::Failed { .. } | Event::TimedOut { .. }))
            .count(),
        histories_checked: usize::from(report.undecided.is_empty()),
        history_violations: report.violations.len(),
        undecided: report.undecided.len(),
        history_note: history_note(&report),
    })
}

/// Whether the counter fenced `overlap`: once the later holder had used
/// it (its first accepted operation), no write of the earlier holder was
/// accepted. Before that, to the counter, the earlier holder's work simply
/// came first.
fn fenced(overlap: &Overlap, log: &[Entry]) -> bool {
    let later_used = log
        .iter()
        .filter(|entry| entry.accepted && entry.token == overlap.later_token())
        .map(|entry| entry.at_ns)
        .min();
    later_used.is_none_or(|used| {
        !log.iter().any(|entry| {
            entry.op == Op::Write
                && entry.accepted
                && entry.token == overlap.earlier_token()
                && entry.at_ns > used
        })
    })
}

/// A history's first violation on one line, or that it was left
/// undecided.
pub(crate) fn history_note(report: &distlock_history::Report) -> Option<String> {
    if let Some(violation) = report.violations.first() {
        let text = violation.to_string();
        return Some(text.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    report.undecided.first().map(|subject| {
        format!("the history of {subject} was left undecided: its search ran out of moves")
    })
}

/// Holdings whose token is not above that of a holding the server must
/// have granted before them: the grant order, checked against the token
/// order as far as the holders' records show it.
/// - A holding that began before another was asked for was granted
///   first, whatever the kinds.
/// - A holding that ended before another began was granted first, unless
///   both may be held side by side; then only one that ended before the
///   other was asked for counts, which the first rule covers.
fn token_regressions(holdings: &[Holding]) -> usize {
    let ended = [Side::Writer, Side::Reader, Side::Permit].map(|side| Ended::of(holdings, side));
    let begun = Begun::of(holdings);
    holdings
        .iter()
        .filter(|later| {
            let after_begun = later
                .asked_ns
                .and_then(|asked| begun.highest_before(asked))
                .is_some_and(|highest| highest >= later.token);
            after_begun
                || ended.iter().any(|earlier| {
                    earlier
                        .highest_before(since(later, earlier.side))
                        .is_some_and(|highest| highest >= later.token)
                })
        })
        .count()
}

/// One pair of holdings that [`token_regressions`] counts, earlier first,
/// if any: for a report.
pub(crate) fn token_regression(holdings: &[Holding]) -> Option<(Holding, Holding)> {
    holdings.iter().find_map(|later| {
        holdings.iter().find_map(|earlier| {
            let begun_before = later.asked_ns.is_some_and(|asked| earlier.start_ns < asked);
            let ended_before = earlier
                .end_ns
                .is_some_and(|end| end < since(later, Side::of(earlier.claim)));
            ((begun_before || ended_before) && earlier.token >= later.token)
                .then_some((*earlier, *later))
        })
    })
}

/// The first token regression the judge counted, in words, for a report.
pub(crate) fn regression_example(holdings: &[Holding]) -> Option<String> {
    let (earlier, later) = token_regression(holdings)?;
    let gap = later.start_ns.saturating_sub(earlier.end_ns.unwrap_or(0));
    Some(format!(
        "e.g. a {:?} holding granted token {} {:.1} ms after a {:?} holding with token {} \
         ended{}",
        later.claim,
        later.token,
        gap as f64 / 1e6,
        earlier.claim,
        earlier.token,
        if earlier.lost_ns.is_some() {
            " (its `lost()` had fired)"
        } else {
            ""
        },
    ))
}

/// When a holding of `side` must have ended to count as before `later`:
/// when `later` began, or, when both may be held side by side, when it
/// was asked for.
fn since(later: &Holding, side: Side) -> u64 {
    if side == Side::of(later.claim) && side != Side::Writer {
        later.asked_ns.unwrap_or(later.start_ns)
    } else {
        later.start_ns
    }
}

/// Which holdings may be held side by side: readers with readers, and
/// permits with permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Writer,
    Reader,
    Permit,
}

impl Side {
    fn of(claim: ClaimSpec) -> Side {
        match claim {
            ClaimSpec::Exclusive => Side::Writer,
            ClaimSpec::Shared => Side::Reader,
            ClaimSpec::Permit { .. } => Side::Permit,
        }
    }
}

/// Every holding, ended or not, by when it began, with the highest token
/// among those that began by each.
struct Begun {
    starts: Vec<u64>,
    highest: Vec<u64>,
}

impl Begun {
    fn of(holdings: &[Holding]) -> Begun {
        let mut by_start: Vec<(u64, u64)> = holdings
            .iter()
            .map(|holding| (holding.start_ns, holding.token))
            .collect();
        by_start.sort_unstable();
        let mut running = 0;
        let highest = by_start
            .iter()
            .map(|(_, token)| {
                running = running.max(*token);
                running
            })
            .collect();
        Begun {
            starts: by_start.into_iter().map(|(start, _)| start).collect(),
            highest,
        }
    }

    /// The highest token among the holdings that began before `at`.
    fn highest_before(&self, at: u64) -> Option<u64> {
        let before = self.starts.partition_point(|start| *start < at);
        before.checked_sub(1).map(|last| self.highest[last])
    }
}

/// The ended holdings of one side, by when they ended, with the highest
/// token among those that ended by each.
struct Ended {
    side: Side,
    ends: Vec<u64>,
    highest: Vec<u64>,
}

impl Ended {
    fn of(holdings: &[Holding], side: Side) -> Ended {
        let mut by_end: Vec<(u64, u64)> = holdings
            .iter()
            .filter(|holding| Side::of(holding.claim) == side)
            .filter_map(|holding| Some((holding.end_ns?, holding.token)))
            .collect();
        by_end.sort_unstable();
        let mut running = 0;
        let highest = by_end
            .iter()
            .map(|(_, token)| {
                running = running.max(*token);
                running
            })
            .collect();
        Ended {
            side,
            ends: by_end.into_iter().map(|(end, _)| end).collect(),
            highest,
        }
    }

    /// The highest token among the holdings that ended before `at`.
    fn highest_before(&self, at: u64) -> Option<u64> {
        let before = self.ends.partition_point(|end| *end < at);
        before.checked_sub(1).map(|last| self.highest[last])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(claim: ClaimSpec, token: u64, start: u64, end: u64) -> Holding {
        Holding {
            pid: 1,
            claim,
            token,
            asked_ns: None,
            start_ns: start,
            end_ns: Some(end),
            lost_ns: None,
            write_ok: None,
        }
    }

    #[test]
    fn tokens_must_follow_real_time() {
        let ordered = [
            holding(ClaimSpec::Exclusive, 1, 0, 10),
            holding(ClaimSpec::Exclusive, 2, 11, 20),
        ];
        assert_eq!(token_regressions(&ordered), 0);
        let regressed = [
            holding(ClaimSpec::Exclusive, 5, 0, 10),
            holding(ClaimSpec::Exclusive, 2, 11, 20),
        ];
        assert_eq!(token_regressions(&regressed), 1);
    }

    #[test]
    fn side_by_side_grants_may_be_recorded_out_of_token_order() {
        // Reader 10 was granted first but recorded its grant after reader
        // 11, granted next, was done: it asked before 11 ended.
        let mut late = holding(ClaimSpec::Shared, 10, 6, 8);
        late.asked_ns = Some(0);
        let early = holding(ClaimSpec::Shared, 11, 1, 5);
        assert_eq!(token_regressions(&[early, late]), 0);
        // Asked for after 11 ended, it must have a higher token.
        late.asked_ns = Some(6);
        assert_eq!(token_regressions(&[early, late]), 1);
        // So must one asked for after 11 began, while 11 was held.
        late.asked_ns = Some(3);
        assert_eq!(token_regressions(&[early, late]), 1);
        assert!(token_regression(&[early, late]).is_some());
        // A writer's order is judged from its grant, whoever came before.
        let mut writer = holding(ClaimSpec::Exclusive, 10, 6, 8);
        writer.asked_ns = Some(0);
        assert_eq!(token_regressions(&[early, writer]), 1);
    }

    #[test]
    fn readers_let_in_together_may_hold_tokens_in_either_order() {
        // Two readers asked while a writer held (etcd numbers them by
        // when they asked), and one release let both in: whoever records
        // first, neither began before the other asked.
        let writer = holding(ClaimSpec::Exclusive, 5, 0, 10);
        let mut first = holding(ClaimSpec::Shared, 8, 11, 20);
        first.asked_ns = Some(2);
        let mut second = holding(ClaimSpec::Shared, 7, 12, 19);
        second.asked_ns = Some(1);
        assert_eq!(token_regressions(&[writer, first, second]), 0);
        // A reader asked for once a reader was in must come after it.
        let mut third = holding(ClaimSpec::Shared, 6, 25, 30);
        third.asked_ns = Some(15);
        assert_eq!(token_regressions(&[writer, first, second, third]), 1);
        // Also when the earlier one never said it ended (it was killed).
        let mut killed = first;
        killed.end_ns = None;
        assert_eq!(token_regressions(&[writer, killed, second, third]), 1);
    }
}

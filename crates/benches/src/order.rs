//! Whether tasks were served in the order they asked: a lock that is first
//! come, first served grants no task before another that asked earlier and
//! still waits.
//!
//! "Asked" is when a task called acquire, by the wall clock all processes
//! share. Tasks that ask within a moment of each other can reach the
//! server in either order (a busy machine may not even run a task's
//! request until later), so only a task that asked at least [`MARGIN`]
//! before another counts as overtaken by it. In rounds every task asks at
//! the start of the round, within about that margin, so there only gross
//! unfairness can show; the tight loop, where tasks ask at different
//! times, is where order shows.
//!
//! Where a worker says when each wait's first attempt was sent and came
//! back in line (ours do, see [`crate::asking`]), the order needs no
//! margin: [`overtaking_in_line`] counts only grants that overtook a wait
//! surely ahead in line.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::worker::Tenure;

/// How much earlier a task must have asked to count as overtaken.
pub(crate) const MARGIN: Duration = Duration::from_millis(1);

/// How many of `holds` were granted while a task that had asked at least
/// [`MARGIN`] earlier in the same round (the tight loop is one round) still
/// waited: each such grant overtook somebody. `None` when some hold does
/// not say when it was asked (the Python peer's).
///
/// Only grants within the window are seen, so a task still waiting when
/// the window closed is not counted as overtaken.
pub(crate) fn overtaking(holds: &[Tenure]) -> Option<usize> {
    overtaking_by(holds, MARGIN.as_nanos() as u64)
}

fn overtaking_by(holds: &[Tenure], margin_ns: u64) -> Option<usize> {
    if holds.iter().any(|hold| hold.asked_at_ns == 0) {
        return None;
    }
    let mut rounds: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for hold in holds {
        rounds
            .entry(hold.round)
            .or_default()
            .push((hold.asked_at_ns, hold.acquired_at_ns));
    }
    let mut overtook = 0;
    for mut asks in rounds.into_values() {
        asks.sort_unstable();
        // The latest grant among the tasks that asked at least the margin
        // before this one: if it came after this grant, this grant
        // overtook that task. One sweep, since asks are sorted.
        let (mut earlier, mut latest_grant) = (0, 0u64);
        for &(asked, granted) in &asks {
            while asks[earlier].0 + margin_ns < asked {
                latest_grant = latest_grant.max(asks[earlier].1);
                earlier += 1;
            }
            overtook += usize::from(latest_grant > granted);
        }
    }
    Some(overtook)
}

/// The grants that overtook a wait surely ahead in line (see
/// [`overtaking_in_line`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Overtaking {
    /// How many grants did.
    pub(crate) grants: usize,
    /// The longest that a wait overtaken had known it was in line when the
    /// wait that overtook it first asked: how close together the waits
    /// that were served out of order asked.
    pub(crate) lead: Duration,
}

/// The grants of `holds` made while a wait surely ahead of theirs in line
/// still waited, in the same round: one whose answer to wait came back
/// before their first attempt was sent. Places are stored between an
/// attempt's sending and its answer, so no grant is counted that the store
/// may have made in order; and whole locks are granted one after another,
/// so the order of the grants is the order of the holds. A hold granted
/// without asking the store (handed over in its process) counts as asked
/// when acquire was called. `None` where no hold says when it was sent:
/// the worker does not record it.
pub(crate) fn overtaking_in_line(holds: &[Tenure]) -> Option<Overtaking> {
    if !holds.is_empty() && holds.iter().all(|hold| hold.sent_ns == 0) {
        return None;
    }
    let mut rounds: BTreeMap<u32, Vec<&Tenure>> = BTreeMap::new();
    for hold in holds {
        rounds.entry(hold.round).or_default().push(hold);
    }
    let mut overtaking = Overtaking::default();
    for holds in rounds.into_values() {
        // Waits in line by when they knew it; every wait by when it asked.
        let mut in_line: Vec<(u64, u64)> = holds
            .iter()
            .filter(|hold| hold.in_line_ns != 0)
            .map(|hold| (hold.in_line_ns, hold.acquired_at_ns))
            .collect();
        in_line.sort_unstable();
        // The latest grant among the first i + 1 waits in line: it rises,
        // so the first wait whose grant came after a given one is found by
        // a binary search.
        let latest: Vec<u64> = in_line
            .iter()
            .scan(0, |latest, &(_, granted)| {
                *latest = granted.max(*latest);
                Some(*latest)
            })
            .collect();
        let mut asked: Vec<(u64, u64)> = holds
            .iter()
            .map(|hold| match hold.sent_ns {
                0 => (hold.asked_at_ns, hold.acquired_at_ns),
                sent => (sent, hold.acquired_at_ns),
            })
            .collect();
        asked.sort_unstable();
        let mut ahead = 0;
        for &(sent, granted) in &asked {
            while ahead < in_line.len() && in_line[ahead].0 < sent {
                ahead += 1;
            }
            let first_later = latest[..ahead].partition_point(|&latest| latest <= granted);
            if first_later < ahead {
                overtaking.grants += 1;
                let lead = Duration::from_nanos(sent - in_line[first_later].0);
                overtaking.lead = overtaking.lead.max(lead);
            }
        }
    }
    Some(overtaking)
}

#[cfg(test)]
mod tests {
    use distlock::LockKind;

    use super::*;

    fn hold(asked: u64, granted: u64, round: u32) -> Tenure {
        Tenure {
            asked_at_ns: asked,
            sent_ns: 0,
            in_line_ns: 0,
            acquired_at_ns: granted,
            released_at_ns: granted + 1,
            token: 0,
            process: 0,
            task: 0,
            round,
            kind: LockKind::Exclusive,
        }
    }

    #[test]
    fn a_grant_before_an_earlier_asker_overtakes_it() {
        // Asked 1, 2, 3; granted 10, 30, 20: the third overtook the second.
        let holds = [hold(1, 10, 1), hold(2, 30, 1), hold(3, 20, 1)];
        assert_eq!(overtaking_by(&holds, 0), Some(1));
        // Served in asking order.
        let fair = [hold(1, 10, 1), hold(2, 20, 1), hold(3, 30, 1)];
        assert_eq!(overtaking_by(&fair, 0), Some(0));
        // Rounds are judged apart: a later round asks after every grant of
        // the one before.
        let rounds = [hold(5, 10, 1), hold(1, 50, 2), hold(6, 40, 2)];
        assert_eq!(overtaking_by(&rounds, 0), Some(1));
    }

    #[test]
    fn asks_within_the_margin_are_not_ordered() {
        let ms = 1_000_000;
        // The second asked half a millisecond after the first and was
        // served first: within the margin. The third asked 2 ms after the
        // first and was served before it: overtaking.
        let holds = [
            hold(10 * ms, 20 * ms, 0),
            hold(10 * ms + ms / 2, 15 * ms, 0),
            hold(12 * ms, 18 * ms, 0),
        ];
        assert_eq!(overtaking(&holds), Some(1));
    }

    fn grants(holds: &[Tenure]) -> Option<usize> {
        overtaking_in_line(holds).map(|o| o.grants)
    }

    fn waited(sent: u64, in_line: u64, granted: u64) -> Tenure {
        Tenure {
            sent_ns: sent,
            in_line_ns: in_line,
            ..hold(sent, granted, 0)
        }
    }

    #[test]
    fn only_a_wait_surely_ahead_in_line_is_overtaken() {
        // The first knew it was in line at 20; the second asked at 25 and
        // was granted first: it overtook. The third asked at 15, before
        // the first knew, and was granted before it: the store may have
        // placed it first.
        let holds = [waited(10, 20, 100), waited(25, 30, 90), waited(15, 35, 80)];
        assert_eq!(grants(&holds), Some(1));
        // Overtaken 5 after it knew: the wait that asked at 25 overtook
        // the one in line since 20.
        assert_eq!(
            overtaking_in_line(&holds).map(|o| o.lead),
            Some(Duration::from_nanos(5))
        );
        // Granted at once (never in line): nobody is ahead of it, and it is
        // ahead of nobody.
        let holds = [waited(10, 0, 50), waited(30, 40, 45)];
        assert_eq!(grants(&holds), Some(0));
        // In line order.
        let fair = [
            waited(10, 20, 100),
            waited(25, 30, 110),
            waited(15, 35, 120),
        ];
        assert_eq!(grants(&fair), Some(0));
    }

    #[test]
    fn a_grant_handed_over_asked_when_acquire_was_called() {
        // The second never reached the store: it asked at 30, after the
        // first knew it was in line, and was granted first.
        let holds = [waited(10, 20, 100), hold(30, 90, 0)];
        assert_eq!(grants(&holds), Some(1));
    }

    #[test]
    fn unknown_sends_say_nothing() {
        assert_eq!(grants(&[hold(1, 2, 0), hold(3, 4, 0)]), None);
        assert_eq!(grants(&[]), Some(0));
    }

    #[test]
    fn unknown_asks_say_nothing() {
        assert_eq!(overtaking(&[hold(0, 10, 0), hold(2, 3, 0)]), None);
        assert_eq!(overtaking(&[]), Some(0));
    }
}

//! A run as a history for the checker: every holder's validity, from the
//! holders' records; and, in exclusive runs, the acquires, releases and
//! losses too, with the fenced counter's operations from its log, all on
//! the one monotonic clock.
//!
//! Validities are checked for exclusion in every run: exclusive, readers
//! and writers, permits. The lock model of the linearizability search has
//! one holder at a time, and its register knows no readers' rule, so only
//! exclusive runs add their operations.

use std::collections::HashMap;

use distlock_history::{Acquired, Call, Done, History, Op, Read, Report, Share};

use crate::fenced::{Entry, Op as FencedOp};
use crate::holdings::Holding;
use crate::outcome::Outcome;
use crate::worker::{ClaimSpec, Event, Release};

/// The lock and the counter, as the history names them: a run has one of
/// each.
const LOCK: &str = "lock";
const COUNTER: &str = "counter";

/// The history of a run.
///
/// # Errors
/// An operation the records make is malformed (it answered before it was
/// asked, on a clock that went back): the run cannot be checked.
pub(crate) fn of_run(events: &[Event], holdings: &[Holding], log: &[Entry]) -> Outcome<History> {
    let mut ops: Vec<Op> = holdings.iter().filter_map(validity).collect();
    let exclusive = events.iter().all(|event| match event {
        Event::Acquired { claim, .. } => *claim == ClaimSpec::Exclusive,
        _ => true,
    }) && log.iter().all(|entry| entry.op != FencedOp::SharedRead);
    if exclusive {
        ops.extend(lock_ops(events));
        ops.extend(log.iter().map(fenced_op));
    }
    Ok(History::from_ops(ops)?)
}

/// Checks the history of a run.
///
/// # Errors
/// As [`of_run`].
pub(crate) fn check(events: &[Event], holdings: &[Holding], log: &[Entry]) -> Outcome<Report> {
    Ok(distlock_history::check(&of_run(events, holdings, log)?))
}

/// A holding's validity, from its grant to its end: `None` when its end
/// was never recorded (its process was killed, or is still stopped), or
/// came before its grant's answer (a deadline passed while the grant was
/// on its way, so the holder never had the lease to act on).
fn validity(holding: &Holding) -> Option<Op> {
    let end = holding.end_ns.filter(|end| *end > holding.start_ns)?;
    let share = match holding.claim {
        ClaimSpec::Exclusive => Share::Exclusive,
        ClaimSpec::Shared => Share::Shared,
        ClaimSpec::Permit { limit } => Share::Permit { limit },
    };
    Some(Op::held(
        holding.pid.into(),
        holding.start_ns,
        end,
        LOCK,
        holding.token,
        share,
    ))
}

/// The acquires, releases and losses in the holders' records.
fn lock_ops(events: &[Event]) -> Vec<Op> {
    let mut ops = Vec::new();
    // Each task asks, then records what the ask brought, in order.
    let mut asked: HashMap<(u32, usize), u64> = HashMap::new();
    let acquire = |outcome| Call::Acquire {
        name: LOCK.into(),
        outcome,
    };
    for event in events {
        match *event {
            Event::Asked { pid, task, at_ns } => {
                asked.insert((pid, task), at_ns);
            }
            Event::Acquired {
                pid,
                task,
                token,
                at_ns,
                ..
            } => {
                // A grant recorded without its ask may have been asked for
                // at any time before.
                let since = asked.remove(&(pid, task)).unwrap_or(0);
                let granted = acquire(Acquired::Granted { token });
                ops.push(Op::new(pid.into(), since, at_ns, granted));
            }
            Event::TimedOut { pid, task, at_ns } => {
                let since = asked.remove(&(pid, task)).unwrap_or(0);
                ops.push(Op::new(
                    pid.into(),
                    since,
                    at_ns,
                    acquire(Acquired::NotGranted),
                ));
            }
            // An error may have come after the server granted the lock.
            Event::Failed {
                pid, task, at_ns, ..
            } => {
                let since = asked.remove(&(pid, task)).unwrap_or(0);
                ops.push(Op::new(
                    pid.into(),
                    since,
                    at_ns,
                    acquire(Acquired::Unknown),
                ));
            }
            Event::Ended {
                pid,
                token,
                at_ns,
                lost_ns,
                release,
                released_ns,
                ..
            } => {
                if let Some(lost_ns) = lost_ns {
                    ops.push(Op::lost(pid.into(), lost_ns, LOCK, token));
                }
                let outcome = match release {
                    Release::Released => Done::Ok,
                    Release::NotOurs => Done::Refused,
                    Release::Failed => Done::Unknown,
                };
                let call = Call::Release {
                    name: LOCK.into(),
                    token,
                    outcome,
                };
                ops.push(match released_ns {
                    Some(answered) => Op::new(pid.into(), at_ns, answered, call),
                    // A record from before releases were timed.
                    None => Op::pending(pid.into(), at_ns, unknown(call)),
                });
            }
            Event::Started { .. } => {}
        }
    }
    // Asks never answered: the process was killed, or is still stopped.
    ops.extend(
        asked
            .into_iter()
            .map(|((pid, _), at_ns)| Op::pending(pid.into(), at_ns, acquire(Acquired::Unknown))),
    );
    ops
}

/// A release whose answer is not known.
fn unknown(call: Call) -> Call {
    match call {
        Call::Release { name, token, .. } => Call::Release {
            name,
            token,
            outcome: Done::Unknown,
        },
        other => other,
    }
}

/// A fenced counter's logged operation: it took effect under the
/// counter's own lock, at the instant it logged.
fn fenced_op(entry: &Entry) -> Op {
    let call = match entry.op {
        FencedOp::Write => Call::FencedWrite {
            resource: COUNTER.into(),
            token: entry.token,
            value: entry.value,
            outcome: if entry.accepted {
                Done::Ok
            } else {
                Done::Refused
            },
        },
        // Shared reads make no history (see `of_run`); a writer's read is
        // fenced as its write is.
        FencedOp::Read | FencedOp::SharedRead => Call::FencedRead {
            resource: COUNTER.into(),
            token: Some(entry.token),
            outcome: if entry.accepted {
                Read::Value(entry.value)
            } else {
                Read::Refused
            },
        },
    };
    Op::new(entry.pid.into(), entry.at_ns, entry.at_ns, call)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holdings::holdings;

    fn entry(op: FencedOp, token: u64, accepted: bool, value: u64, at_ns: u64) -> Entry {
        Entry {
            op,
            token,
            accepted,
            value,
            at_ns,
            pid: 7,
        }
    }

    fn ended(token: u64, at_ns: u64, release: Release, released_ns: u64) -> Event {
        ended_by(0, token, at_ns, release, released_ns)
    }

    fn ended_by(task: usize, token: u64, at_ns: u64, release: Release, released_ns: u64) -> Event {
        Event::Ended {
            pid: 1,
            task,
            token,
            at_ns,
            lost_ns: None,
            read_ok: true,
            write_ok: Some(true),
            release,
            released_ns: Some(released_ns),
            lost_reason: None,
            valid_until_ns: None,
            witnessed: false,
            warned_ns: None,
        }
    }

    fn cycle(task: usize, token: u64, from: u64) -> [Event; 2] {
        [
            Event::Asked {
                pid: 1,
                task,
                at_ns: from,
            },
            Event::Acquired {
                pid: 1,
                task,
                claim: ClaimSpec::Exclusive,
                token,
                at_ns: from + 10,
                resumed: false,
            },
        ]
    }

    #[test]
    fn holders_in_turn_make_a_history_that_passes() {
        let mut events = Vec::new();
        events.extend(cycle(0, 1, 0));
        events.push(ended(1, 40, Release::Released, 50));
        events.extend(cycle(0, 2, 60));
        events.push(ended(2, 100, Release::Released, 110));
        let log = [
            entry(FencedOp::Read, 1, true, 0, 20),
            entry(FencedOp::Write, 1, true, 1, 30),
            entry(FencedOp::Read, 2, true, 1, 80),
            entry(FencedOp::Write, 2, true, 2, 90),
        ];
        let report = check(&events, &holdings(&events), &log).unwrap();
        assert!(report.passed(), "{report}");
        // Four of the lock, four of the counter, and two validities.
        assert_eq!((report.checked, report.operations), (2, 10));
    }

    #[test]
    fn a_release_that_succeeds_after_the_next_grant_is_a_violation() {
        let mut events = Vec::new();
        events.extend(cycle(0, 1, 0));
        events.extend(cycle(1, 2, 20));
        events.push(ended(1, 40, Release::Released, 50));
        let report = check(&events, &holdings(&events), &[]).unwrap();
        assert_eq!(report.violations.len(), 1, "{report}");
    }

    #[test]
    fn a_read_of_a_write_the_log_lacks_is_a_violation() {
        let log = [
            entry(FencedOp::Write, 1, true, 1, 10),
            entry(FencedOp::Read, 2, true, 5, 20),
        ];
        let report = check(&[], &[], &log).unwrap();
        assert_eq!(report.violations.len(), 1, "{report}");
    }

    #[test]
    fn an_ask_never_answered_is_an_acquire_of_unknown_outcome() {
        let events = [Event::Asked {
            pid: 1,
            task: 0,
            at_ns: 5,
        }];
        let history = of_run(&events, &[], &[]).unwrap();
        assert_eq!(history.len(), 1);
        assert!(history.ops()[0].is_unknown());
        assert_eq!(history.ops()[0].complete_ns, None);
    }

    #[test]
    fn a_release_recorded_as_answered_before_it_was_made_cannot_be_checked() {
        let mut events = Vec::new();
        events.extend(cycle(0, 1, 0));
        events.push(ended(1, 40, Release::Released, 30));
        let error = of_run(&events, &holdings(&events), &[])
            .unwrap_err()
            .to_string();
        assert!(error.contains("before its invocation"), "{error}");
    }

    #[test]
    fn a_run_with_readers_is_checked_on_its_validities_alone() {
        let log = [entry(FencedOp::SharedRead, 1, true, 0, 10)];
        let mut events = Vec::new();
        events.extend(cycle(0, 1, 0));
        let history = of_run(&events, &holdings(&events), &log).unwrap();
        assert!(history.is_empty(), "{history:?}");
    }

    #[test]
    fn holders_valid_together_fail_whatever_their_releases_say() {
        // The mutant that grants every caller: rising tokens, and the
        // superseded release refused, fit the lock model; the validities
        // do not.
        let mut events = Vec::new();
        events.extend(cycle(0, 1, 0));
        events.extend(cycle(1, 2, 20));
        events.push(ended_by(1, 2, 40, Release::Released, 50));
        events.push(ended(1, 60, Release::NotOurs, 70));
        let report = check(&events, &holdings(&events), &[]).unwrap();
        assert!(report.violations.is_empty(), "{report}");
        assert_eq!(report.overlaps.len(), 1, "{report}");
    }

    #[test]
    fn a_holder_past_its_deadline_no_longer_overlaps() {
        // Holder 1 was paused: it woke at 60, after its deadline at 25.
        let mut events = Vec::new();
        events.extend(cycle(0, 1, 0));
        events.extend(cycle(1, 2, 20));
        events.push(ended_by(1, 2, 40, Release::Released, 50));
        let mut paused = ended(1, 60, Release::NotOurs, 70);
        if let Event::Ended { valid_until_ns, .. } = &mut paused {
            *valid_until_ns = Some(25);
        }
        events.push(paused);
        let report = check(&events, &holdings(&events), &[]).unwrap();
        assert!(report.passed(), "{report}");
        assert_eq!(report.validities, 2);
    }
}

//! Exclusion: hand-made histories whose holders were valid together must
//! fail, whatever their tokens and releases say; holders valid in turn, or
//! side by side where the lock allows it, pass.

mod common;

use common::*;
use distlock_history::{Done, History, Op, Report, Share, check};

const LOCK: &str = "jobs";
const PERMITS: Share = Share::Permit { limit: 2 };

/// Checks that `history` is linearizable and its only fault is `count`
/// overlapping validities.
fn overlaps(history: &History, count: usize) -> Report {
    let report = check(history);
    assert!(report.violations.is_empty(), "{report}");
    assert!(report.undecided.is_empty(), "{report}");
    assert_eq!(report.overlaps.len(), count, "{report}");
    assert_eq!(report.passed(), count == 0, "{report}");
    report
}

/// A cycle of process `process`: granted token `token` at `at`, valid for
/// `valid`, then released, with `answer` as the release's answer.
fn cycle(process: u64, at: u64, valid: u64, token: u64, answer: Done) -> [Op; 3] {
    [
        granted(process, at - 5, at, LOCK, token),
        held(process, at, at + valid, LOCK, token, Share::Exclusive),
        release(process, at + valid, at + valid + 5, LOCK, token, answer),
    ]
}

#[test]
fn a_lock_that_grants_every_caller_is_flagged() {
    // The mutant the lock model alone cannot see: tokens rise, and each
    // superseded release is refused, so some order fits every operation.
    let ops: Vec<Op> = (1..=3)
        .flat_map(|token| cycle(token, 10 * token, 100, token, Done::Refused))
        .collect();
    let without_validities: Vec<Op> = ops
        .iter()
        .filter(|op| !matches!(op.call, distlock_history::Call::Held { .. }))
        .cloned()
        .collect();
    assert!(check(&history(without_validities)).passed());
    let report = overlaps(&history(ops), 2);
    let first = &report.overlaps[0];
    assert_eq!((first.earlier_token(), first.later_token()), (1, 2));
    assert_eq!(first.began_ns(), 20);
    assert_eq!(first.length_ns(), 90);
    let text = report.to_string();
    assert!(text.contains("valid together for 0.000090 ms"), "{text}");
    assert!(text.contains("held \"jobs\" token 2, valid"), "{text}");
}

#[test]
fn holders_valid_in_turn_pass_and_validities_that_meet_do_not_overlap() {
    let mut ops = Vec::new();
    ops.extend(cycle(1, 10, 90, 1, Done::Ok));
    // 1's validity ends at 100, the instant 2's begins.
    ops.extend(cycle(2, 100, 50, 2, Done::Ok));
    let report = overlaps(&history(ops), 0);
    assert_eq!((report.validities, report.most_at_once), (2, 1));
}

#[test]
fn a_grant_may_follow_an_unreleased_lease_once_its_validity_ended() {
    // 1 was paused: its deadline passed at 50, long before it woke and
    // tried to release, refused, at 500.
    overlaps(
        &history([
            granted(1, 0, 10, LOCK, 1),
            held(1, 10, 50, LOCK, 1, Share::Exclusive),
            granted(2, 60, 70, LOCK, 2),
            held(2, 70, 90, LOCK, 2, Share::Exclusive),
            release(2, 90, 95, LOCK, 2, Done::Ok),
            release(1, 500, 510, LOCK, 1, Done::Refused),
        ]),
        0,
    );
}

#[test]
fn a_grant_before_the_unreleased_lease_ran_out_is_flagged() {
    // The same, but 1's deadline was 80: 2 was let in while 1 could act.
    let report = overlaps(
        &history([
            granted(1, 0, 10, LOCK, 1),
            held(1, 10, 80, LOCK, 1, Share::Exclusive),
            granted(2, 60, 70, LOCK, 2),
            held(2, 70, 90, LOCK, 2, Share::Exclusive),
            release(1, 500, 510, LOCK, 1, Done::Refused),
        ]),
        1,
    );
    assert_eq!(report.overlaps[0].length_ns(), 10);
}

#[test]
fn readers_may_be_valid_together_but_never_beside_a_writer() {
    let readers = [
        held(1, 0, 100, LOCK, 1, Share::Shared),
        held(2, 10, 120, LOCK, 2, Share::Shared),
        held(3, 20, 30, LOCK, 3, Share::Shared),
    ];
    assert_eq!(overlaps(&history(readers.clone()), 0).most_at_once, 3);
    let mut with_writer = readers.to_vec();
    with_writer.push(held(4, 110, 130, LOCK, 4, Share::Exclusive));
    let report = overlaps(&history(with_writer), 1);
    // Named against the reader valid longest: the one it clashed with
    // last.
    assert_eq!(report.overlaps[0].earlier_token(), 2);
    // A reader let in while a writer is valid.
    overlaps(
        &history([
            held(1, 0, 100, LOCK, 1, Share::Exclusive),
            held(2, 50, 60, LOCK, 2, Share::Shared),
        ]),
        1,
    );
}

#[test]
fn a_semaphore_overlaps_only_past_its_limit() {
    let within = [
        held(1, 0, 100, LOCK, 1, PERMITS),
        held(2, 10, 100, LOCK, 2, PERMITS),
        held(3, 100, 150, LOCK, 3, PERMITS),
    ];
    assert_eq!(overlaps(&history(within), 0).most_at_once, 2);
    let beyond = [
        held(1, 0, 100, LOCK, 1, PERMITS),
        held(2, 10, 100, LOCK, 2, PERMITS),
        held(3, 99, 150, LOCK, 3, PERMITS),
    ];
    assert_eq!(overlaps(&history(beyond), 1).most_at_once, 3);
}

#[test]
fn locks_are_swept_each_on_its_own() {
    let report = overlaps(
        &history([
            held(1, 0, 100, "a", 1, Share::Exclusive),
            held(2, 10, 100, "b", 1, Share::Exclusive),
        ]),
        0,
    );
    assert_eq!((report.checked, report.validities), (2, 2));
}

#[test]
fn a_validity_needs_its_end_and_a_semaphore_a_permit() {
    let endless = Op::pending(
        1,
        0,
        distlock_history::Call::Held {
            name: LOCK.into(),
            token: 1,
            share: Share::Exclusive,
        },
    );
    let error = History::from_ops([endless]).unwrap_err().to_string();
    assert!(error.contains("a validity needs its end"), "{error}");
    let no_permits = held(1, 0, 10, LOCK, 1, Share::Permit { limit: 0 });
    let error = History::from_ops([no_permits]).unwrap_err().to_string();
    assert!(error.contains("at least one permit"), "{error}");
}

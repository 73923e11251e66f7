//! Hand-made histories that break the model: the checker must flag each,
//! on the right lock or resource, naming the operation that has no place
//! and the rule it breaks.

mod common;

use common::*;
use distlock_history::{Done, History, Op, Read, Subject, Violation, check};

const LOCK: &str = "jobs";
const LEDGER: &str = "ledger";

/// Checks that `history` fails on `subject` alone, and returns the
/// violation found.
fn violation(history: &History, subject: Subject) -> Violation {
    let report = check(history);
    assert!(!report.passed(), "passed: {history:?}");
    assert!(report.undecided.is_empty(), "{report}");
    assert_eq!(report.violations.len(), 1, "{report}");
    let violation = report.violations[0].clone();
    assert_eq!(violation.subject, subject, "{report}");
    violation
}

fn lock() -> Subject {
    Subject::Lock(LOCK.into())
}

fn ledger() -> Subject {
    Subject::Resource(LEDGER.into())
}

fn assert_reason(violation: &Violation, fragment: &str) {
    assert!(
        violation.reason.contains(fragment),
        "expected {fragment:?} in:\n{violation}"
    );
}

#[test]
fn a_token_granted_twice_is_flagged() {
    let regrant = granted(2, 40, 50, LOCK, 1);
    let found = violation(
        &history([
            granted(1, 0, 10, LOCK, 1),
            release(1, 20, 30, LOCK, 1, Done::Ok),
            regrant.clone(),
        ]),
        lock(),
    );
    assert_eq!(found.blocked, regrant);
    assert_reason(&found, "token 1 is granted after token 1");
}

#[test]
fn a_lower_token_granted_later_is_flagged() {
    let found = violation(
        &history([granted(1, 0, 10, LOCK, 5), granted(2, 20, 30, LOCK, 3)]),
        lock(),
    );
    assert_reason(&found, "token 3 is granted after token 5");
}

#[test]
fn a_release_that_succeeds_after_another_grant_is_flagged() {
    // 2's grant ended 1's lease (it had expired): 1's release can only
    // have ended 2's lease, or the two overlapped.
    let late = release(1, 40, 50, LOCK, 1, Done::Ok);
    let found = violation(
        &history([
            granted(1, 0, 10, LOCK, 1),
            granted(2, 20, 30, LOCK, 2),
            late.clone(),
        ]),
        lock(),
    );
    assert_eq!(found.blocked, late);
    assert_reason(&found, "after token 2 was granted");
    assert_eq!(
        found.context,
        [granted(1, 0, 10, LOCK, 1), granted(2, 20, 30, LOCK, 2)],
        "{found}"
    );
}

#[test]
fn a_grant_inside_a_lease_that_was_released_later_is_flagged_despite_overlaps() {
    // Token 1's grant overlaps token 2's, but must come first; then 1's
    // successful release comes after 2's grant.
    violation(
        &history([
            granted(1, 0, 100, LOCK, 1),
            granted(2, 10, 20, LOCK, 2),
            release(1, 110, 120, LOCK, 1, Done::Ok),
        ]),
        lock(),
    );
}

#[test]
fn a_lease_released_twice_is_flagged() {
    let found = violation(
        &history([
            granted(1, 0, 10, LOCK, 1),
            release(1, 20, 30, LOCK, 1, Done::Ok),
            release(1, 40, 50, LOCK, 1, Done::Ok),
        ]),
        lock(),
    );
    assert_reason(&found, "released already or never granted");
}

#[test]
fn a_loss_reported_before_its_grant_is_flagged() {
    let found = violation(
        &history([Op::lost(1, 0, LOCK, 5), granted(1, 10, 20, LOCK, 5)]),
        lock(),
    );
    assert_reason(&found, "before that token was granted");
}

#[test]
fn a_stale_write_accepted_is_flagged() {
    let stale = write(1, 20, 30, LEDGER, 4, 4, Done::Ok);
    let found = violation(
        &history([write(2, 0, 10, LEDGER, 5, 5, Done::Ok), stale.clone()]),
        ledger(),
    );
    assert_eq!(found.blocked, stale);
    assert_eq!(found.context, [write(2, 0, 10, LEDGER, 5, 5, Done::Ok)]);
    assert_reason(&found, "token 4 is accepted after token 5");
}

#[test]
fn an_expired_holders_write_accepted_after_the_next_holder_read_is_flagged() {
    violation(
        &history([
            granted(1, 0, 10, LOCK, 1),
            granted(2, 20, 30, LOCK, 2),
            read(2, 40, 50, LEDGER, Some(2), Read::Value(0)),
            write(1, 60, 70, LEDGER, 1, 1, Done::Ok),
        ]),
        ledger(),
    );
}

#[test]
fn overlapping_accepted_writes_whose_read_shows_the_wrong_order_are_flagged() {
    // Both accepted, so 4 took effect before 5: the value is 5's.
    let found = violation(
        &history([
            write(1, 0, 10, LEDGER, 4, 40, Done::Ok),
            write(2, 0, 10, LEDGER, 5, 50, Done::Ok),
            read(3, 20, 30, LEDGER, None, Read::Value(40)),
        ]),
        ledger(),
    );
    assert_eq!(
        found.blocked,
        read(3, 20, 30, LEDGER, None, Read::Value(40))
    );
    assert_reason(&found, "returns 40 where the last accepted write left 50");
    // Both writes are told: the one that left 50, and the one beside it.
    assert_eq!(found.context.len(), 2, "{found}");
}

#[test]
fn a_read_of_a_value_never_written_is_flagged() {
    let found = violation(
        &history([
            write(1, 0, 10, LEDGER, 1, 1, Done::Ok),
            read(2, 20, 30, LEDGER, None, Read::Value(7)),
        ]),
        ledger(),
    );
    assert_reason(&found, "returns 7");
}

#[test]
fn a_read_of_an_overwritten_value_is_flagged() {
    violation(
        &history([
            write(1, 0, 10, LEDGER, 1, 1, Done::Ok),
            write(1, 20, 30, LEDGER, 1, 2, Done::Ok),
            read(2, 40, 50, LEDGER, Some(1), Read::Value(1)),
        ]),
        ledger(),
    );
}

#[test]
fn a_fresh_write_refused_is_flagged() {
    // ≥, not >: the holder of the highest token may write again.
    let found = violation(
        &history([
            write(1, 0, 10, LEDGER, 3, 1, Done::Ok),
            write(1, 20, 30, LEDGER, 3, 2, Done::Refused),
        ]),
        ledger(),
    );
    assert_reason(&found, "refused, yet no higher token has been accepted");
}

#[test]
fn a_fenced_read_refused_with_nothing_accepted_is_flagged() {
    violation(
        &history([read(1, 0, 10, LEDGER, Some(1), Read::Refused)]),
        ledger(),
    );
}

#[test]
fn a_regrant_that_lets_the_previous_holder_keep_writing_is_flagged_on_the_lock() {
    // The resource alone sees three writes with token 1, all legal: the
    // re-grant of token 1 is what is wrong.
    let report = check(&history([
        granted(1, 0, 10, LOCK, 1),
        write(1, 20, 30, LEDGER, 1, 1, Done::Ok),
        granted(2, 40, 50, LOCK, 1),
        write(2, 60, 70, LEDGER, 1, 2, Done::Ok),
        write(1, 80, 90, LEDGER, 1, 3, Done::Ok),
    ]));
    assert_eq!(report.violations.len(), 1, "{report}");
    assert_eq!(report.violations[0].subject, lock(), "{report}");
}

#[test]
fn a_write_that_never_answered_cannot_explain_a_read_before_it_was_made() {
    violation(
        &history([
            read(1, 0, 10, LEDGER, None, Read::Value(5)),
            writing(2, 20, LEDGER, 1, 5),
        ]),
        ledger(),
    );
}

#[test]
fn a_release_that_never_answered_cannot_excuse_an_overlap_after_it() {
    // Whether or not 1's first release took effect, 2's grant comes
    // between 1's grant and 1's successful release.
    violation(
        &history([
            granted(1, 0, 10, LOCK, 1),
            granted(2, 20, 30, LOCK, 2),
            releasing(1, 40, LOCK, 1),
            release(1, 50, 60, LOCK, 1, Done::Ok),
        ]),
        lock(),
    );
}

#[test]
fn each_broken_object_is_reported_and_the_report_reads_well() {
    let report = check(&history([
        granted(1, 0, 10, "a", 2),
        granted(2, 20, 30, "a", 2),
        granted(1, 0, 10, "b", 1),
        write(1, 0, 10, "ra", 2, 1, Done::Ok),
        write(2, 20, 30, "ra", 1, 1, Done::Ok),
        read(1, 0, 10, "rb", None, Read::Value(0)),
    ]));
    let subjects: Vec<Subject> = report
        .violations
        .iter()
        .map(|violation| violation.subject.clone())
        .collect();
    assert_eq!(
        subjects,
        [Subject::Lock("a".into()), Subject::Resource("ra".into())]
    );
    assert_eq!((report.checked, report.operations), (4, 6));
    let text = report.to_string();
    assert!(text.contains("2 violations"), "{text}");
    assert!(
        text.contains("process 2: acquire \"a\" -> granted token 2 [0.000020 ms .. 0.000030 ms]"),
        "{text}"
    );
}

#[test]
fn a_search_that_runs_out_of_moves_is_undecided_not_passed() {
    let ops = (0..8).map(|process| writing(process, 0, LEDGER, process, process));
    let report = distlock_history::check_within(
        &history(ops.chain([read(9, 100, 110, LEDGER, None, Read::Value(99))])),
        5,
    );
    assert!(!report.passed());
    assert_eq!(report.undecided, [ledger()], "{report}");
}

#[test]
fn a_long_context_shows_its_latest_operations() {
    // Twenty overlapping writes, all accepted, then a read of the first.
    let mut ops: Vec<_> = (1..=20)
        .map(|token| write(token, 0, 10, LEDGER, token, token, Done::Ok))
        .collect();
    ops.push(read(99, 20, 30, LEDGER, None, Read::Value(1)));
    let found = violation(&history(ops), ledger());
    assert_eq!(found.context.len(), 20, "{found}");
    let text = found.to_string();
    assert!(text.contains("(8 earlier ones left out)"), "{text}");
    assert!(text.contains("write 20 to"), "{text}");
    assert!(!text.contains("write 8 to"), "{text}");
}

#[test]
fn an_extension_that_succeeds_after_a_release_by_force_is_flagged() {
    // A lock that hides its losses, or extends without the owner check,
    // keeps a lease an administrator ended.
    let kept = extend(1, 40, 50, LOCK, 1, Done::Ok);
    let found = violation(
        &history([
            granted(1, 0, 10, LOCK, 1),
            forced(9, 20, 30, LOCK, Done::Ok),
            kept.clone(),
        ]),
        lock(),
    );
    assert_eq!(found.blocked, kept);
    assert_reason(
        &found,
        "after that lease was released, by its holder or by force",
    );
}

#[test]
fn an_extension_that_succeeds_after_the_next_grant_is_flagged() {
    let kept = extend(1, 40, 50, LOCK, 1, Done::Ok);
    let found = violation(
        &history([
            granted(1, 0, 10, LOCK, 1),
            granted(2, 20, 30, LOCK, 2),
            kept.clone(),
        ]),
        lock(),
    );
    assert_eq!(found.blocked, kept);
    assert_reason(&found, "after token 2 was granted");
}

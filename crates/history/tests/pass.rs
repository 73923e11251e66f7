//! Hand-made histories of a lease lock and its fenced resource that the
//! checker must accept: each is a legal run, however it looks.

mod common;

use common::*;
use distlock_history::{Done, History, Read, Report, Share, check};

const LOCK: &str = "jobs";
const LEDGER: &str = "ledger";

fn assert_passes(history: &History) -> Report {
    let report = check(history);
    assert!(report.passed(), "{report}");
    report
}

#[test]
fn an_empty_history_passes() {
    let report = assert_passes(&History::new());
    assert_eq!((report.checked, report.operations), (0, 0));
}

#[test]
fn holders_in_turn_read_and_write_with_their_tokens() {
    let report = assert_passes(&history([
        granted(1, 0, 10, LOCK, 1),
        read(1, 20, 30, LEDGER, Some(1), Read::Value(0)),
        write(1, 40, 50, LEDGER, 1, 1, Done::Ok),
        release(1, 60, 70, LOCK, 1, Done::Ok),
        granted(2, 80, 90, LOCK, 2),
        read(2, 100, 110, LEDGER, Some(2), Read::Value(1)),
        write(2, 120, 130, LEDGER, 2, 2, Done::Ok),
        release(2, 140, 150, LOCK, 2, Done::Ok),
    ]));
    assert_eq!((report.checked, report.operations), (2, 8));
}

#[test]
fn a_grant_may_follow_an_unreleased_lease_that_expired() {
    // What lets 2 in is 1's validity, ended at its deadline before 2's
    // grant; tests/exclusion.rs fails the same run with 1 still valid.
    assert_passes(&history([
        granted(1, 0, 10, LOCK, 1),
        held(1, 10, 15, LOCK, 1, Share::Exclusive),
        granted(2, 20, 30, LOCK, 2),
        held(2, 30, 60, LOCK, 2, Share::Exclusive),
        // Process 1's lease was gone: its release is refused.
        release(1, 40, 50, LOCK, 1, Done::Refused),
        release(2, 60, 70, LOCK, 2, Done::Ok),
    ]));
}

#[test]
fn an_expired_holder_may_write_before_the_next_holder_touches_the_resource() {
    assert_passes(&history([
        granted(1, 0, 10, LOCK, 1),
        granted(2, 20, 30, LOCK, 2),
        write(1, 40, 50, LEDGER, 1, 7, Done::Ok),
        // To the resource, 1's write came first: 2 reads it.
        read(2, 60, 70, LEDGER, Some(2), Read::Value(7)),
        write(1, 80, 90, LEDGER, 1, 8, Done::Refused),
    ]));
}

#[test]
fn tokens_may_skip_and_grants_that_overlap_may_answer_in_any_order() {
    assert_passes(&history([
        // Token 9 answered first, but token 4's grant may have come first.
        granted(2, 0, 10, LOCK, 9),
        granted(1, 5, 30, LOCK, 4),
        release(2, 40, 50, LOCK, 9, Done::Ok),
        granted(3, 60, 70, LOCK, 20),
    ]));
}

#[test]
fn overlapping_writes_may_take_effect_in_token_order_whatever_their_answers() {
    assert_passes(&history([
        write(1, 0, 100, LEDGER, 1, 1, Done::Ok),
        write(2, 10, 20, LEDGER, 2, 2, Done::Ok),
        read(3, 110, 120, LEDGER, None, Read::Value(2)),
    ]));
}

#[test]
fn a_plain_read_during_a_write_may_see_the_old_value_or_the_new() {
    for seen in [0, 5] {
        assert_passes(&history([
            write(1, 0, 100, LEDGER, 1, 5, Done::Ok),
            read(2, 10, 20, LEDGER, None, Read::Value(seen)),
        ]));
    }
}

#[test]
fn a_write_that_never_answered_may_have_taken_effect_or_not() {
    for seen in [0, 5] {
        assert_passes(&history([
            writing(1, 0, LEDGER, 1, 5),
            read(2, 1_000, 1_010, LEDGER, Some(2), Read::Value(seen)),
            write(2, 1_020, 1_030, LEDGER, 2, 6, Done::Ok),
        ]));
    }
}

#[test]
fn a_write_that_never_answered_may_land_long_after_it_was_made() {
    assert_passes(&history([
        writing(1, 0, LEDGER, 3, 5),
        read(2, 100, 110, LEDGER, None, Read::Value(0)),
        read(2, 200, 210, LEDGER, None, Read::Value(5)),
    ]));
}

#[test]
fn a_release_that_never_answered_may_have_ended_the_lease_or_not() {
    assert_passes(&history([
        granted(1, 0, 10, LOCK, 1),
        releasing(1, 20, LOCK, 1),
        // Not taken effect (yet): the retry ends the lease.
        release(1, 30, 40, LOCK, 1, Done::Ok),
    ]));
    assert_passes(&history([
        granted(1, 0, 10, LOCK, 1),
        releasing(1, 20, LOCK, 1),
        // Taken effect: the retry finds nothing to release.
        release(1, 30, 40, LOCK, 1, Done::Refused),
        granted(2, 50, 60, LOCK, 2),
        release(2, 70, 80, LOCK, 2, Done::Ok),
    ]));
}

#[test]
fn an_acquire_that_never_answered_constrains_nothing() {
    assert_passes(&history([
        acquiring(1, 0, LOCK),
        granted(2, 10, 20, LOCK, 1),
        release(2, 30, 40, LOCK, 1, Done::Ok),
        granted(3, 50, 60, LOCK, 2),
    ]));
}

#[test]
fn a_release_may_succeed_after_the_client_reported_its_loss() {
    // A loss found on the client's clock fires before the server's lease
    // ends: the release may still find the lease there.
    assert_passes(&history([
        granted(1, 0, 10, LOCK, 1),
        distlock_history::Op::lost(1, 20, LOCK, 1),
        release(1, 30, 40, LOCK, 1, Done::Ok),
    ]));
}

#[test]
fn a_refused_acquire_is_never_wrong() {
    assert_passes(&history([
        granted(1, 0, 10, LOCK, 1),
        release(1, 20, 30, LOCK, 1, Done::Ok),
        not_granted(2, 40, 50, LOCK),
    ]));
}

#[test]
fn one_holder_reads_and_writes_many_times_with_its_one_token() {
    assert_passes(&history([
        granted(1, 0, 10, LOCK, 3),
        read(1, 20, 30, LEDGER, Some(3), Read::Value(0)),
        write(1, 40, 50, LEDGER, 3, 1, Done::Ok),
        write(1, 60, 70, LEDGER, 3, 2, Done::Ok),
        read(1, 80, 90, LEDGER, Some(3), Read::Value(2)),
    ]));
}

#[test]
fn a_stale_operation_is_refused_once_a_higher_token_was_seen() {
    assert_passes(&history([
        read(2, 0, 10, LEDGER, Some(5), Read::Value(0)),
        write(1, 20, 30, LEDGER, 4, 9, Done::Refused),
        read(1, 40, 50, LEDGER, Some(4), Read::Refused),
        read(3, 60, 70, LEDGER, None, Read::Value(0)),
    ]));
}

#[test]
fn locks_and_resources_are_checked_each_on_its_own() {
    let report = assert_passes(&history([
        granted(1, 0, 10, "a", 5),
        granted(2, 5, 15, "b", 1),
        write(1, 20, 30, "ra", 5, 1, Done::Ok),
        write(2, 20, 30, "rb", 1, 1, Done::Ok),
        release(2, 40, 50, "b", 1, Done::Ok),
        release(1, 40, 50, "a", 5, Done::Ok),
        granted(2, 60, 70, "b", 2),
        write(2, 80, 90, "rb", 2, 2, Done::Ok),
        read(1, 100, 110, "ra", None, Read::Value(1)),
    ]));
    assert_eq!(report.checked, 4);
}

#[test]
fn operations_that_meet_at_one_instant_count_as_concurrent() {
    // The clock cannot order an answer and an invocation at one instant.
    assert_passes(&history([
        write(1, 0, 10, LEDGER, 2, 2, Done::Ok),
        write(2, 10, 20, LEDGER, 1, 1, Done::Ok),
    ]));
}

#[test]
fn extensions_of_the_current_lease_and_refusals_after_a_release_by_force_pass() {
    assert_passes(&history([
        granted(1, 0, 10, LOCK, 1),
        extend(1, 20, 30, LOCK, 1, Done::Ok),
        // Sent before the forced release answered: it may have come first.
        extend(1, 35, 60, LOCK, 1, Done::Ok),
        forced(9, 40, 50, LOCK, Done::Ok),
        extend(1, 70, 80, LOCK, 1, Done::Refused),
        granted(2, 90, 100, LOCK, 2),
        extend(2, 110, 120, LOCK, 2, Done::Ok),
        // A forced release that found nothing: the lease had expired.
        forced(9, 130, 140, LOCK, Done::Refused),
        extend(2, 150, 160, LOCK, 2, Done::Refused),
    ]));
}

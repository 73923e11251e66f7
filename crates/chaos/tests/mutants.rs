//! The campaign's checks fail on a broken lock: the short form on Redis
//! opened through each mutant (`distlock::testing::MutantBackend`, one
//! deliberate defect each) must fail, in the row and for the reason that
//! defect shows. A mutant that passes is a bug in the checks.

mod support;

use support::short_form;

/// The short form of `scenario` on `mutant`, which must fail: its report.
fn fails(mutant: &str, scenario: &str) -> String {
    let (status, written) = short_form(mutant, &[scenario]);
    assert!(
        !status.success() && written.contains("**FAILED**"),
        "{scenario} held on {mutant} ({status}): its checks cannot see the defect\n{written}"
    );
    written
}

/// The cells of `report`'s first row of lock kind `kind`.
fn row<'a>(report: &'a str, kind: &str) -> Vec<&'a str> {
    let line = report
        .lines()
        .find(|line| {
            line.split('|')
                .nth(2)
                .is_some_and(|cell| cell.trim() == kind)
        })
        .unwrap_or_else(|| panic!("no {kind} row in:\n{report}"));
    line.split('|').map(str::trim).collect()
}

/// The row's count in column `index` (1 is the backend).
fn count(cells: &[&str], index: usize) -> usize {
    cells[index]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

const OVERLAPS: usize = 5;
const WITNESS_LOST_UPDATES: usize = 6;
const TOKEN_REGRESSIONS: usize = 8;
const HISTORY_VIOLATIONS: usize = 14;
const INVARIANTS: usize = 16;

#[test]
fn a_lock_that_grants_every_caller_fails_on_overlapping_holders() {
    let report = fails("mutant-grants-everyone", "R1");
    let exclusive = row(&report, "exclusive");
    assert!(count(&exclusive, OVERLAPS) > 0, "{report}");
    // The unfenced witness sees what the fenced counter, which turns the
    // stale holders away, cannot: updates lost to holders acting at once.
    assert!(count(&exclusive, WITNESS_LOST_UPDATES) > 0, "{report}");
    assert_eq!(exclusive[INVARIANTS], "**FAILED**", "{report}");
}

#[test]
fn a_lock_that_repeats_tokens_fails_on_token_order() {
    let report = fails("mutant-repeats-tokens", "R1");
    let exclusive = row(&report, "exclusive");
    assert!(count(&exclusive, TOKEN_REGRESSIONS) > 0, "{report}");
    assert!(
        report.contains("no order of its operations fits"),
        "{report}"
    );
}

#[test]
fn a_lock_that_lets_a_reader_beside_a_writer_fails_on_overlapping_holders() {
    let report = fails("mutant-readers-beside-writers", "R1");
    let readers = row(&report, "reader-writer");
    assert!(count(&readers, OVERLAPS) > 0, "{report}");
    assert_eq!(readers[INVARIANTS], "**FAILED**", "{report}");
}

// A forced release: the history checker, which sees every extension,
// must find what the holder was not told.

#[test]
fn a_lock_without_the_owner_check_fails_when_released_by_force() {
    let report = fails("mutant-skips-owner-check", "R14");
    let forced = row(&report, "exclusive");
    // Whether its holder is told depends on who wins the lock back; its
    // history shows the defect either way.
    assert!(count(&forced, HISTORY_VIOLATIONS) > 0, "{report}");
    // Its extension takes the lock back, its release ends the next
    // holder's: whichever the search meets first has no place.
    assert!(
        report.contains("because the extension of token")
            || report.contains("because the release of token"),
        "{report}"
    );
}

#[test]
fn a_lock_that_hides_losses_fails_when_released_by_force() {
    let report = fails("mutant-hides-losses", "R14");
    let forced = row(&report, "exclusive");
    assert!(report.contains("the holder was told in 0 of"), "{report}");
    assert!(count(&forced, HISTORY_VIOLATIONS) > 0, "{report}");
    assert!(count(&forced, OVERLAPS) > 0, "{report}");
    assert!(
        report.contains("because the extension of token"),
        "{report}"
    );
}

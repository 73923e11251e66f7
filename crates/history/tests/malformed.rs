//! Histories that cannot be checked are refused with what is wrong and how
//! to fix it.

mod common;

use common::*;
use distlock_history::{Call, Done, History, Op, Read};

fn refusal(op: Op) -> String {
    let mut history = History::new();
    history
        .push(write(1, 0, 10, "r", 1, 1, Done::Ok))
        .expect("well formed");
    let error = history.push(op).expect_err("malformed");
    assert_eq!(error.index(), 1);
    assert_eq!(history.len(), 1, "a refused operation is not added");
    error.to_string()
}

#[test]
fn an_operation_that_completes_before_it_is_invoked_is_refused() {
    let text = refusal(write(1, 20, 10, "r", 1, 1, Done::Ok));
    assert!(
        text.contains("completes at 10 ns, before its invocation at 20 ns"),
        "{text}"
    );
    assert!(text.contains("same monotonic clock"), "{text}");
}

#[test]
fn an_outcome_without_a_completion_time_is_refused() {
    let text = refusal(Op::pending(
        1,
        0,
        Call::FencedWrite {
            resource: "r".into(),
            token: 1,
            value: 1,
            outcome: Done::Ok,
        },
    ));
    assert!(text.contains("make its outcome Unknown"), "{text}");
}

#[test]
fn a_loss_report_with_a_duration_is_refused() {
    let text = refusal(Op::new(
        1,
        0,
        10,
        Call::Lost {
            name: "l".into(),
            token: 1,
        },
    ));
    assert!(text.contains("Op::lost"), "{text}");
}

#[test]
fn a_plain_read_refused_is_refused() {
    let text = refusal(read(1, 0, 10, "r", None, Read::Refused));
    assert!(text.contains("give the read its fencing token"), "{text}");
}

//! Random legal histories must pass, and the same histories with one stale
//! write added must fail.
//!
//! Each history comes from a sequential run of a lease lock and its fenced
//! resources, simulated here: clients take, use, lose and release leases,
//! leases expire under their holders, and clients crash mid-call. Every
//! operation takes effect at one instant of that run; its invocation and
//! completion are then widened around that instant at random, so
//! operations overlap as in a real run. Seeds are fixed: a failure repeats.

mod common;

use common::*;
use distlock_history::{Done, History, Op, Read, Report, check};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const NAMES: [&str; 2] = ["a", "b"];

/// The resource that lock `name` fences.
fn resource(name: &str) -> String {
    format!("{name}-ledger")
}

#[derive(Default)]
struct Lock {
    last: u64,
    holder: Option<u64>,
}

#[derive(Default)]
struct Register {
    highest: u64,
    value: u64,
    /// The highest token of an accepted write that answered.
    highest_answered: u64,
}

struct Client {
    process: u64,
    /// The lock and token it holds, as far as it knows.
    lease: Option<(usize, u64)>,
}

/// A run: the history, and the state its simulation ended in.
struct Run {
    history: History,
    registers: [Register; 2],
    end: u64,
}

/// A legal history of `len` operations from `seed`, whose intervals are
/// widened by up to `widen` ns around instants `gap` ns apart on average.
fn legal(seed: u64, len: usize, gap: u64, widen: u64) -> Run {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut locks = [Lock::default(), Lock::default()];
    let mut registers = [Register::default(), Register::default()];
    let mut clients: Vec<Client> = (0..4)
        .map(|process| Client {
            process,
            lease: None,
        })
        .collect();
    let mut next_process = clients.len() as u64;
    let mut history = History::new();
    let mut now = widen + 1;
    while history.len() < len {
        now += rng.random_range(1..=2 * gap);
        let invoke = now - rng.random_range(0..=widen);
        let complete = now + rng.random_range(0..=widen);
        // One call in twenty never answers, and its client crashes.
        let crashes = rng.random_bool(0.05);
        let at = |op: Op| if crashes { unanswered(op) } else { op };
        let client = &mut clients[rng.random_range(0..4)];
        let process = client.process;
        let op = match client.lease {
            None => {
                let which = rng.random_range(0..NAMES.len());
                let lock = &mut locks[which];
                // A held lease may have expired under its holder.
                if lock.holder.is_none() || rng.random_bool(0.3) {
                    lock.last += rng.random_range(1..=3);
                    lock.holder = Some(lock.last);
                    client.lease = Some((which, lock.last));
                    at(granted(process, invoke, complete, NAMES[which], lock.last))
                } else {
                    at(not_granted(process, invoke, complete, NAMES[which]))
                }
            }
            Some((which, token)) => {
                let (lock, register) = (&mut locks[which], &mut registers[which]);
                let name = NAMES[which];
                let resource = resource(name);
                match rng.random_range(0..10) {
                    0..=3 => {
                        let value = rng.random_range(0..4);
                        let accepted = token >= register.highest;
                        if accepted {
                            (register.highest, register.value) = (token, value);
                            if !crashes {
                                register.highest_answered = register.highest_answered.max(token);
                            }
                        }
                        let outcome = if accepted { Done::Ok } else { Done::Refused };
                        at(write(
                            process, invoke, complete, &resource, token, value, outcome,
                        ))
                    }
                    4..=5 => {
                        let outcome = if token >= register.highest {
                            register.highest = token;
                            Read::Value(register.value)
                        } else {
                            Read::Refused
                        };
                        at(read(
                            process,
                            invoke,
                            complete,
                            &resource,
                            Some(token),
                            outcome,
                        ))
                    }
                    6 => at(read(
                        process,
                        invoke,
                        complete,
                        &resource,
                        None,
                        Read::Value(register.value),
                    )),
                    7 => {
                        client.lease = None;
                        Op::lost(process, now, name, token)
                    }
                    _ => {
                        let outcome = if lock.holder == Some(token) {
                            lock.holder = None;
                            Done::Ok
                        } else {
                            Done::Refused
                        };
                        client.lease = None;
                        at(release(process, invoke, complete, name, token, outcome))
                    }
                }
            }
        };
        if crashes && !matches!(op.call, distlock_history::Call::Lost { .. }) {
            *client = Client {
                process: next_process,
                lease: None,
            };
            next_process += 1;
        }
        history.push(op).expect("a well-formed operation");
    }
    Run {
        history,
        registers,
        end: now + widen + 1,
    }
}

/// `op` as it looks when its answer never arrives.
fn unanswered(op: Op) -> Op {
    use distlock_history::{Acquired, Call};
    let call = match op.call {
        Call::Acquire { name, .. } => Call::Acquire {
            name,
            outcome: Acquired::Unknown,
        },
        Call::Release { name, token, .. } => Call::Release {
            name,
            token,
            outcome: Done::Unknown,
        },
        Call::Extend { name, token, .. } => Call::Extend {
            name,
            token,
            outcome: Done::Unknown,
        },
        Call::ForceRelease { name, .. } => Call::ForceRelease {
            name,
            outcome: Done::Unknown,
        },
        Call::FencedWrite {
            resource,
            token,
            value,
            ..
        } => Call::FencedWrite {
            resource,
            token,
            value,
            outcome: Done::Unknown,
        },
        Call::FencedRead {
            resource, token, ..
        } => Call::FencedRead {
            resource,
            token,
            outcome: Read::Unknown,
        },
        point @ (Call::Lost { .. } | Call::Held { .. }) => point,
    };
    Op::pending(op.process, op.invoke_ns, call)
}

fn assert_passes(run: &Run, seed: u64) -> Report {
    let report = check(&run.history);
    assert!(report.passed(), "seed {seed}: {report}");
    report
}

#[test]
fn random_legal_histories_pass() {
    for seed in 0..300 {
        let run = legal(seed, 120, 50, 200);
        assert_passes(&run, seed);
    }
}

#[test]
fn random_legal_histories_with_heavy_overlap_pass() {
    for seed in 0..100 {
        let run = legal(seed, 80, 20, 400);
        assert_passes(&run, seed);
    }
}

#[test]
fn a_history_of_thousands_of_operations_is_decided() {
    let run = legal(7, 5_000, 50, 200);
    let report = assert_passes(&run, 7);
    assert_eq!(report.checked, 4);
    let constraining = run.history.ops().iter().filter(|op| constrains(op)).count();
    assert_eq!(report.operations, constraining, "{report}");
}

/// Whether the checker counts `op`: everything but refused or unanswered
/// acquires, refused or unanswered extensions, refused releases and
/// unanswered plain reads.
fn constrains(op: &Op) -> bool {
    use distlock_history::{Acquired, Call};
    match &op.call {
        Call::Acquire { outcome, .. } => matches!(outcome, Acquired::Granted { .. }),
        Call::Release { outcome, .. } => *outcome != Done::Refused,
        Call::Extend { outcome, .. } => *outcome == Done::Ok,
        Call::FencedRead {
            token: None,
            outcome,
            ..
        } => matches!(outcome, Read::Value(_)),
        Call::Lost { .. }
        | Call::ForceRelease { .. }
        | Call::FencedWrite { .. }
        | Call::FencedRead { .. }
        | Call::Held { .. } => true,
    }
}

#[test]
fn a_stale_write_accepted_at_the_end_of_a_legal_history_fails() {
    let mut flagged = 0;
    for seed in 0..100 {
        let mut run = legal(seed, 120, 50, 200);
        let register = &run.registers[0];
        if register.highest_answered == 0 {
            continue;
        }
        let stale = write(
            99,
            run.end,
            run.end + 10,
            &resource(NAMES[0]),
            register.highest_answered - 1,
            register.value,
            Done::Ok,
        );
        run.history.push(stale.clone()).unwrap();
        let report = check(&run.history);
        assert_eq!(report.violations.len(), 1, "seed {seed}: {report}");
        assert_eq!(report.violations[0].blocked, stale, "seed {seed}: {report}");
        flagged += 1;
    }
    assert!(flagged > 50, "only {flagged} seeds had an answered write");
}

#[test]
fn a_release_of_a_superseded_lease_at_the_end_of_a_legal_history_fails() {
    use distlock_history::{Acquired, Call};
    let mut flagged = 0;
    for seed in 0..100 {
        let mut run = legal(seed, 120, 50, 200);
        // Tokens granted on lock "a" with an answer, lowest first.
        let mut tokens: Vec<u64> = (run.history.ops().iter())
            .filter_map(|op| match &op.call {
                Call::Acquire {
                    name,
                    outcome: Acquired::Granted { token },
                } if name == NAMES[0] => Some(*token),
                _ => None,
            })
            .collect();
        tokens.sort_unstable();
        let [.., superseded, _] = tokens[..] else {
            continue;
        };
        let late = release(99, run.end, run.end + 10, NAMES[0], superseded, Done::Ok);
        run.history.push(late.clone()).unwrap();
        let report = check(&run.history);
        assert_eq!(report.violations.len(), 1, "seed {seed}: {report}");
        assert_eq!(report.violations[0].blocked, late, "seed {seed}: {report}");
        flagged += 1;
    }
    assert!(flagged > 50, "only {flagged} seeds granted twice");
}

//! Checking a history: one search per lock and per resource, and a
//! readable account of each violation.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::exclusion::{self, Overlap};
use crate::history::{Call, History, Op, Subject};
use crate::model::{State, Step};
use crate::search::{Failure, Found, Timed, search};

/// Moves one object's search may make before [`check`] gives up on it:
/// enough for histories of many thousands of operations with the
/// concurrency a test run has.
pub const DEFAULT_MAX_MOVES: u64 = 20_000_000;

/// What a check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Locks and resources checked.
    pub checked: usize,
    /// Operations checked (those that constrain anything), validities
    /// among them.
    pub operations: usize,
    /// One per lock or resource whose operations no order fits.
    pub violations: Vec<Violation>,
    /// Locks and resources whose search ran out of moves undecided.
    pub undecided: Vec<Subject>,
    /// One per validity that began while one it excludes was valid.
    pub overlaps: Vec<Overlap>,
    /// Validities checked for exclusion.
    pub validities: usize,
    /// The most validities of one lock seen at once.
    pub most_at_once: usize,
}

impl Report {
    /// Whether every lock and resource was checked and found linearizable,
    /// and no two validities that exclude each other overlapped.
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.undecided.is_empty() && self.overlaps.is_empty()
    }
}

/// A lock or resource whose operations no order fits, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The lock or resource.
    pub subject: Subject,
    /// Operations of the longest order that fits which bear on the one
    /// that cannot follow them: those that made the state it clashes
    /// with, and those that ran at the same time as it or them.
    pub context: Vec<Op>,
    /// The operation that returned before it could be placed.
    pub blocked: Op,
    /// Why it cannot follow them.
    pub reason: String,
}

/// The most operations of a violation's context its text shows: the
/// latest, nearest the one that has no place.
const SHOWN: usize = 12;

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: no order of its operations fits the model.",
            self.subject
        )?;
        if self.context.is_empty() {
            writeln!(f, "  It cannot start with:")?;
        } else {
            writeln!(f, "  After these, in the longest order that fits:")?;
            let shown = self.context.len().min(SHOWN);
            if shown < self.context.len() {
                writeln!(
                    f,
                    "    ({} earlier ones left out)",
                    self.context.len() - shown
                )?;
            }
            for op in &self.context[self.context.len() - shown..] {
                writeln!(f, "    {op}")?;
            }
            writeln!(f, "  this one has no place:")?;
        }
        writeln!(f, "    {}", self.blocked)?;
        write!(f, "  because {}.", self.reason)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operations on {} locks and resources: ",
            self.operations, self.checked
        )?;
        if self.passed() {
            return write!(f, "linearizable");
        }
        write!(f, "{} violations", self.violations.len())?;
        if !self.undecided.is_empty() {
            write!(f, ", {} undecided", self.undecided.len())?;
        }
        if !self.overlaps.is_empty() {
            write!(f, ", {} overlapping validities", self.overlaps.len())?;
        }
        for violation in &self.violations {
            write!(f, "\n{violation}")?;
        }
        for overlap in &self.overlaps {
            write!(f, "\n{overlap}")?;
        }
        for subject in &self.undecided {
            write!(f, "\n{subject}: the search ran out of moves")?;
        }
        Ok(())
    }
}

/// Checks `history`, each object's search making at most
/// [`DEFAULT_MAX_MOVES`] moves.
pub fn check(history: &History) -> Report {
    check_within(history, DEFAULT_MAX_MOVES)
}

/// Checks `history`, each object's search making at most `max_moves`
/// moves; an object whose search makes more is reported undecided.
pub fn check_within(history: &History, max_moves: u64) -> Report {
    let mut objects: BTreeMap<Subject, Vec<(&Op, Step)>> = BTreeMap::new();
    for op in history.ops() {
        if let Some(step) = Step::of(op) {
            objects.entry(op.subject()).or_default().push((op, step));
        }
    }
    let exclusion = exclusion::check(history);
    let held_only = history
        .ops()
        .iter()
        .filter(|op| matches!(op.call, Call::Held { .. }))
        .map(Op::subject)
        .filter(|subject| !objects.contains_key(subject))
        .collect::<BTreeSet<_>>();
    let mut report = Report {
        checked: objects.len() + held_only.len(),
        operations: exclusion.validities,
        overlaps: exclusion.overlaps,
        validities: exclusion.validities,
        most_at_once: exclusion.most_at_once,
        ..Report::default()
    };
    for (subject, ops) in objects {
        report.operations += ops.len();
        let timed: Vec<Timed> = ops
            .iter()
            .map(|(op, step)| Timed {
                invoke: op.invoke_ns,
                ret: op.complete_ns.unwrap_or(u64::MAX),
                step: *step,
            })
            .collect();
        let initial = match subject {
            Subject::Lock(_) => State::lock(),
            Subject::Resource(_) => State::register(),
        };
        match search(&timed, initial, max_moves) {
            Found::Linearizable => {}
            Found::GaveUp | Found::Deepest(..) => report.undecided.push(subject),
            Found::Violation(failure) => {
                report
                    .violations
                    .push(explain(subject, &ops, &timed, initial, &failure));
            }
        }
    }
    report
}

/// The violation `failure` shows, told with the operations that bear on
/// it.
fn explain(
    subject: Subject,
    ops: &[(&Op, Step)],
    timed: &[Timed],
    initial: State,
    failure: &Failure,
) -> Violation {
    // Who last changed each part of the state along the order.
    let mut makers: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut state = initial;
    for &(op, after) in &failure.order {
        for part in changed(state, after) {
            makers.insert(part, op);
        }
        state = after;
    }
    let blocked = failure.blocked;
    let reason = match state.step(timed[blocked].step) {
        Err(reason) => reason,
        Ok(_) => "every place it fits leaves a later operation with none".into(),
    };
    let mut focus: Vec<usize> = makers.into_values().collect();
    focus.push(blocked);
    // A lease's own grant, for a release or a loss that has no place.
    if let Step::Release(token) | Step::MaybeRelease(token) | Step::Lost(token) =
        timed[blocked].step
    {
        focus.extend(
            failure
                .order
                .iter()
                .map(|&(op, _)| op)
                .filter(|&op| timed[op].step == Step::Grant(token)),
        );
    }
    let overlaps = |a: &Timed, b: &Timed| a.invoke <= b.ret && b.invoke <= a.ret;
    let context = failure
        .order
        .iter()
        .map(|&(op, _)| op)
        .filter(|&op| {
            focus
                .iter()
                .any(|&other| other == op || overlaps(&timed[op], &timed[other]))
        })
        .map(|op| ops[op].0.clone())
        .collect();
    Violation {
        subject,
        context,
        blocked: ops[blocked].0.clone(),
        reason,
    }
}

/// The parts of a state that differ between `before` and `after`.
fn changed(before: State, after: State) -> Vec<&'static str> {
    let mut parts = Vec::new();
    match (before, after) {
        (
            State::Lock { last, holder },
            State::Lock {
                last: last_after,
                holder: holder_after,
            },
        ) => {
            if last != last_after {
                parts.push("last token");
            }
            if holder != holder_after {
                parts.push("holder");
            }
        }
        (
            State::Register { highest, value },
            State::Register {
                highest: highest_after,
                value: value_after,
            },
        ) => {
            if highest != highest_after {
                parts.push("highest token");
            }
            if value != value_after {
                parts.push("value");
            }
        }
        _ => {}
    }
    parts
}

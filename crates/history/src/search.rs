//! The search for a linearization of one object's operations: Wing and
//! Gong's, with Lowe's memoization.
//!
//! The operations' invocations and returns form one list, by time. The
//! search walks it from the front: at an invocation it tries to linearize
//! that operation now (the model must allow it), and if it can, takes it
//! out of the list and starts again from the front; at a return whose
//! operation is not linearized yet, the order so far cannot be completed,
//! and it undoes the last choice. Lowe's cache remembers every (set of
//! linearized operations, state) reached, so that no configuration is
//! explored twice.

use std::collections::HashSet;

use crate::model::{State, Step};

/// One operation, as the search sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timed {
    pub(crate) invoke: u64,
    /// When it returned; `u64::MAX` when it never did.
    pub(crate) ret: u64,
    pub(crate) step: Step,
}

/// What the search found.
#[derive(Debug, Clone)]
pub(crate) enum Found {
    Linearizable,
    Violation(Failure),
    /// It made `budget` moves without an answer.
    GaveUp,
    /// No order fits; it got deepest with this many operations placed,
    /// when this one returned unplaced.
    Deepest(usize, usize),
}

/// The deepest the search got before it ran out of choices.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// The longest order found that fits, with the state after each step.
    pub(crate) order: Vec<(usize, State)>,
    /// The operation that returned before it could be placed after them.
    pub(crate) blocked: usize,
}

/// Head of the list: a sentinel before the first entry.
const HEAD: usize = 0;
const NONE: usize = usize::MAX;

/// Looks for a linearization of `ops` from `initial`, making at most
/// `budget` moves.
pub(crate) fn search(ops: &[Timed], initial: State, budget: u64) -> Found {
    match Search::new(ops).run(initial, budget, None) {
        // The first run notes only where it got deepest (copying the order
        // at every new depth would cost time quadratic in the length); the
        // search is deterministic, so a second run stops there.
        Found::Deepest(depth, blocked) => {
            match Search::new(ops).run(initial, budget, Some((depth, blocked))) {
                Found::Violation(failure) => Found::Violation(failure),
                _ => Found::GaveUp,
            }
        }
        found => found,
    }
}

/// An invocation or a return, by its node: node `1 + 2i` is operation
/// `i`'s invocation, node `2 + 2i` its return.
fn call_node(op: usize) -> usize {
    1 + 2 * op
}

fn return_node(op: usize) -> usize {
    2 + 2 * op
}

fn op_of(node: usize) -> usize {
    (node - 1) / 2
}

fn is_call(node: usize) -> bool {
    node % 2 == 1
}

struct Search<'a> {
    ops: &'a [Timed],
    next: Vec<usize>,
    prev: Vec<usize>,
    linearized: Vec<u64>,
    seen: HashSet<(Vec<u64>, State)>,
}

/// A choice made: `op` was linearized from state `before` by its step's
/// successor number `choice`.
struct Frame {
    op: usize,
    before: State,
    choice: usize,
}

impl<'a> Search<'a> {
    fn new(ops: &'a [Timed]) -> Search<'a> {
        let mut nodes: Vec<usize> = (1..=2 * ops.len()).collect();
        // By time; at the same instant an invocation comes first, so the
        // two operations count as concurrent: one clock cannot order them.
        nodes.sort_by_key(|&node| {
            let op = &ops[op_of(node)];
            if is_call(node) {
                (op.invoke, 0)
            } else {
                (op.ret, 1)
            }
        });
        let mut next = vec![NONE; 2 * ops.len() + 1];
        let mut prev = vec![NONE; 2 * ops.len() + 1];
        let mut last = HEAD;
        for node in nodes {
            next[last] = node;
            prev[node] = last;
            last = node;
        }
        Search {
            ops,
            next,
            prev,
            linearized: vec![0; ops.len().div_ceil(64)],
            seen: HashSet::new(),
        }
    }

    /// Searches; with `capture`, stops at the first dead end with that
    /// many operations placed and that one returned unplaced, and tells
    /// the order that led there.
    fn run(mut self, initial: State, budget: u64, capture: Option<(usize, usize)>) -> Found {
        let mut state = initial;
        let mut stack: Vec<Frame> = Vec::new();
        let mut deepest: Option<(usize, usize)> = None;
        let mut node = self.next[HEAD];
        let mut moves = 0;
        while self.next[HEAD] != NONE {
            moves += 1;
            if moves > budget {
                return Found::GaveUp;
            }
            let op = op_of(node);
            if is_call(node) {
                match self.place(op, state, 0) {
                    Some((choice, after)) => {
                        stack.push(Frame {
                            op,
                            before: state,
                            choice,
                        });
                        state = after;
                        node = self.next[HEAD];
                    }
                    None => node = self.next[node],
                }
                continue;
            }
            // `op` returned, unplaced: the order so far cannot go on.
            if capture == Some((stack.len(), op)) {
                return Found::Violation(self.failure(&stack, state, op));
            }
            if deepest.is_none_or(|(depth, _)| stack.len() > depth) {
                deepest = Some((stack.len(), op));
            }
            let Some(frame) = stack.pop() else {
                return match deepest {
                    Some((depth, blocked)) => Found::Deepest(depth, blocked),
                    None => Found::GaveUp,
                };
            };
            self.unplace(frame.op);
            state = frame.before;
            match self.place(frame.op, state, frame.choice + 1) {
                Some((choice, after)) => {
                    stack.push(Frame {
                        op: frame.op,
                        before: state,
                        choice,
                    });
                    state = after;
                    node = self.next[HEAD];
                }
                None => node = self.next[call_node(frame.op)],
            }
        }
        Found::Linearizable
    }

    /// Linearizes `op` from `state` by the first of its successors from
    /// number `from` on that leads somewhere not seen yet, and takes it
    /// out of the list.
    fn place(&mut self, op: usize, state: State, from: usize) -> Option<(usize, State)> {
        let successors = state.step(self.ops[op].step).ok()?;
        self.flip(op);
        for (choice, after) in successors.into_iter().enumerate().skip(from) {
            let Some(after) = after else { continue };
            if self.seen.insert((self.linearized.clone(), after)) {
                self.lift(op);
                return Some((choice, after));
            }
        }
        self.flip(op);
        None
    }

    fn unplace(&mut self, op: usize) {
        self.flip(op);
        self.unlift(op);
    }

    fn flip(&mut self, op: usize) {
        self.linearized[op / 64] ^= 1 << (op % 64);
    }

    fn lift(&mut self, op: usize) {
        for node in [call_node(op), return_node(op)] {
            let (prev, next) = (self.prev[node], self.next[node]);
            self.next[prev] = next;
            if next != NONE {
                self.prev[next] = prev;
            }
        }
    }

    /// Undoes [`Search::lift`]; lifts are undone last first, so the
    /// neighbours a node remembers are its neighbours again.
    fn unlift(&mut self, op: usize) {
        for node in [return_node(op), call_node(op)] {
            let (prev, next) = (self.prev[node], self.next[node]);
            self.next[prev] = node;
            if next != NONE {
                self.prev[next] = node;
            }
        }
    }

    fn failure(&self, stack: &[Frame], state: State, blocked: usize) -> Failure {
        let mut order: Vec<(usize, State)> = stack
            .windows(2)
            .map(|pair| (pair[0].op, pair[1].before))
            .collect();
        if let Some(last) = stack.last() {
            order.push((last.op, state));
        }
        Failure { order, blocked }
    }
}

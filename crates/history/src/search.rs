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
//! explored twice. And a configuration is dropped at once when an operation
//! still to place can never be: one whose token is below the state's floor
//! (see [`State::floor`]). Without that, many overlapping operations that
//! do not fit would be tried in every subset before the search gave up.

use std::collections::{BTreeSet, HashSet};

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
    match Search::new(ops, initial, None).run(budget) {
        // The first run notes only where it got deepest (copying the order
        // at every new depth would cost time quadratic in the length); the
        // search is deterministic, so a second run stops at the first dead
        // end that deep.
        Found::Deepest(depth, blocked) => {
            match Search::new(ops, initial, Some((depth, blocked))).run(budget) {
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
    /// The operations still to place that need a token, by token.
    needed: BTreeSet<(u64, usize)>,
    state: State,
    stack: Vec<Frame>,
    /// The deepest dead end so far: how many operations were placed, and
    /// which one could not follow them.
    deepest: Option<(usize, usize)>,
    /// The dead end to stop at and tell (see [`search`]).
    capture: Option<(usize, usize)>,
}

/// A choice made: `op` was linearized from state `before` by its step's
/// successor number `choice`.
struct Frame {
    op: usize,
    before: State,
    choice: usize,
}

/// What trying to place an operation came to.
enum Placed {
    /// Placed, by its step's successor number `choice`.
    Yes,
    /// Not placed; if a successor would have stranded an operation, that
    /// successor and the operation.
    No(Option<(State, usize)>),
}

impl<'a> Search<'a> {
    fn new(ops: &'a [Timed], initial: State, capture: Option<(usize, usize)>) -> Search<'a> {
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
        let needed = (ops.iter().enumerate())
            .filter_map(|(index, op)| Some((op.step.needed_token()?, index)))
            .collect();
        Search {
            ops,
            next,
            prev,
            linearized: vec![0; ops.len().div_ceil(64)],
            seen: HashSet::new(),
            needed,
            state: initial,
            stack: Vec::new(),
            deepest: None,
            capture,
        }
    }

    fn run(mut self, budget: u64) -> Found {
        let mut node = self.next[HEAD];
        let mut moves = 0;
        while self.next[HEAD] != NONE {
            moves += 1;
            if moves > budget {
                return Found::GaveUp;
            }
            let op = op_of(node);
            if is_call(node) {
                match self.place(op, 0) {
                    Placed::Yes => node = self.next[HEAD],
                    Placed::No(stranding) => {
                        if let Some(found) = self.dead_end(op, stranding) {
                            return found;
                        }
                        node = self.next[node];
                    }
                }
                continue;
            }
            // `op` returned, unplaced: the order so far cannot go on.
            if let Some(found) = self.dead_end(op, None) {
                return found;
            }
            let Some(frame) = self.stack.pop() else {
                return match self.deepest {
                    Some((depth, blocked)) => Found::Deepest(depth, blocked),
                    None => Found::GaveUp,
                };
            };
            self.unplace(frame.op);
            self.state = frame.before;
            match self.place(frame.op, frame.choice + 1) {
                Placed::Yes => node = self.next[HEAD],
                Placed::No(stranding) => {
                    if let Some(found) = self.dead_end(frame.op, stranding) {
                        return found;
                    }
                    node = self.next[call_node(frame.op)];
                }
            }
        }
        Found::Linearizable
    }

    /// Notes a dead end: `op` returned unplaced (`stranding` is `None`), or
    /// placing `op` would have stranded another. Returns the violation to
    /// tell when it is the one to capture.
    fn dead_end(&mut self, op: usize, stranding: Option<(State, usize)>) -> Option<Found> {
        let (depth, blocked) = match stranding {
            None => (self.stack.len(), op),
            Some((_, stranded)) => (self.stack.len() + 1, stranded),
        };
        if self.capture == Some((depth, blocked)) {
            let mut order: Vec<(usize, State)> = (self.stack.windows(2))
                .map(|pair| (pair[0].op, pair[1].before))
                .collect();
            if let Some(last) = self.stack.last() {
                order.push((last.op, self.state));
            }
            if let Some((after, _)) = stranding {
                order.push((op, after));
            }
            return Some(Found::Violation(Failure { order, blocked }));
        }
        if self.deepest.is_none_or(|(deepest, _)| depth > deepest) {
            self.deepest = Some((depth, blocked));
        }
        None
    }

    /// Linearizes `op` by the first of its step's successors from number
    /// `from` on that leads somewhere new and strands no operation, and
    /// takes it out of the list.
    fn place(&mut self, op: usize, from: usize) -> Placed {
        let Ok(successors) = self.state.step(self.ops[op].step) else {
            return Placed::No(None);
        };
        self.flip(op);
        self.need(op, false);
        let mut stranding = None;
        for (choice, after) in successors.into_iter().enumerate().skip(from) {
            let Some(after) = after else { continue };
            if let Some(stranded) = self.stranded(after) {
                stranding.get_or_insert((after, stranded));
                continue;
            }
            if self.seen.insert((self.linearized.clone(), after)) {
                self.lift(op);
                self.stack.push(Frame {
                    op,
                    before: self.state,
                    choice,
                });
                self.state = after;
                return Placed::Yes;
            }
        }
        self.need(op, true);
        self.flip(op);
        Placed::No(stranding)
    }

    fn unplace(&mut self, op: usize) {
        self.need(op, true);
        self.flip(op);
        self.unlift(op);
    }

    /// An operation still to place that needs a token below `state`'s
    /// floor, so that no order from `state` on can place it.
    fn stranded(&self, state: State) -> Option<usize> {
        let &(lowest, op) = self.needed.first()?;
        (lowest < state.floor()).then_some(op)
    }

    /// Counts `op` among the operations still to place, or not.
    fn need(&mut self, op: usize, still: bool) {
        let Some(token) = self.ops[op].step.needed_token() else {
            return;
        };
        if still {
            self.needed.insert((token, op));
        } else {
            self.needed.remove(&(token, op));
        }
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
}

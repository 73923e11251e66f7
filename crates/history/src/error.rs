//! The error for a malformed history.

use std::fmt;

/// An operation that cannot be part of a history, with what is wrong with
/// it and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryError {
    index: usize,
    op: String,
    problem: String,
}

impl HistoryError {
    /// `op` is the operation as shown in the message.
    pub(crate) fn new(index: usize, op: &impl fmt::Display, problem: String) -> HistoryError {
        HistoryError {
            index,
            op: op.to_string(),
            problem,
        }
    }

    /// The operation's position among those added (0 for the first).
    pub fn index(&self) -> usize {
        self.index
    }
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "operation {} ({}) cannot be checked: {}",
            self.index, self.op, self.problem
        )
    }
}

impl std::error::Error for HistoryError {}

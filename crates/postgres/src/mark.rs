//! A waiting writer's mark: while one lives, new readers wait, so that a
//! steady stream of readers cannot starve a writer.
//!
//! A mark lasts one lease from the writer's latest attempt, by the
//! server's clock, so a writer that vanished holds readers back for one
//! lease at most. Each attempt of the same wait refreshes it; the writer's
//! grant, or the end of its wait, removes it.

use distlock_core::LeaseId;

/// The identity of one wait's mark, kept in its
/// [`WaitState`](distlock_core::WaitState) across attempts (each attempt
/// has a grant identity of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriterMark(String);

impl WriterMark {
    /// A fresh identity.
    pub(crate) fn new() -> Self {
        Self(LeaseId::random().to_string())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

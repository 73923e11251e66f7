//! What a wait keeps in its [`WaitState`](distlock_core::backend::WaitState)
//! across attempts: a waiting writer's mark, or, in fair mode, its place
//! in line.
//!
//! While a writer's mark lives, new readers wait, so that a steady stream
//! of readers cannot starve a writer. A mark lasts one lease from the writer's latest attempt, by the
//! server's clock, so a writer that vanished holds readers back for one
//! lease at most. Each attempt of the same wait refreshes it; the writer's
//! grant, or the end of its wait, removes it. The mark also records who
//! waits and since when, which `list` shows (see `statements`' `held`).

use distlock_core::backend::LeaseId;

use crate::wake::CallsSeen;

/// The identity of one wait's mark, kept in its
/// [`WaitState`](distlock_core::backend::WaitState) across attempts (each attempt
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

/// What a fair wait keeps in its [`WaitState`](distlock_core::backend::WaitState)
/// across attempts (which holds one value): its place, and when it is due
/// to ask the store next.
#[derive(Debug, Clone)]
pub(crate) struct InLine {
    pub(crate) place: PlaceId,
    pub(crate) due: Option<Due>,
}

/// The identity of one wait's place (each attempt has a grant identity
/// of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlaceId(String);

impl PlaceId {
    /// A fresh identity.
    pub(crate) fn new() -> Self {
        Self(LeaseId::random().to_string())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// When a waiting attempt that kept its place asks the store next, unless
/// a release calls it sooner (see [`Calls`](crate::wake::Calls)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Due {
    pub(crate) at: tokio::time::Instant,
    pub(crate) asked: CallsSeen,
}

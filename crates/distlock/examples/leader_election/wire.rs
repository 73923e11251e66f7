//! What the instances and the parent exchange: the answer of
//! `GET /leader`, and the record the scheduled job writes.

use serde::{Deserialize, Serialize};

/// `GET /leader`: who leads, as the instance that answers reads it from
/// the backend.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct LeaderAnswer {
    /// The instance that answered.
    pub(crate) instance: u64,
    /// The leader, or `None` while nobody leads.
    pub(crate) leader: Option<Led>,
}

/// A leader as the election lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Led {
    /// The value it campaigned with: its base URL.
    pub(crate) value: String,
    /// Its term: the fencing token of its grant.
    pub(crate) term: u64,
    /// Milliseconds until its lease ends unless extended; `None` where the
    /// lock lasts as long as the leader's process (file locks).
    pub(crate) expires_in_ms: Option<u128>,
}

/// What the job's file holds: the leader's last tick.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Tick {
    /// The term the tick was written in.
    pub(crate) term: u64,
    /// The instance that wrote it.
    pub(crate) instance: u64,
    /// How many ticks the job has run in this term, this one included.
    pub(crate) tick: u64,
}

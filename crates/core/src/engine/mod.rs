//! The machinery behind the client, written once for every backend and
//! private to core: one attempt and its cleanup, the time bound on a call
//! to the store, backoff between tries, the in-process slots that queue
//! local waiters and hand a lock from one to the next, hold bounds, the
//! held lease shared by a guard and its keeper, and the keeper that
//! extends leases.

pub(crate) mod attempt;
pub(crate) mod backoff;
pub(crate) mod bounded;
pub(crate) mod detach;
pub(crate) mod handover;
pub(crate) mod held;
pub(crate) mod hold;
pub(crate) mod keeper;
pub(crate) mod min_hold;
pub(crate) mod slots;
pub(crate) mod waiting;

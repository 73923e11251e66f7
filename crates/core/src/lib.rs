//! The core of [distlock](https://docs.rs/distlock): the lock client, the
//! guard, lease keeping, and the [`Backend`] trait every backend implements.
//!
//! Most users depend on the `distlock` crate, which re-exports this one and
//! opens backends from URLs. Backend authors depend on this crate alone.
//!
//! # How the pieces fit
//! - A [`Backend`] can try once to take a lock, extend a lease, release it,
//!   and list locks; some can also hand a lock from one grant to the next
//!   in one step. It never waits.
//! - A [`LockClient`] does everything else, once for every backend: waiting
//!   with a deadline and jittered backoff, cancellation, in-process
//!   coalescing with hand-over to the next local waiter, background
//!   extension and loss detection.
//! - A [`LockGuard`] proves the lock is held, carries the fencing token, and
//!   says when the lease is lost.
//! - [`MemoryBackend`] keeps locks in memory, for tests and examples.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod attempt;
pub mod backend;
mod backoff;
mod bounded;
mod builder;
mod claim;
mod client;
mod detach;
mod election;
mod error;
mod guard;
mod handover;
mod hold;
mod keeper;
mod lease;
mod memory;
pub mod metrics;
mod min_hold;
mod name;
mod options;
pub mod platform;
mod set;
mod slots;
mod state;
mod sync;
mod terms;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod testing;
pub mod urls;
mod wake;

pub use acquire::AcquireOptions;
/// The attribute backends put on their [`Backend`] impl.
pub use async_trait::async_trait;
pub use backend::{
    AcquireRequest, Attempt, Backend, Capabilities, DelayedRelease, Extended, Feature,
    FeatureState, HandOver, HandOvers, Holder, Lease, LeaseId, LockInfo, Renewal, ServerInfo,
    Session, SessionId, Wakeups,
};
pub use builder::LockClientBuilder;
pub use claim::{Claim, LockKind, MAX_PERMITS, Permits};
pub use client::{LockClient, LockContext};
pub use election::{Election, Leader, Leadership, Observer};
pub use error::{Error, Result};
pub use guard::LockGuard;
pub use lease::{LossReason, LossReporter, LostSignal};
pub use memory::MemoryBackend;
pub use name::{IntoLockName, LockName, MAX_NAME_LEN};
pub use options::{LockOptions, LockOptionsBuilder};
pub use set::{IntoLockClaim, LockSet};
pub use state::{GrantState, Payload, WaitState};
pub use terms::{TERMS_KEPT, Term, TermLog, withdraw_term};
pub use wake::{ReleaseHub, ReleaseWatch};

/// The fencing token floor for backends that may lose their counters (a
/// deleted document, a restarted cache): microseconds since the Unix epoch
/// on the given clock. Tokens are then `max(previous + 1, floor)`, so they
/// keep increasing across such losses as long as clocks move forward; in
/// microseconds, a counter runs ahead of the clock only if one name is
/// granted more than a million times a second.
pub fn token_floor(now: std::time::SystemTime) -> u64 {
    now.duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

//! The core of [distlock](https://docs.rs/distlock): the lock client, the
//! guard, lease keeping, and the
//! [`Backend` trait](backend::Backend) every backend implements.
//!
//! Most users depend on the `distlock` crate, which re-exports this one and
//! opens backends from URLs. Backend authors depend on this crate alone,
//! and find all they need in [`backend`].
//!
//! # How the pieces fit
//! - A [backend](backend::Backend) can try once to take a lock, extend a lease, release it,
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

// The user's face is at the top; `backend` is the contract for backend
// authors; `engine` is the machinery behind the client.
mod acquire;
pub mod backend;
mod builder;
mod claim;
mod client;
mod danger;
mod election;
mod engine;
mod error;
mod guard;
mod info;
mod lost;
mod memory;
pub mod metrics;
mod name;
mod options;
mod resume;
mod risk;
mod set;
mod sync;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod testing;

pub use acquire::{AcquireOptions, TryOptions};
pub use backend::Payload;
pub use builder::LockClientBuilder;
pub use claim::{Claim, LockKind, MAX_PERMITS, Permits};
pub use client::{LockClient, LockContext};
pub use election::{Election, Leader, LeaderHealth, Leadership, Observer, StaleLeadership};
pub use error::{Error, Result};
pub use guard::LockGuard;
pub use info::{Holder, LockInfo, Waiter, Waiters};
pub use lost::{LossReason, LostSignal};
pub use memory::MemoryBackend;
pub use name::{IntoLockName, LockName, MAX_NAME_LEN};
pub use options::{LockOptions, LockOptionsBuilder};
pub use resume::ResumeHandle;
pub use risk::{RiskReason, RiskSignal};
pub use set::{IntoLockClaim, LockSet};

//! distlock's embedded default backend: one OS file lock per name, in a
//! directory shared by the processes of one machine.
//!
//! How it works (the lock file, the slot files, the decision lock, the
//! signal file) and how to run it (the directory, several users) is in
//! `docs/file.md` in the repository; this page says what a caller can rely
//! on.
//!
//! # What a caller can rely on
//! - Any name is safe, and distinct names never share a lock.
//! - Locks are *process-bound*: the kernel drops a holder's `flock(2)`
//!   when its process dies, even by SIGKILL, so a crashed holder frees its
//!   locks at once. There is no lease to expire: a stopped holder keeps
//!   its locks.
//! - Fencing tokens persist across releases and restarts. A new token is
//!   `max(previous + 1, microseconds since the epoch)`, so tokens keep
//!   increasing even if the directory is wiped, as long as the clock does.
//! - Readers and semaphore permits are granted beside the whole lock: a
//!   reader or a permit keeps writers out and is kept out by a writer, and
//!   a waiting writer keeps later readers out. A holder or a waiting writer
//!   that dies lets go at once.
//! - After a forced release, each holder reports the lock lost at its next
//!   extension check.
//! - A release before the grant's
//!   [`min_hold`](distlock_core::AcquireOptions::min_hold) has passed
//!   leaves the lock held until then, for writers, readers and permits
//!   alike, so the lock outlives its holder's process by at most
//!   `min_hold`. It is judged by this machine's wall clock: a clock
//!   stepped back keeps it longer, one stepped forward frees it sooner.
//!   A forced release ends it.
//! - A campaign's grant ([`Election`](distlock_core::Election)) records
//!   its term before the grant is answered, keeping the last
//!   [`TERMS_KEPT`](distlock_core::backend::TERMS_KEPT), which observers read. A
//!   process killed between its grant and that write leaves a grant that
//!   never led (its campaign never returned) and no term.
//! - On Linux, waiters in every process retry the moment a lock is
//!   released, instead of polling.
//!
//! # Platforms
//! The locks are `flock(2)`, which every Unix has; only the wake-ups are
//! Linux's. On macOS and the BSDs waiters poll instead, with the client's
//! backoff (between 5 ms and 500 ms by default): a release reaches a waiter
//! at its next retry rather than at once, and
//! [`Abilities::wakeups`](distlock_core::backend::Abilities::wakeups) is `None`. Setting the environment
//! variable `DISTLOCK_PORTABLE=1` makes a process on Linux poll the same
//! way, which is how the tests run that path. `docs/platforms.md` says what
//! is tested where.
//!
//! # Limits
//! Only processes that share the directory on one machine's local file
//! system are coordinated. `flock` over NFS is not reliable: use a network
//! backend across machines. Token writes are not fsynced; after a power loss
//! the clock-based floor keeps tokens increasing.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod backend;
mod config;
mod decision;
pub mod fencing;
mod files;
mod grant;
mod names;
mod privacy;
mod record;
mod shared;
mod terms;
mod wake;

pub use crate::backend::FileBackend;
pub use crate::config::FileConfig;

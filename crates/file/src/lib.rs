//! distlock's embedded default backend: one OS file lock per name, in a
//! directory shared by the processes of one machine.
//!
//! # How it works
//! - Each name maps to one file, `<readable prefix>-<SHA-256 of the name>.lock`,
//!   so any name is safe and distinct names never share a file.
//! - Taking the lock is a non-blocking exclusive `flock(2)` on that file.
//!   The kernel drops the lock when the holder's process dies, so a crashed
//!   holder frees its locks at once: locks here are *process-bound*, with
//!   no lease to expire.
//! - The file records the name, the last fencing token and the holder, so
//!   tokens persist across releases and restarts. A new token is
//!   `max(previous + 1, microseconds since the epoch)`, so tokens keep
//!   increasing even if the directory is wiped, as long as the clock does.
//! - Readers and semaphore permits hold the lock file with a *shared*
//!   `flock`, which keeps writers out and is kept out by a writer, and each
//!   also holds a slot file of its own exclusively (`….r<i>.lock` for
//!   readers, `….p<i>.lock` for the `limit` permits of a semaphore), which
//!   counts it and records its holder and token. Whether a reader or a
//!   permit may go in, and its token, are decided one process at a time
//!   under the name's decision lock, `.<SHA-256>.gate`, a file locked exclusively
//!   for a moment. A writer that waits holds a shared lock on
//!   `.<SHA-256>.writers`, and readers that come after it wait while
//!   anyone does. All of these are the kernel's locks, so a holder or a
//!   waiting writer that dies lets go at once.
//! - A forced release atomically replaces the lock file and every slot file
//!   (keeping the token). Each holder's check at its next extension sees
//!   that its files are no longer the ones at their paths, and reports the
//!   lock lost.
//!
//! - A release before the grant's
//!   [`min_hold`](distlock_core::AcquireOptions::min_hold) has passed
//!   writes a marker into the lock file, under its lock: the time the hold
//!   ends, on this machine's wall clock. Until then a writer, a reader or a
//!   permit that locks the file finds the marker and answers that the lock
//!   is held (with the time left), `list` shows it, and a forced release
//!   removes it. So the lock outlives its holder's process by at most
//!   `min_hold`, and a clock stepped back keeps it longer, one stepped
//!   forward frees it sooner.
//!
//! - A campaign's grant ([`Election`](distlock_core::Election)) also
//!   records its term in `.<SHA-256>.terms`, under the lock file's
//!   exclusive lock and before the grant is answered, keeping the last
//!   [`TERMS_KEPT`](distlock_core::TERMS_KEPT): the record observers read
//!   every term from. It is replaced whole, so readers need no lock. A
//!   process killed between its grant and that write leaves a grant that
//!   never led (its campaign never returned) and no term.
//!
//! - A release touches a signal file, `.<SHA-256>.released`, and on Linux
//!   waiters in every process watch the directory with inotify, so they
//!   retry the moment a lock is released instead of polling.
//!
//! # Platforms
//! The locks are `flock(2)`, which every Unix has; only the wake-ups are
//! Linux's. On macOS and the BSDs waiters poll instead, with the client's
//! backoff (between 5 ms and 500 ms by default): a release reaches a waiter
//! at its next retry rather than at once, and
//! [`Backend::wakeups`](distlock_core::Backend::wakeups) is `None`. Setting the environment
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
mod decision;
pub mod fencing;
mod files;
mod held;
mod names;
mod privacy;
mod record;
mod shared;
mod terms;
mod wake;

pub use crate::backend::FileBackend;

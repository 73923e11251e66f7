//! Model checks of core's slots, hand-over, cancellation and loss signal,
//! under [Shuttle](https://docs.rs/shuttle). Built only with
//! `RUSTFLAGS="--cfg distlock_shuttle"` (see `scripts/test` and
//! `scripts/model-check`); a normal build compiles this to nothing.
//!
//! Each test runs a scenario of a few tasks of one client against the
//! memory backend (or the test backend over it), driven through the public
//! API, so the code paths are core's own: `LockClient::wait_for` and
//! `try_once`, the slot queue, `LockGuard::release` and its drop, the
//! hand-over, `Detach`, and `LostSignal`. Shuttle's scheduler picks the
//! interleaving at every lock, atomic access, task switch and
//! `sync::switch_point` in core, and the bound is stated in [`bound`].

#![cfg(distlock_shuttle)]

mod bound;
mod cancel;
mod exclusive;
mod harness;
mod loss;

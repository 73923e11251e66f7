//! Tests of the MongoDB backend against a real server.
//!
//! They read the shared server's URL from `DISTLOCK_TEST_MONGODB_URL` and
//! fail when it is missing: run them through `scripts/test`, which starts
//! the server. Tests that restart a server or set fail points start one of
//! their own (`SECANTUSD_BIN`, else `secantusd-rs` on `PATH`).

mod common;

mod bulk;
mod credentials;
mod document;
mod entity;
mod failpoints;
mod fair;
mod fencing;
mod kinds;
mod passed;
mod race;
mod restart;
mod resume;
mod terms;
mod tokens;
mod wakeups;

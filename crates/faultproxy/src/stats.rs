//! Counters the proxy keeps, and the snapshot the harness reads.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Direction;

/// A snapshot of a proxy's counters, taken by
/// [`FaultProxy::stats`](crate::FaultProxy::stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Connections the listener accepted, including refused ones.
    pub accepted: u64,
    /// Connections closed at once because of [`Fault::Refuse`](crate::Fault::Refuse).
    pub refused: u64,
    /// Connections open right now.
    pub active: u64,
    /// Connections the proxy reset: by `reset_all`, by
    /// [`Fault::ResetAfterRequest`](crate::Fault::ResetAfterRequest), or
    /// after an I/O error on either side.
    pub resets: u64,
    /// Bytes delivered from clients to the server.
    pub bytes_to_server: u64,
    /// Bytes delivered from the server to clients.
    pub bytes_to_client: u64,
    /// Bytes from clients that a fault swallowed.
    pub swallowed_to_server: u64,
    /// Bytes from the server that a fault swallowed.
    pub swallowed_to_client: u64,
}

/// The live counters, updated by the connection tasks.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    active: AtomicU64,
    resets: AtomicU64,
    bytes_to_server: AtomicU64,
    bytes_to_client: AtomicU64,
    swallowed_to_server: AtomicU64,
    swallowed_to_client: AtomicU64,
}

// Counters are statistics, not synchronisation: relaxed ordering suffices.
fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn accepted(&self) {
        bump(&self.accepted, 1);
    }

    pub(crate) fn refused(&self) {
        bump(&self.refused, 1);
    }

    pub(crate) fn reset(&self) {
        bump(&self.resets, 1);
    }

    pub(crate) fn delivered(&self, dir: Direction, bytes: usize) {
        let counter = match dir {
            Direction::ToServer => &self.bytes_to_server,
            Direction::ToClient => &self.bytes_to_client,
        };
        bump(counter, bytes as u64);
    }

    pub(crate) fn swallowed(&self, dir: Direction, bytes: usize) {
        let counter = match dir {
            Direction::ToServer => &self.swallowed_to_server,
            Direction::ToClient => &self.swallowed_to_client,
        };
        bump(counter, bytes as u64);
    }

    /// Counts a connection as open until the returned guard is dropped,
    /// which also happens when its task is aborted.
    pub(crate) fn open(&self) -> ActiveGuard<'_> {
        bump(&self.active, 1);
        ActiveGuard(&self.active)
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Stats {
            accepted: get(&self.accepted),
            refused: get(&self.refused),
            active: get(&self.active),
            resets: get(&self.resets),
            bytes_to_server: get(&self.bytes_to_server),
            bytes_to_client: get(&self.bytes_to_client),
            swallowed_to_server: get(&self.swallowed_to_server),
            swallowed_to_client: get(&self.swallowed_to_client),
        }
    }
}

/// Keeps one connection counted in [`Stats::active`] while alive.
pub(crate) struct ActiveGuard<'a>(&'a AtomicU64);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

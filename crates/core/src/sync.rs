//! The primitives that core's shared state and background work are built
//! on, gathered in one place so that a model checker can stand in for them.
//!
//! A normal build uses std's mutex and atomics and Tokio's tasks. Built
//! with `RUSTFLAGS="--cfg distlock_shuttle"` (as `tests/model` is),
//! the mutex, the atomics and spawned tasks are
//! [Shuttle](https://docs.rs/shuttle)'s, so its scheduler chooses the
//! interleaving at every lock, atomic access and task switch. Tokio's
//! `Notify`, `oneshot`, `watch` and async `Mutex` stay Tokio's under both:
//! they work under any executor, and the model checker treats each of
//! their operations as one step. The cfg is ours alone, not a bare
//! `shuttle`, so that a program model-checking its own code with Shuttle
//! does not switch this crate over too.

#[cfg(not(distlock_shuttle))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(distlock_shuttle)]
pub(crate) use shuttle::sync::{Mutex, MutexGuard};

/// Atomics, std's or the model checker's.
pub(crate) mod atomic {
    #[cfg(not(distlock_shuttle))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

    #[cfg(distlock_shuttle)]
    pub(crate) use shuttle::sync::atomic::{
        AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering,
    };
}

/// Where background work runs: the current Tokio runtime, or under the
/// model checker its executor.
#[derive(Debug)]
pub(crate) struct Runtime {
    #[cfg(not(distlock_shuttle))]
    handle: tokio::runtime::Handle,
}

impl Runtime {
    /// The runtime of the calling task, if there is one. Background work
    /// can only be started where there is.
    pub(crate) fn current() -> Option<Self> {
        #[cfg(not(distlock_shuttle))]
        return tokio::runtime::Handle::try_current()
            .ok()
            .map(|handle| Self { handle });
        #[cfg(distlock_shuttle)]
        return Some(Self {});
    }

    /// Runs `task` in the background; its output is dropped.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        #[cfg(not(distlock_shuttle))]
        drop(self.handle.spawn(task));
        #[cfg(distlock_shuttle)]
        drop(shuttle::future::spawn(task));
    }
}

/// Runs `task` in the background on the current runtime, as `tokio::spawn`
/// does (and, like it, panics outside a runtime).
pub(crate) fn spawn<F>(task: F)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    #[cfg(not(distlock_shuttle))]
    drop(tokio::spawn(task));
    #[cfg(distlock_shuttle)]
    drop(shuttle::future::spawn(task));
}

/// A point where the model checker may switch to another task; nothing in
/// a normal build. It marks steps that Tokio's primitives would otherwise
/// make look like one (setting a value, then waking its waiters), so that
/// the interleavings between them are checked too.
#[inline(always)]
pub(crate) fn switch_point() {
    #[cfg(distlock_shuttle)]
    // Shuttle does not model time: a zero sleep is a bare switch point.
    shuttle::thread::sleep(std::time::Duration::ZERO);
}

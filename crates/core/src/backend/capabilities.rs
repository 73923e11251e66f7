//! What a backend can do, as core and callers ask it.

use crate::claim::Claim;

/// What a backend can do, where backends differ, described as facts.
///
/// The optional abilities that need methods of their own (hand-overs, a
/// session, wake-ups) are not flags here: a backend offers each as the
/// object that does it, in its
/// [`Abilities`](crate::backend::Abilities), so that a backend cannot
/// claim an ability without its method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Locks live exactly as long as the holder's process (or its handle)
    /// and never expire while it lives, like OS file locks. Such locks are
    /// never given up by the lease clock.
    pub process_bound: bool,
    /// Locks are shared with other processes (false for the in-memory backend).
    pub cross_process: bool,
    /// [`Backend::list`](crate::backend::Backend::list) shows locks held by every process, not only by
    /// this backend instance (false for memcached, which cannot enumerate).
    pub lists_every_holder: bool,
    /// [`Claim::Shared`] is granted, so a name is a reader-writer lock.
    pub shared: bool,
    /// [`Claim::Permit`] is granted, so a name can be a semaphore.
    pub semaphores: bool,
    /// [`try_acquire`](crate::backend::Backend::try_acquire), [`release`](crate::backend::Backend::release)
    /// and [`hand_over`](crate::backend::HandOvers::hand_over) each answer within the
    /// operation timeout their request or lease carries, with an error if
    /// the servers do not. Core then sets no timer of its own around them:
    /// a timer costs the runtime a registration, and often a wake-up of its
    /// timer driver, per call.
    pub bounds_calls: bool,
    /// Fair mode: the whole lock is granted to waiters in the order they
    /// asked, across processes, by the backend itself. A waiting attempt
    /// ([`AcquireRequest::retries`](crate::backend::AcquireRequest::retries)) that cannot be granted at once takes
    /// a place in a queue the store keeps, recorded in its
    /// [`WaitState`](crate::backend::WaitState), and renews that place with each attempt: a place not
    /// renewed for the request's lease is dropped, by the store's clock. A
    /// release (or an expiry) grants the lock to the first live place, in
    /// the same write where the store allows it, with the waiter's lease,
    /// holder and term, under an identity of the place's own (each attempt
    /// of a wait asks under a new one). That waiter's next attempt, whose
    /// wait state proves the place its own, takes the grant over under its
    /// own identity and extends it from that attempt, so that the lease
    /// core counts from the attempt's sending is never longer than the
    /// store's. A single try (no retries)
    /// takes no place, and is granted only when nobody holds or waits.
    /// [`Backend::end_wait`](crate::backend::Backend::end_wait) gives the place up, and a grant made to it
    /// meanwhile passes on to the next place.
    ///
    /// Core then lets each task of a client wait in the store by itself,
    /// rather than one task per name, and hands no lock over inside the
    /// client, so that the store's order is the order of asking.
    pub fair: bool,
}

impl Capabilities {
    /// A lease-based backend shared across processes, without wake-ups.
    pub const fn lease_based() -> Self {
        Self {
            process_bound: false,
            cross_process: true,
            lists_every_holder: true,
            shared: false,
            semaphores: false,
            bounds_calls: false,
            fair: false,
        }
    }

    /// These capabilities in fair mode, or not.
    pub const fn with_fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// These capabilities with calls that bound themselves, or without.
    pub const fn with_bounds_calls(mut self, on: bool) -> Self {
        self.bounds_calls = on;
        self
    }

    /// These capabilities with shared (reader) locks or without.
    pub const fn with_shared(mut self, on: bool) -> Self {
        self.shared = on;
        self
    }

    /// These capabilities with semaphores or without.
    pub const fn with_semaphores(mut self, on: bool) -> Self {
        self.semaphores = on;
        self
    }

    /// Whether `claim` is granted at all.
    pub const fn grants(&self, claim: Claim) -> bool {
        match claim {
            Claim::Exclusive => true,
            Claim::Shared => self.shared,
            Claim::Permit { .. } => self.semaphores,
        }
    }

    /// These capabilities, process-bound or not.
    pub const fn with_process_bound(mut self, on: bool) -> Self {
        self.process_bound = on;
        self
    }

    /// These capabilities, listing every holder's locks or only this
    /// instance's.
    pub const fn with_lists_every_holder(mut self, on: bool) -> Self {
        self.lists_every_holder = on;
        self
    }

    /// These capabilities, shared across processes or not.
    pub const fn with_cross_process(mut self, on: bool) -> Self {
        self.cross_process = on;
        self
    }
}

//! In-process coalescing: one slot per name, so that at most one task of a
//! client attempts or holds a given lock at a time.
//!
//! Tasks of the same process queue for a name here, first come first
//! served, instead of each polling the backend, so 16 waiters in one
//! process cost the server what one waiter costs. When the holder is done,
//! the next task in line gets a [`Baton`]: the lock itself, when the backend
//! handed it over in one step, or the right to try for it at once. The
//! queue is generic over the lock it hands on (the client's guard), so it
//! knows nothing of guards.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::name::LockName;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Mutex, MutexGuard};

/// What the next task in line for a name receives.
#[derive(Debug)]
pub(crate) enum Baton<T> {
    /// The lock was released: try for it at once.
    Free(SlotPermit<T>),
    /// The lock was released after a run of local hand-overs: let other
    /// processes try first.
    Yielded(SlotPermit<T>),
    /// The lock was handed over: it is yours.
    Granted(T),
}

/// A task waiting for a name, and whether a lock handed over may be its
/// grant.
#[derive(Debug)]
struct Waiter<T> {
    takes_hand_overs: bool,
    baton: oneshot::Sender<Baton<T>>,
}

impl<T> Waiter<T> {
    fn is_gone(&self) -> bool {
        self.baton.is_closed()
    }
}

/// The tasks waiting for a name, oldest first. A name is in the table
/// exactly while some task of the client has its slot.
type Queue<T> = VecDeque<Waiter<T>>;
type Table<T> = HashMap<LockName, Queue<T>>;

#[derive(Debug)]
pub(crate) struct Slots<T> {
    table: Arc<Mutex<Table<T>>>,
    local_releases: LocalReleaseTable,
}

impl<T> Clone for Slots<T> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            local_releases: self.local_releases.clone(),
        }
    }
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Self {
            table: Arc::default(),
            local_releases: LocalReleaseTable::default(),
        }
    }
}

/// For each name a task of this client waits on the backend for, the
/// releases of its readers and permits in this client: each may let that
/// task in, so it tries again at once instead of after its backoff.
#[derive(Debug, Clone, Default)]
struct LocalReleaseTable(Arc<Mutex<HashMap<LockName, Arc<LocalReleases>>>>);

impl LocalReleaseTable {
    fn lock(&self) -> MutexGuard<'_, HashMap<LockName, Arc<LocalReleases>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Releases of shared grants of one name in this client, counted.
#[derive(Debug, Default)]
pub(crate) struct LocalReleases {
    count: AtomicU64,
    released: Notify,
}

impl LocalReleases {
    /// How many releases there have been so far.
    pub(crate) fn seen(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Resolves once there have been more releases than `seen`.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn since(&self, seen: u64) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before the count is read, so a release between the
            // two still wakes us.
            released.as_mut().enable();
            if self.seen() != seen {
                return;
            }
            released.await;
        }
    }

    fn release(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
        self.released.notify_waiters();
    }
}

/// Hears this client's releases of shared grants of one name while a task
/// waits for it on the backend; dropping it stops listening.
#[derive(Debug)]
pub(crate) struct LocalReleasesWatch {
    table: LocalReleaseTable,
    name: LockName,
    releases: Arc<LocalReleases>,
}

impl std::ops::Deref for LocalReleasesWatch {
    type Target = LocalReleases;

    fn deref(&self) -> &LocalReleases {
        &self.releases
    }
}

impl Drop for LocalReleasesWatch {
    fn drop(&mut self) {
        let mut watched = self.table.lock();
        // Only the task with the name's slot listens, one at a time.
        if watched
            .get(&self.name)
            .is_some_and(|releases| Arc::ptr_eq(releases, &self.releases))
        {
            watched.remove(&self.name);
        }
    }
}

/// A reader's or a permit's tie to its client's waiters for the name: its
/// release may let one of them in.
#[derive(Debug)]
pub(crate) struct SharedRelease {
    table: LocalReleaseTable,
    name: LockName,
}

impl SharedRelease {
    /// Tells the task of this client that waits for the name, if any.
    pub(crate) fn released(self) {
        if let Some(releases) = self.table.lock().get(&self.name) {
            releases.release();
        }
    }
}

/// The right to attempt one name in this client, and, for an exclusive
/// grant, to hold it. Dropping it passes the slot to the next task in line,
/// and forgets the slot when nobody else wants it.
#[derive(Debug)]
pub(crate) struct SlotPermit<T> {
    slots: Slots<T>,
    name: LockName,
    /// How many local hand-overs in a row led to the current grant.
    hand_overs: u32,
    /// When the first of them happened.
    run_began: Option<Instant>,
    /// Whether the next release yields to other processes.
    yield_next: bool,
    /// Whether dropping passes the slot on; false for a permit nobody took,
    /// whose slot is already forgotten.
    armed: bool,
}

impl<T> Slots<T> {
    /// Waits for `name`'s slot. Only a waiter that `takes_hand_overs` (an
    /// exclusive claim with the client's own holder) is ever handed a
    /// lock.
    ///
    /// # Cancel safety
    /// Cancel safe: a cancelled wait leaves the queue, and a baton sent to
    /// it meanwhile is dropped, which passes the slot on (and releases a
    /// lock handed over).
    pub(crate) async fn acquire(&self, name: &LockName, takes_hand_overs: bool) -> Baton<T> {
        loop {
            let waiting = {
                let mut table = self.lock();
                let Some(queue) = table.get_mut(name) else {
                    table.insert(name.clone(), Queue::new());
                    return Baton::Free(self.permit(name));
                };
                queue.retain(|waiter| !waiter.is_gone());
                let (sender, receiver) = oneshot::channel();
                queue.push_back(Waiter {
                    takes_hand_overs,
                    baton: sender,
                });
                receiver
            };
            // A waiter's sender is only dropped unsent once its receiver
            // is gone, so this does not fail; if it ever did, queue again.
            if let Ok(baton) = waiting.await {
                return baton;
            }
        }
    }

    /// Takes `name`'s slot if nobody in this client has it.
    pub(crate) fn try_acquire(&self, name: &LockName) -> Option<SlotPermit<T>> {
        let mut table = self.lock();
        if table.contains_key(name) {
            return None;
        }
        table.insert(name.clone(), Queue::new());
        Some(self.permit(name))
    }

    fn permit(&self, name: &LockName) -> SlotPermit<T> {
        SlotPermit {
            slots: self.clone(),
            name: name.clone(),
            hand_overs: 0,
            run_began: None,
            yield_next: false,
            armed: true,
        }
    }

    /// Gives `baton` to the oldest task still waiting for `name`. When
    /// nobody waits, gives it back, after forgetting the slot if `forget`.
    /// A lock handed over goes only to a waiter that takes hand-overs: when
    /// the oldest waiter does not, it is given back too.
    fn offer(&self, name: &LockName, mut baton: Baton<T>, forget: bool) -> Result<(), Baton<T>> {
        loop {
            let next = {
                let mut table = self.lock();
                let queue = table.get_mut(name);
                let handed_a_lock = matches!(baton, Baton::Granted(_));
                if let Some(queue) = queue
                    && handed_a_lock
                    && queue
                        .iter()
                        .find(|waiter| !waiter.is_gone())
                        .is_some_and(|waiter| !waiter.takes_hand_overs)
                {
                    return Err(baton);
                }
                match table.get_mut(name).and_then(VecDeque::pop_front) {
                    Some(next) => next,
                    None => {
                        // Forgotten under the same lock that found the queue
                        // empty, so no new waiter is stranded.
                        if forget {
                            table.remove(name);
                        }
                        return Err(baton);
                    }
                }
            };
            match next.baton.send(baton) {
                Ok(()) => return Ok(()),
                // That waiter gave up; try the next one.
                Err(back) => baton = back,
            }
        }
    }

    /// Whether a task waits for `name`, and the oldest of them could be
    /// handed the lock.
    fn next_takes_hand_overs(&self, name: &LockName) -> bool {
        self.lock().get(name).is_some_and(|queue| {
            queue
                .iter()
                .find(|waiter| !waiter.is_gone())
                .is_some_and(|waiter| waiter.takes_hand_overs)
        })
    }

    #[cfg(test)]
    fn has_waiters(&self, name: &LockName) -> bool {
        self.lock()
            .get(name)
            .is_some_and(|queue| queue.iter().any(|waiter| !waiter.is_gone()))
    }

    fn lock(&self) -> MutexGuard<'_, Table<T>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts hearing this client's releases of readers and permits of
    /// `name`, for the task that waits for it on the backend.
    pub(crate) fn watch_local_releases(&self, name: &LockName) -> LocalReleasesWatch {
        let releases = self
            .local_releases
            .lock()
            .entry(name.clone())
            .or_default()
            .clone();
        LocalReleasesWatch {
            table: self.local_releases.clone(),
            name: name.clone(),
            releases,
        }
    }

    /// The tie of a reader or a permit of `name` to this client's waiters.
    pub(crate) fn shared_release(&self, name: &LockName) -> SharedRelease {
        SharedRelease {
            table: self.local_releases.clone(),
            name: name.clone(),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

impl<T> SlotPermit<T> {
    /// How many local hand-overs in a row led to the current grant.
    pub(crate) fn hand_overs(&self) -> u32 {
        self.hand_overs
    }

    /// How long ago the first of those hand-overs happened.
    pub(crate) fn run_length(&self) -> Duration {
        self.run_began
            .map_or(Duration::ZERO, |began| began.elapsed())
    }

    /// Counts one more hand-over, as the permit moves to the next holder.
    pub(crate) fn count_hand_over(&mut self) {
        self.hand_overs += 1;
        self.run_began.get_or_insert_with(Instant::now);
    }

    /// Makes the next pass yield to other processes: the run of local
    /// hand-overs reached its bound.
    pub(crate) fn yield_next(&mut self) {
        self.yield_next = true;
    }

    /// Whether the next task of this client waiting for the name asks for
    /// the whole lock, and so could be handed it.
    pub(crate) fn next_takes_hand_overs(&self) -> bool {
        self.slots.next_takes_hand_overs(&self.name)
    }

    #[cfg(test)]
    fn has_waiters(&self) -> bool {
        self.slots.has_waiters(&self.name)
    }

    /// The queue of this permit's name, to offer a guard that holds the
    /// permit to the next waiter.
    pub(crate) fn queue(&self) -> SlotQueue<T> {
        SlotQueue {
            slots: self.slots.clone(),
            name: self.name.clone(),
        }
    }
}

/// The waiters for one name.
pub(crate) struct SlotQueue<T> {
    slots: Slots<T>,
    name: LockName,
}

impl<T> SlotQueue<T> {
    /// Gives a lock (whose guard holds this name's slot) to the next
    /// waiter; gives it back when nobody waits.
    pub(crate) fn offer(self, guard: T) -> Result<(), T> {
        match self.slots.offer(&self.name, Baton::Granted(guard), false) {
            Ok(()) => Ok(()),
            Err(Baton::Granted(guard)) => Err(guard),
            Err(_) => unreachable!("offer gives back what it was given"),
        }
    }
}

impl<T> Drop for SlotPermit<T> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let next = self.slots.permit(&self.name);
        let baton = if self.yield_next {
            Baton::Yielded(next)
        } else {
            Baton::Free(next)
        };
        if let Err(Baton::Free(mut unused) | Baton::Yielded(mut unused)) =
            self.slots.offer(&self.name, baton, true)
        {
            // The slot is forgotten already; the unused permit must not
            // pass it on again.
            unused.armed = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The queue's tests hand on no locks, only slots.
    type Slots = super::Slots<()>;

    fn free(baton: Baton<()>) -> SlotPermit<()> {
        match baton {
            Baton::Free(permit) => permit,
            other => panic!("expected a free baton, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn slots_are_forgotten_when_unused() {
        let slots = Slots::default();
        let name = LockName::new("n").unwrap();
        let permit = free(slots.acquire(&name, true).await);
        assert!(slots.try_acquire(&name).is_none());
        assert_eq!(slots.len(), 1);
        drop(permit);
        assert_eq!(slots.len(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_wait_forgets_the_slot() {
        let slots = Slots::default();
        let name = LockName::new("n").unwrap();
        let permit = free(slots.acquire(&name, true).await);
        let waited =
            tokio::time::timeout(Duration::from_millis(10), slots.acquire(&name, true)).await;
        assert!(waited.is_err());
        assert!(!permit.has_waiters());
        drop(permit);
        assert_eq!(slots.len(), 0);
    }

    #[tokio::test]
    async fn waiters_are_served_in_order() {
        let slots = Slots::default();
        let name = LockName::new("n").unwrap();
        let first = free(slots.acquire(&name, true).await);
        let (order, mut served) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for i in 0..3 {
            let (task_slots, task_name) = (slots.clone(), name.clone());
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let permit = free(task_slots.acquire(&task_name, true).await);
                order.send(i).unwrap();
                drop(permit);
            }));
            // Let each task queue before the next one.
            while slots.lock()[&name].len() < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        let got: Vec<usize> = (0..3).map(|_| served.try_recv().unwrap()).collect();
        assert_eq!(got, vec![0, 1, 2]);
        assert_eq!(slots.len(), 0);
    }

    #[tokio::test]
    async fn a_yielding_release_tells_the_next_waiter() {
        let slots = Slots::default();
        let name = LockName::new("n").unwrap();
        let mut first = free(slots.acquire(&name, true).await);
        let waiter = {
            let slots = slots.clone();
            let name = name.clone();
            tokio::spawn(async move { slots.acquire(&name, true).await })
        };
        while !first.has_waiters() {
            tokio::task::yield_now().await;
        }
        first.yield_next();
        drop(first);
        assert!(matches!(waiter.await.unwrap(), Baton::Yielded(_)));
        assert_eq!(slots.len(), 0);
    }
}

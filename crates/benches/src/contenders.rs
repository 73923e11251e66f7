//! Who takes part in the uncontended scenario, and what each side of it
//! made: shared by the rounds and by the passes that count PostgreSQL's
//! transactions.

use std::time::Duration;

use crate::commands::Counts;
use crate::pg_steps::Step;

/// What takes and releases the lock in the uncontended scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contender {
    /// distlock's `LockClient::try_acquire` and `LockGuard::release`.
    Client,
    /// The same, on the server beside the target's with this index in
    /// [`crate::uncontended::Uncontended::beside`] (other durability settings): measured only.
    ClientBeside(usize),
    /// The backend's own `try_acquire` and `release`, called directly.
    BackendCalls,
    /// memcached's bare `add` and CAS-conditional delete
    /// (`MemcachedBackend::raw`).
    RawRecipe,
    /// `distributed-lock-mongo` 0.2.0's `try_acquire` and `release`.
    MongoPeer,
    /// MongoDB: the backend's own calls with write concern `w: 1`.
    WriteOne,
    /// MongoDB: the backend's acquire, released by deleting the document.
    DeletingRelease,
    /// MongoDB: the backend's calls on a collection without the TTL index.
    Unindexed,
    /// MongoDB: the same, each acquire released by deleting the document.
    UnindexedDeleting,
    /// MongoDB: distributed-lock-mongo's two commands, sent directly.
    PeerCommands,
    /// MongoDB: the same, with a fencing token built by the server.
    PeerCommandsWithToken,
    /// etcd's own lock service: the `Lock` and `Unlock` RPCs.
    EtcdLockRpc,
    /// `etcdctl lock NAME true`, one process per cycle.
    Etcdctl,
    /// sqlx's `PgAdvisoryLock`: `acquire` and `release_now` on one
    /// connection.
    PgAdvisoryLock,
    /// PostgreSQL advisory mode: one step from sqlx's pair to the
    /// backend's cycle, sent directly (see [`crate::pg_steps`]).
    PgStep(Step),
    /// Redis: `SET NX PX` and an owner-checked delete script, issued
    /// directly on the backend's key for the name.
    RedisRawPair,
    /// An object store: `PUT If-None-Match: *` and `DELETE`, issued
    /// directly on an object of their own (see
    /// [`crate::objectstore::raw_pair`]).
    ObjectStoreRawPair,
    /// `rslock` 0.7.4's `lock` and `unlock`.
    Rslock,
    /// `redlock` 2.0.0's `lock` and `unlock`.
    Redlock,
}

/// One contender's uncontended cycles.
#[derive(Debug, Clone)]
pub(crate) struct Side {
    pub(crate) contender: Contender,
    pub(crate) cycles: u64,
    pub(crate) elapsed: Duration,
    /// Server commands over this contender's rounds, where counted, or
    /// (PostgreSQL) over a pass of its own after them.
    pub(crate) commands: Option<Counts>,
    /// The cycles `commands` were counted over.
    pub(crate) counted_cycles: u64,
    /// The server's own count of its operations over these rounds, where
    /// it keeps one (etcd's storage operations).
    pub(crate) server_ops: Option<Counts>,
    /// The servers' processor time over these rounds, where they report
    /// it (Redis, etcd).
    pub(crate) server_cpu: Option<Duration>,
    /// The time this process's requests of each kind took over these
    /// rounds, in microseconds, where its client times them (an object
    /// store's).
    pub(crate) request_micros: Option<Counts>,
    /// This process's processor time over these rounds, all its threads;
    /// `None` for a contender that runs in processes of its own.
    pub(crate) client_cpu: Option<Duration>,
    /// Cycles per second in each round, in order.
    pub(crate) rounds: Vec<f64>,
}

impl Side {
    /// A side of `cycles` in one second, with nothing else measured.
    #[cfg(test)]
    pub(crate) fn measured(contender: Contender, cycles: u64) -> Self {
        Side {
            contender,
            cycles,
            elapsed: Duration::from_secs(1),
            commands: None,
            counted_cycles: 0,
            server_ops: None,
            server_cpu: None,
            request_micros: None,
            client_cpu: None,
            rounds: vec![cycles as f64],
        }
    }

    pub(crate) fn per_second(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }

    /// The servers' processor time per cycle, where they report it.
    pub(crate) fn server_cpu_per_cycle(&self) -> Option<Duration> {
        let cpu = self.server_cpu?;
        (self.cycles > 0).then(|| cpu.div_f64(self.cycles as f64))
    }

    /// This process's processor time per cycle, where it ran the cycles.
    pub(crate) fn client_cpu_per_cycle(&self) -> Option<Duration> {
        let cpu = self.client_cpu?;
        (self.cycles > 0).then(|| cpu.div_f64(self.cycles as f64))
    }

    pub(crate) fn commands_per_cycle(&self) -> Option<f64> {
        let commands = self.commands.as_ref()?;
        (self.counted_cycles > 0).then(|| commands.total() as f64 / self.counted_cycles as f64)
    }

    /// The mean time a request of `kind` took, where timed.
    pub(crate) fn request_time(&self, kind: &str) -> Option<Duration> {
        let micros = *self.request_micros.as_ref()?.0.get(kind)?;
        let count = *self.commands.as_ref()?.0.get(kind)?;
        (count > 0).then(|| Duration::from_micros(micros / count))
    }

    /// This side's rate against `other`'s, round by round: the median and
    /// the middle half, showing how much the machine's noise moves the
    /// ratio.
    pub(crate) fn round_ratios(&self, other: &Side) -> Option<Spread> {
        let mut ratios: Vec<f64> = self
            .rounds
            .iter()
            .zip(&other.rounds)
            .filter(|&(_, &theirs)| theirs > 0.0)
            .map(|(ours, theirs)| ours / theirs)
            .collect();
        if ratios.is_empty() {
            return None;
        }
        ratios.sort_by(f64::total_cmp);
        let at = |fraction: f64| ratios[((ratios.len() - 1) as f64 * fraction).round() as usize];
        Some(Spread {
            low: at(0.25),
            median: at(0.5),
            high: at(0.75),
        })
    }
}

/// The median and quartiles of per-round ratios.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spread {
    pub(crate) low: f64,
    pub(crate) median: f64,
    pub(crate) high: f64,
}

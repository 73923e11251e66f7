//! The scenarios, each measured for one backend.

use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::backend::BackendExt;
use distlock::backend::{AcquireRequest, Attempt, Backend, Holder, WaitState};
use distlock::{AcquireOptions, Claim, LockClient, LockKind, LockName, LockOptions};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::asking;
use crate::commands::Counts;
use crate::counting::{Calls, counting};
use crate::etcd_peer::LockService;
use crate::etcdctl::Etcdctl;
use crate::mix::Mix;
use crate::pg_stats::PUBLISHED_AFTER_CLOSE;
use crate::quiet::Quiet;
use crate::target::{Server, Target};
use crate::timeline::{Contention, Hold, Line, now_ns, sleep_until_ns};
use crate::variants::MongoVariants;
use crate::{peers, pg_peer, redis_peers};

/// Failures end the run with a message.
pub(crate) type Outcome<T> = Result<T, String>;

/// A fresh lock name for one scenario, distinct per run and process.
pub(crate) fn bench_name(scenario: &str) -> LockName {
    let unique = now_ns() ^ (u64::from(std::process::id()) << 40);
    LockName::new(format!("bench-{scenario}-{unique:016x}")).expect("valid name")
}

/// What takes and releases the lock in the uncontended scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contender {
    /// distlock's `LockClient::try_acquire` and `LockGuard::release`.
    Client,
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
    /// Redis: `SET NX PX` and an owner-checked delete script, issued
    /// directly on the backend's key for the name.
    RedisRawPair,
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
    /// Server commands over this contender's rounds, where counted.
    pub(crate) commands: Option<Counts>,
    /// The server's own count of its operations over these rounds, where
    /// it keeps one (etcd's storage operations).
    pub(crate) server_ops: Option<Counts>,
    /// The servers' processor time over these rounds, where they report
    /// it (Redis).
    pub(crate) server_cpu: Option<Duration>,
    /// Cycles per second in each round, in order.
    pub(crate) rounds: Vec<f64>,
}

impl Side {
    pub(crate) fn per_second(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }

    /// The servers' processor time per cycle, where they report it.
    pub(crate) fn server_cpu_per_cycle(&self) -> Option<Duration> {
        let cpu = self.server_cpu?;
        (self.cycles > 0).then(|| cpu.div_f64(self.cycles as f64))
    }

    pub(crate) fn commands_per_cycle(&self) -> Option<f64> {
        let commands = self.commands.as_ref()?;
        (self.cycles > 0).then(|| commands.total() as f64 / self.cycles as f64)
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

/// Uncontended results: one side per contender, the physical baseline
/// first.
#[derive(Debug, Clone)]
pub(crate) struct Uncontended {
    pub(crate) sides: Vec<Side>,
    /// How the wait for a quiet machine before the rounds went.
    pub(crate) quiet: Option<Quiet>,
}

impl Uncontended {
    pub(crate) fn side(&self, contender: Contender) -> Option<&Side> {
        self.sides.iter().find(|side| side.contender == contender)
    }

    /// What the client is compared with: the bare recipe where there is
    /// one, etcd's own lock service on etcd, else the backend's own two
    /// calls.
    pub(crate) fn baseline(&self) -> Option<&Side> {
        self.side(Contender::RawRecipe)
            .or_else(|| self.side(Contender::RedisRawPair))
            .or_else(|| self.side(Contender::EtcdLockRpc))
            .or_else(|| self.side(Contender::BackendCalls))
    }
}

/// How many alternating rounds the uncontended scenario splits its time
/// into, so that noise from the rest of the machine hits every side alike.
pub(crate) const ROUNDS: u32 = 20;

/// Acquires and releases one name as fast as possible, in alternating
/// rounds, each begun by the next contender in turn: directly through the
/// backend's two calls, through the client, and (where there is one)
/// through the bare recipe and the peers: the Rust peer on MongoDB, etcd's
/// lock service and (given its binary) `etcdctl lock` on etcd, sqlx's
/// advisory lock on PostgreSQL, the raw pair, rslock and redlock on Redis. Where the server publishes its counts late
/// (PostgreSQL), rounds this short cannot be counted apart, and none is.
pub(crate) async fn uncontended(
    target: &Target,
    seconds: Duration,
    with_peer: bool,
    etcdctl: Option<&str>,
) -> Outcome<Uncontended> {
    let name = bench_name("uncontended");
    let mut contenders = vec![Contender::BackendCalls, Contender::Client];
    // The bare recipe runs on one server: no baseline for a scale-out form.
    if matches!(target.server, Server::Memcached(_)) && target.scale_out.is_none() {
        contenders.insert(0, Contender::RawRecipe);
    }
    if with_peer && matches!(target.server, Server::Mongo { .. }) {
        contenders.push(Contender::MongoPeer);
    }
    let redis = match &target.server {
        Server::Redis(server) if target.scale_out.is_none() => Some(server),
        _ => None,
    };
    if redis.is_some() {
        contenders.insert(0, Contender::RedisRawPair);
    }
    let rslock = match redis {
        Some(_) if with_peer => Some(redis_peers::rslock_manager(&target.url).await?),
        _ => None,
    };
    if rslock.is_some() {
        contenders.extend([Contender::Rslock, Contender::Redlock]);
    }
    let variants = MongoVariants::open(target).await?;
    if variants.is_some() {
        contenders.extend([
            Contender::WriteOne,
            Contender::DeletingRelease,
            Contender::Unindexed,
            Contender::UnindexedDeleting,
            Contender::PeerCommands,
            Contender::PeerCommandsWithToken,
        ]);
    }
    let lock_service = if with_peer {
        LockService::open(target).await?
    } else {
        None
    };
    if lock_service.is_some() {
        contenders.push(Contender::EtcdLockRpc);
    }
    let etcdctl = match etcdctl {
        Some(bin) if with_peer && matches!(target.server, Server::Etcd(_)) => {
            Some(Etcdctl::for_url(bin, &target.url)?)
        }
        _ => None,
    };
    if etcdctl.is_some() {
        contenders.push(Contender::Etcdctl);
    }
    let mut advisory = match &target.server {
        Server::Postgres(_) if with_peer => Some(pg_peer::connect(&target.url).await?),
        _ => None,
    };
    if advisory.is_some() {
        contenders.push(Contender::PgAdvisoryLock);
    }
    let counted = !target.counts_published_late();
    let backend = rounds_backend(target).await?;
    let round = seconds / (contenders.len() as u32 * ROUNDS);
    let client = LockClient::new(backend.clone(), LockOptions::default());
    let mut sides: Vec<Side> = contenders
        .iter()
        .map(|&contender| Side {
            contender,
            cycles: 0,
            elapsed: Duration::ZERO,
            commands: None,
            server_ops: None,
            server_cpu: None,
            rounds: Vec::with_capacity(ROUNDS as usize),
        })
        .collect();
    let count = sides.len();
    for index in 0..ROUNDS as usize {
        // Each round starts with the next contender, so that none always
        // runs first (after the server counts are read) or last.
        for turn in 0..count {
            let side = &mut sides[(index + turn) % count];
            // The server's count is read first, so that the command that
            // reads it (MongoDB's `serverStatus`) is not counted as the
            // contender's.
            let ops_before = target.server_ops().await;
            let before = if counted {
                target.counts().await?
            } else {
                None
            };
            // Read closest to the round, so that the reads of the counts
            // fall outside it.
            let cpu_before = target.server_cpu().await;
            let started = Instant::now();
            let cycles = match side.contender {
                Contender::Client => client_cycles(&client, &name, round).await?,
                Contender::BackendCalls => backend_cycles(&*backend, &name, round).await?,
                Contender::RawRecipe => raw_cycles(target, &name, round).await?,
                Contender::MongoPeer => peers::mongo_cycles(target, &name, round).await?,
                Contender::WriteOne => opened(&variants)?.write_one_cycles(&name, round).await?,
                Contender::DeletingRelease => {
                    opened(&variants)?
                        .deleting_cycles(&*target.backend, &name, round)
                        .await?
                }
                Contender::Unindexed => {
                    opened(&variants)?
                        .unindexed_cycles(&name, round, false)
                        .await?
                }
                Contender::UnindexedDeleting => {
                    opened(&variants)?
                        .unindexed_cycles(&name, round, true)
                        .await?
                }
                Contender::PeerCommands => {
                    opened(&variants)?
                        .peer_command_cycles(&name, round, false)
                        .await?
                }
                Contender::PeerCommandsWithToken => {
                    opened(&variants)?
                        .peer_command_cycles(&name, round, true)
                        .await?
                }
                Contender::EtcdLockRpc => {
                    let service = lock_service.as_ref().ok_or("no etcd lock service")?;
                    service.cycles(&name, round).await?
                }
                Contender::Etcdctl => {
                    let etcdctl = etcdctl.as_ref().ok_or("no etcdctl")?;
                    etcdctl.cycles(&name, round).await?
                }
                Contender::PgAdvisoryLock => {
                    let connection = advisory.as_mut().ok_or("no sqlx connection")?;
                    pg_peer::cycles(connection, &name, round).await?
                }
                Contender::RedisRawPair => {
                    let server = redis.ok_or("the raw pair needs a Redis target")?;
                    server.raw_cycles(&name, round).await?
                }
                Contender::Rslock => {
                    let manager = rslock.as_ref().ok_or("no rslock manager")?;
                    redis_peers::rslock_cycles(manager, &name, round).await?
                }
                Contender::Redlock => {
                    redis_peers::redlock_cycles(&target.url, &name, round).await?
                }
            };
            let elapsed = started.elapsed();
            if let (Some(before), Some(after)) = (cpu_before, target.server_cpu().await) {
                *side.server_cpu.get_or_insert(Duration::ZERO) += after.saturating_sub(before);
            }
            side.cycles += cycles;
            side.elapsed += elapsed;
            side.rounds
                .push(cycles as f64 / elapsed.as_secs_f64().max(f64::EPSILON));
            if let Some(before) = before
                && let Some(after) = target.counts().await?
            {
                side.commands
                    .get_or_insert_with(Counts::default)
                    .add(&target.counted_between(&before, &after));
            }
            if let (Some(before), Some(after)) = (ops_before, target.server_ops().await) {
                side.server_ops
                    .get_or_insert_with(Counts::default)
                    .add(&after.since(&before));
            }
        }
    }
    if let Some(service) = lock_service {
        service.close().await;
    }
    if !counted {
        // Close every connection of the rounds, so that the server
        // publishes their counts now, not in a later run's window.
        drop((client, backend));
        if let Some(connection) = advisory {
            let _ = sqlx::Connection::close(connection).await;
        }
        tokio::time::sleep(PUBLISHED_AFTER_CLOSE).await;
    }
    Ok(Uncontended { sides, quiet: None })
}

/// The backend the uncontended rounds take the lock through: the target's
/// own, or, where the server publishes its counts only once a connection
/// closes (PostgreSQL), one opened for the rounds and closed after them.
async fn rounds_backend(target: &Target) -> Outcome<Arc<dyn Backend>> {
    if !target.counts_published_late() {
        return Ok(target.backend.clone());
    }
    distlock::open(&target.url)
        .await
        .map_err(|e| format!("{}: {e}", target.shown))
}

fn opened(variants: &Option<MongoVariants>) -> Outcome<&MongoVariants> {
    variants
        .as_ref()
        .ok_or_else(|| "the MongoDB variants need a MongoDB target".to_owned())
}

async fn client_cycles(client: &LockClient, name: &LockName, seconds: Duration) -> Outcome<u64> {
    let started = Instant::now();
    let mut cycles = 0;
    while started.elapsed() < seconds {
        let guard = client
            .try_acquire(name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("an uncontended lock was held")?;
        guard.release().await.map_err(|e| e.to_string())?;
        cycles += 1;
    }
    Ok(cycles)
}

/// The backend's own `try_acquire` and `release`, as often as `seconds`
/// allows.
pub(crate) async fn backend_cycles(
    backend: &dyn Backend,
    name: &LockName,
    seconds: Duration,
) -> Outcome<u64> {
    cycles_with(backend, name, seconds, |lease| async move {
        backend
            .release(&lease)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await
}

/// Acquires `name` through `backend` and releases it with `release`, as
/// often as `seconds` allows.
pub(crate) async fn cycles_with<F, Fut>(
    backend: &dyn Backend,
    name: &LockName,
    seconds: Duration,
    release: F,
) -> Outcome<u64>
where
    F: Fn(distlock::backend::Lease) -> Fut,
    Fut: Future<Output = Outcome<()>>,
{
    let holder = Arc::new(Holder::this_process(Some("distlock-bench raw")));
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < seconds {
        let request = AcquireRequest::new(
            name.clone(),
            Claim::Exclusive,
            LockOptions::DEFAULT_LEASE,
            holder.clone(),
        );
        let Attempt::Acquired {
            fencing_token,
            state,
        } = backend
            .try_acquire(&request, &mut WaitState::new())
            .await
            .map_err(|e| e.to_string())?
        else {
            return Err("an uncontended lock was held".into());
        };
        release(request.granted(fencing_token, state)).await?;
        cycles += 1;
    }
    Ok(cycles)
}

/// memcached's bare `add` + CAS delete, on the backend's own key for `name`.
async fn raw_cycles(target: &Target, name: &LockName, seconds: Duration) -> Outcome<u64> {
    let Server::Memcached(backend) = &target.server else {
        return Err("the raw recipe is memcached's".into());
    };
    let raw = backend.raw();
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < seconds {
        let grant = raw
            .try_lock(name, LockOptions::DEFAULT_LEASE)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("an uncontended lock was held")?;
        if !raw.unlock(grant).await.map_err(|e| e.to_string())? {
            return Err("a raw grant was gone before its release".into());
        }
        cycles += 1;
    }
    Ok(cycles)
}

/// When the contending processes start and stop, by the wall clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) start_ns: u64,
    pub(crate) until_ns: u64,
}

impl Window {
    /// A window of `seconds` that opens after `startup`, time for the
    /// workers to start and connect.
    pub(crate) fn after(startup: Duration, seconds: Duration) -> Self {
        let start_ns = now_ns() + startup.as_nanos() as u64;
        Self {
            start_ns,
            until_ns: start_ns + seconds.as_nanos() as u64,
        }
    }

    pub(crate) fn length(&self) -> Duration {
        Duration::from_nanos(self.until_ns - self.start_ns)
    }

    fn contains(&self, at_ns: u64) -> bool {
        (self.start_ns..=self.until_ns).contains(&at_ns)
    }
}

/// What the workers of one contended run reported.
#[derive(Debug, Default)]
struct Reports {
    holds: Vec<Hold>,
    commands: Option<Counts>,
    errors: u64,
}

impl Reports {
    /// Takes in one line; returns the round it closes, if it closes one.
    fn absorb(&mut self, line: &str) -> Outcome<Option<u32>> {
        match serde_json::from_str::<Line>(line)
            .map_err(|e| format!("bad worker line {line:?}: {e}"))?
        {
            Line::Hold(hold) => self.holds.push(hold),
            Line::Commands(counts) => self
                .commands
                .get_or_insert_with(Counts::default)
                .add(&counts),
            Line::Errors(n) => self.errors += n,
            Line::RoundDone(round) => return Ok(Some(round)),
        }
        Ok(None)
    }
}

/// Runs one worker process per command, all contending for one lock within
/// `window`, and sums up what they report with [`Contention::from_holds`]
/// (see [`gather`]).
pub(crate) async fn contend(
    target: &Target,
    workers: Vec<Command>,
    window: Window,
    rounds: bool,
) -> Outcome<Contention> {
    let gathered = gather(target, workers, window, rounds).await?;
    let mut contention = Contention::from_holds(gathered.holds, window.length());
    contention.errors = gathered.errors;
    contention.commands = gathered.commands;
    contention.server_ops = gathered.server_ops;
    Ok(contention)
}

/// What the workers of one contended run reported, over its window.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    /// The holds granted within the window.
    pub(crate) holds: Vec<Hold>,
    /// Server commands over the window, where counted.
    pub(crate) commands: Option<Counts>,
    /// The server's own count of its operations over the window, where it
    /// keeps one.
    pub(crate) server_ops: Option<Counts>,
    /// Calls that failed (the workers went on).
    pub(crate) errors: u64,
}

/// Runs one worker process per command, all contending for one lock within
/// `window`, and gathers what they report. In the tight loop every task
/// takes the lock over and over; with `rounds`, the parent starts rounds
/// (a `go` line to every worker) until the window closes, and every task
/// takes the lock once per round (see [`Workload`]). Server commands come
/// from the workers' own counts (MongoDB), from the server's counters read
/// when the window opens and closes (memcached, etcd), or, where the server
/// publishes them late (PostgreSQL), read when the window opens and once
/// every worker has exited.
pub(crate) async fn gather(
    target: &Target,
    workers: Vec<Command>,
    window: Window,
    rounds: bool,
) -> Outcome<Gathered> {
    let mut children = Vec::new();
    for mut command in workers {
        let child = command
            .stdin(if rounds {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start a worker: {e}"))?;
        children.push(child);
    }
    // The server's counts when the window opens and when it closes, read on
    // time whatever the workers do: a peer that sleeps past the end of the
    // window (tooz waits a whole second between tries) adds nothing.
    let edges = {
        let target = target.clone();
        tokio::spawn(async move {
            sleep_until_ns(window.start_ns).await;
            let opened = (target.counts().await, target.server_ops().await);
            sleep_until_ns(window.until_ns).await;
            let closed = (target.counts().await, target.server_ops().await);
            (opened, closed)
        })
    };
    let mut readers = Vec::new();
    let mut stdins = Vec::new();
    for child in &mut children {
        readers.push(BufReader::new(child.stdout.take().ok_or("worker without stdout")?).lines());
        stdins.extend(child.stdin.take());
    }
    let mut reports = Reports::default();
    if rounds {
        sleep_until_ns(window.start_ns).await;
        while now_ns() < window.until_ns {
            for stdin in &mut stdins {
                stdin
                    .write_all(b"go\n")
                    .await
                    .map_err(|e| format!("cannot start a round: {e}"))?;
                stdin.flush().await.map_err(|e| e.to_string())?;
            }
            for reader in &mut readers {
                loop {
                    let line = reader
                        .next_line()
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or("a worker ended in the middle of a round")?;
                    if reports.absorb(&line)?.is_some() {
                        break;
                    }
                }
            }
        }
    }
    drop(stdins);
    for (reader, mut child) in readers.iter_mut().zip(children) {
        while let Some(line) = reader.next_line().await.map_err(|e| e.to_string())? {
            reports.absorb(&line)?;
        }
        let status = child.wait().await.map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("a worker failed: {status}"));
        }
    }
    let ((counts_opened, ops_opened), (mut counts_closed, ops_closed)) =
        edges.await.map_err(|e| e.to_string())?;
    if target.counts_published_late() {
        // The workers' connections have closed, and their counts are
        // published as the server's processes for them exit.
        tokio::time::sleep(PUBLISHED_AFTER_CLOSE).await;
        counts_closed = target.counts().await;
    }
    let server_ops = match (ops_opened, ops_closed) {
        (Some(before), Some(after)) => {
            let mut delta = after.since(&before);
            // The serverStatus that read the second sample.
            if let Some(commands) = delta.0.get_mut("command") {
                *commands = commands.saturating_sub(1);
            }
            Some(delta)
        }
        _ => None,
    };
    // MongoDB's commands are counted by each worker's own client; the
    // parent's monitor sees none of them. memcached's and etcd's come from
    // the server.
    let commands = match (counts_opened?, counts_closed?) {
        (Some(before), Some(after)) if target.counted_by_server() => {
            Some(target.counted_between(&before, &after))
        }
        _ => reports.commands,
    };
    let mut holds = reports.holds;
    holds.retain(|hold| window.contains(hold.acquired_at_ns));
    Ok(Gathered {
        holds,
        commands,
        server_ops,
        errors: reports.errors,
    })
}

/// What the tasks of a contended run do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workload {
    /// Every task takes the lock over and over, releasing it at once.
    TightLoop,
    /// Every task takes the lock once per round and holds it for `work`
    /// (zero: releases it at once), a round starting at each `go` line on
    /// standard input.
    Rounds { work: Duration },
}

impl Workload {
    /// The rounds workload without work.
    pub(crate) const ROUNDS: Self = Self::Rounds {
        work: Duration::ZERO,
    };

    /// The workloads of a run, in order: the tight loop, rounds, and rounds
    /// with `work` unless it is zero.
    pub(crate) fn all(work: Duration) -> Vec<Self> {
        let mut all = vec![Self::TightLoop, Self::ROUNDS];
        if !work.is_zero() {
            all.push(Self::Rounds { work });
        }
        all
    }

    /// Whether the parent runs it in rounds.
    pub(crate) fn rounds(self) -> bool {
        matches!(self, Self::Rounds { .. })
    }

    /// How long each task holds the lock before it releases it.
    pub(crate) fn work(self) -> Duration {
        match self {
            Self::TightLoop => Duration::ZERO,
            Self::Rounds { work } => work,
        }
    }

    /// Its name in progress lines and goals.
    pub(crate) fn label(self) -> String {
        match self {
            Self::TightLoop => "tight loop".to_owned(),
            Self::Rounds { work } if work.is_zero() => "rounds".to_owned(),
            Self::Rounds { work } => {
                format!("rounds with {} of work", humantime::format_duration(work))
            }
        }
    }
}

/// How a contended run is laid out: its processes, their tasks, its
/// window, and its workload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub(crate) processes: u32,
    pub(crate) tasks: u32,
    pub(crate) window: Window,
    pub(crate) workload: Workload,
}

impl Layout {
    /// The arguments that tell worker `process` of our binary its part.
    pub(crate) fn worker_args(&self, process: u32) -> Vec<String> {
        let mut args = vec![
            "--tasks".to_owned(),
            self.tasks.to_string(),
            "--process".to_owned(),
            process.to_string(),
            "--start-ns".to_owned(),
            self.window.start_ns.to_string(),
            "--until-ns".to_owned(),
            self.window.until_ns.to_string(),
        ];
        if let Workload::Rounds { work } = self.workload {
            args.push("--rounds".to_owned());
            if !work.is_zero() {
                args.push("--work".to_owned());
                args.push(humantime::format_duration(work).to_string());
            }
        }
        args
    }
}

/// The commands that start our contending workers.
pub(crate) fn our_workers(
    exe: &Path,
    target: &Target,
    lock: &LockName,
    layout: Layout,
) -> Vec<Command> {
    (0..layout.processes)
        .map(|process| {
            let mut command = Command::new(exe);
            command
                .args(["worker", "--backend", &target.url, "--lock", lock.as_str()])
                .args(layout.worker_args(process));
            command
        })
        .collect()
}

/// Prints one line of a worker's report.
pub(crate) fn print_line(line: &Line) -> Outcome<()> {
    println!(
        "{}",
        serde_json::to_string(line).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// What one task's attempt to take the lock once came to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Take {
    /// It held the lock from `acquired_at_ns` to `released_at_ns`.
    Held {
        acquired_at_ns: u64,
        released_at_ns: u64,
        token: u64,
        /// The release failed (the hold still counts).
        release_failed: bool,
    },
    /// The window closed before it got the lock.
    TimedOut,
    /// The acquire call failed; the task may try again.
    Failed,
}

/// Takes a lock once, waiting at most `left`, holds it for `work` (see
/// [`hold_then_release`]) and releases it: one per contender (our client,
/// the Rust peer).
pub(crate) trait Taker: Clone + Send + Sync + 'static {
    fn take_once(&self, left: Duration, work: Duration) -> impl Future<Output = Take> + Send;

    /// The taker of task `task` of its process: this one, unless the
    /// tasks of a process take different claims.
    fn for_task(&self, _task: u32) -> Self {
        self.clone()
    }

    /// What this taker holds, as its holds report it.
    fn kind(&self) -> LockKind {
        LockKind::Exclusive
    }
}

/// Holds a lock just granted for `work` (a sleep standing for the work a
/// lock protects), then releases it with `release`, which says whether the
/// release failed: one hold, timed from the grant to the release call, so
/// that a hand-off still runs from the release call to the next grant.
pub(crate) async fn hold_then_release(
    work: Duration,
    token: u64,
    release: impl Future<Output = bool>,
) -> Take {
    let acquired_at_ns = now_ns();
    if !work.is_zero() {
        tokio::time::sleep(work).await;
    }
    let released_at_ns = now_ns();
    let release_failed = release.await;
    Take::Held {
        acquired_at_ns,
        released_at_ns,
        token,
        release_failed,
    }
}

/// Our client on one name, taking `claim`, which its process's `mix`
/// chose for the task.
#[derive(Debug, Clone)]
struct OurTaker {
    client: LockClient,
    name: LockName,
    mix: Mix,
    claim: Claim,
}

impl Taker for OurTaker {
    async fn take_once(&self, left: Duration, work: Duration) -> Take {
        let guard = match self
            .client
            .acquire_with(
                &self.name,
                AcquireOptions::new().claim(self.claim).timeout(left),
            )
            .await
        {
            Ok(guard) => guard,
            Err(distlock::Error::Timeout { .. }) => return Take::TimedOut,
            Err(_) => return Take::Failed,
        };
        let token = guard.fencing_token();
        hold_then_release(work, token, async { guard.release().await.is_err() }).await
    }

    fn for_task(&self, task: u32) -> Self {
        Self {
            claim: self.mix.claim(task),
            ..self.clone()
        }
    }

    fn kind(&self) -> LockKind {
        self.claim.kind()
    }
}

/// One task's holds and failed calls.
type TaskLog = (Vec<Hold>, u64);

/// Runs `tasks` tasks of worker `process` that take the lock through
/// `taker` within `window`: over and over (the tight loop), or, in rounds,
/// exactly once per round, a round starting at each `go` line on standard
/// input and ending with a [`Line::RoundDone`] on standard output, each
/// holding the lock for the workload's work. Returns every hold and the
/// number of failed calls.
pub(crate) async fn drive<T: Taker>(
    taker: T,
    tasks: u32,
    process: u32,
    window: Window,
    workload: Workload,
) -> Outcome<TaskLog> {
    let (mut holds, mut errors) = (Vec::new(), 0);
    let work = workload.work();
    if !workload.rounds() {
        sleep_until_ns(window.start_ns).await;
        let handles: Vec<_> = (0..tasks)
            .map(|task| {
                let taker = taker.for_task(task);
                tokio::spawn(async move {
                    take_until(&taker, process, task, 0, window, false, work).await
                })
            })
            .collect();
        for handle in handles {
            let (task_holds, task_errors) = handle.await.map_err(|e| e.to_string())?;
            holds.extend(task_holds);
            errors += task_errors;
        }
        return Ok((holds, errors));
    }
    let mut commands = BufReader::new(tokio::io::stdin()).lines();
    let mut round = 0;
    while let Some(command) = commands.next_line().await.map_err(|e| e.to_string())? {
        if command.trim() != "go" {
            break;
        }
        round += 1;
        let handles: Vec<_> = (0..tasks)
            .map(|task| {
                let taker = taker.for_task(task);
                tokio::spawn(async move {
                    take_until(&taker, process, task, round, window, true, work).await
                })
            })
            .collect();
        for handle in handles {
            let (task_holds, task_errors) = handle.await.map_err(|e| e.to_string())?;
            holds.extend(task_holds);
            errors += task_errors;
        }
        print_line(&Line::RoundDone(round))?;
    }
    Ok((holds, errors))
}

/// One task: takes the lock until the window closes, or (`once`) until it
/// has held it once, holding it for `work` each time.
async fn take_until<T: Taker>(
    taker: &T,
    process: u32,
    task: u32,
    round: u32,
    window: Window,
    once: bool,
    work: Duration,
) -> TaskLog {
    let (mut holds, mut errors) = (Vec::new(), 0);
    loop {
        // When this task asks: the order in which tasks asked is what a
        // first come, first served lock serves them in.
        let now = now_ns();
        if now >= window.until_ns {
            break;
        }
        let (take, first_ask) =
            asking::timed(taker.take_once(Duration::from_nanos(window.until_ns - now), work)).await;
        match take {
            Take::Held {
                acquired_at_ns,
                released_at_ns,
                token,
                release_failed,
            } => {
                errors += u64::from(release_failed);
                holds.push(Hold {
                    asked_at_ns: now,
                    sent_ns: first_ask.sent_ns(),
                    in_line_ns: first_ask.in_line_ns(),
                    acquired_at_ns,
                    released_at_ns,
                    token,
                    process,
                    task,
                    round,
                    kind: taker.kind(),
                });
                if once {
                    break;
                }
            }
            Take::TimedOut => break,
            Take::Failed => {
                errors += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    (holds, errors)
}

/// Prints a worker's final report: its holds, the commands it counted
/// itself (if any), and its failed calls.
pub(crate) fn report_worker((holds, errors): TaskLog, commands: Option<Counts>) -> Outcome<()> {
    for hold in holds {
        print_line(&Line::Hold(hold))?;
    }
    if let Some(commands) = commands {
        print_line(&Line::Commands(commands))?;
    }
    print_line(&Line::Errors(errors))
}

/// One worker process of ours: `tasks` tasks sharing one client take the
/// lock within the window (see [`drive`]), each the claim `mix` gives it,
/// then report as JSON lines.
pub(crate) async fn worker(
    url: &str,
    lock: &str,
    tasks: u32,
    process: u32,
    window: Window,
    workload: Workload,
    mix: Mix,
) -> Outcome<()> {
    let target = Target::open(url).await?;
    let taker = OurTaker {
        client: LockClient::new(
            asking::recording(target.backend.clone()),
            LockOptions::default(),
        ),
        name: LockName::new(lock).map_err(|e| e.to_string())?,
        mix,
        claim: mix.claim(0),
    };
    let before = in_process_counts(&target).await?;
    let log = drive(taker, tasks, process, window, workload).await?;
    let after = in_process_counts(&target).await?;
    let commands = match (before, after) {
        (Some(before), Some(after)) => Some(after.since(&before)),
        _ => None,
    };
    report_worker(log, commands)
}

/// The commands this process counted itself: MongoDB's command monitoring.
/// memcached's are counted by the parent from the server's `stats`.
pub(crate) async fn in_process_counts(target: &Target) -> Outcome<Option<Counts>> {
    match target.server {
        Server::Mongo { .. } => target.counts().await,
        _ => Ok(None),
    }
}

/// Many locks held by one process for a while.
#[derive(Debug, Clone)]
pub(crate) struct HoldMany {
    pub(crate) locks: usize,
    pub(crate) held_for: Duration,
    pub(crate) lease: Duration,
    pub(crate) extend_every: Duration,
    pub(crate) acquire_time: Duration,
    pub(crate) extend_calls: u64,
    pub(crate) extended_leases: u64,
    /// Renewals of the client's session, for a backend that keeps one
    /// (etcd): each keeps every lease at once.
    pub(crate) session_renewals: u64,
    /// Server commands while the locks were held, where counted.
    pub(crate) commands: Option<Counts>,
    pub(crate) lost: usize,
    pub(crate) cpu: Duration,
    pub(crate) rss_before_kib: u64,
    pub(crate) rss_held_kib: u64,
}

impl HoldMany {
    pub(crate) fn per_second(&self, n: u64) -> f64 {
        n as f64 / self.held_for.as_secs_f64()
    }

    /// How many extension cadences fit in the hold.
    pub(crate) fn cadences(&self) -> f64 {
        self.held_for.as_secs_f64() / self.extend_every.as_secs_f64()
    }
}

/// How many acquisitions and releases the many-locks scenario keeps in
/// flight while it takes and gives back its locks.
const MANY_IN_FLIGHT: usize = 64;

/// Holds `locks` locks for `held_for` with a `lease`, counting the calls
/// core makes to keep them and the commands the server receives meanwhile.
pub(crate) async fn hold_many(
    target: &Target,
    locks: usize,
    held_for: Duration,
    lease: Duration,
) -> Outcome<HoldMany> {
    // A session backend (etcd) serves one lease length per session: give
    // this scenario's lease a backend, and a session, of its own.
    let backend = if target.backend.session().is_some() {
        distlock::open(&target.url)
            .await
            .map_err(|e| format!("{}: {e}", target.shown))?
    } else {
        target.backend.clone()
    };
    let (counting, calls) = counting(backend);
    let options = LockOptions::builder()
        .lease(lease)
        .build()
        .map_err(|e| e.to_string())?;
    let extend_every = options.extend_every();
    let client = LockClient::new(counting, options);
    let prefix = bench_name("many");
    let rss_before_kib = rss_kib();
    let started = Instant::now();
    let guards: Vec<_> = futures::stream::iter(0..locks)
        .map(|i| {
            let client = client.clone();
            let name = LockName::new(format!("{prefix}-{i}"));
            async move {
                let name = name.map_err(|e| e.to_string())?;
                client
                    .try_acquire(&name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "a fresh lock was held".to_owned())
            }
        })
        .buffer_unordered(MANY_IN_FLIGHT)
        .collect::<Vec<Outcome<_>>>()
        .await
        .into_iter()
        .collect::<Outcome<_>>()?;
    let acquire_time = started.elapsed();
    let (batches_before, leases_before, renewals_before) = (
        Calls::get(&calls.extend_batches),
        Calls::get(&calls.extended_leases),
        Calls::get(&calls.session_renewals),
    );
    // Counts published late would mix the acquisitions into the hold.
    let commands_before = if target.counts_published_late() {
        None
    } else {
        target.counts().await?
    };
    let cpu_before = cpu_time();
    tokio::time::sleep(held_for).await;
    let cpu = cpu_time().saturating_sub(cpu_before);
    let commands = match commands_before {
        Some(before) => target
            .counts()
            .await?
            .map(|after| target.counted_between(&before, &after)),
        None => None,
    };
    let extend_calls = Calls::get(&calls.extend_batches) - batches_before;
    let extended_leases = Calls::get(&calls.extended_leases) - leases_before;
    let session_renewals = Calls::get(&calls.session_renewals) - renewals_before;
    let rss_held_kib = rss_kib();
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    futures::stream::iter(guards)
        .map(|guard| async move {
            let _ = guard.release().await;
        })
        .buffer_unordered(MANY_IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
    target.forget(prefix.as_str()).await;
    Ok(HoldMany {
        locks,
        held_for,
        lease,
        extend_every,
        acquire_time,
        extend_calls,
        extended_leases,
        session_renewals,
        commands,
        lost,
        cpu,
        rss_before_kib,
        rss_held_kib,
    })
}

/// This process's user plus system CPU time, from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the parenthesised command name: utime and stime
            // are the 12th and 13th.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split(' ').collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    Duration::from_secs_f64(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

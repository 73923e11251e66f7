//! The uncontended scenario: one name taken and released as fast as
//! possible, in alternating rounds, by every contender in turn.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::backend::Backend;
use distlock::{LockClient, LockOptions};

use crate::commands::Counts;
pub(crate) use crate::contenders::{Contender, Side};
use crate::cycles::{backend_cycles, client_cycles, raw_cycles};
use crate::durability::MeasuredServer;
use crate::etcd_peer::LockService;
use crate::etcdctl::Etcdctl;
use crate::names::bench_name;
use crate::outcome::Outcome;
use crate::pg_stats::PUBLISHED_AFTER_CLOSE;
use crate::pg_steps::{PgSteps, Step};
use crate::process_cpu::cpu_time;
use crate::quiet::Quiet;
use crate::target::{Server, Target};
use crate::variants::MongoVariants;
use crate::{peers, pg_counts, pg_peer, redis_peers};

/// Uncontended results: one side per contender, the physical baseline
/// first.
#[derive(Debug, Clone)]
pub(crate) struct Uncontended {
    pub(crate) sides: Vec<Side>,
    /// How the wait for a quiet machine before the rounds went.
    pub(crate) quiet: Option<Quiet>,
    /// The settings of each server beside the target's that the client
    /// also ran on ([`Contender::ClientBeside`]).
    pub(crate) beside: Vec<String>,
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
            .or_else(|| self.side(Contender::ObjectStoreRawPair))
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
/// advisory lock on PostgreSQL, the raw pair, rslock and redlock on Redis,
/// the raw conditional-put pair on an object store;
/// and the client again on each server `beside` the target's. Where the
/// server publishes its counts late (PostgreSQL), rounds this short cannot
/// be counted apart: each contender is counted in a pass of its own after
/// the rounds instead (see [`pg_counts`]). The rounds on a server beside
/// are not counted.
pub(crate) async fn uncontended(
    target: &Target,
    seconds: Duration,
    with_peer: bool,
    etcdctl: Option<&str>,
    beside: &[&MeasuredServer],
) -> Outcome<Uncontended> {
    let name = bench_name("uncontended");
    let mut contenders = vec![Contender::BackendCalls, Contender::Client];
    let mut beside_clients = Vec::new();
    for server in beside {
        let backend = distlock::open(&server.url)
            .await
            .map_err(|e| format!("{}: {e}", distlock::redact(&server.url)))?;
        contenders.push(Contender::ClientBeside(beside_clients.len()));
        beside_clients.push(LockClient::new(backend, LockOptions::default()));
    }
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
    let object_store = match &target.server {
        Server::ObjectStore(server) => Some(server),
        _ => None,
    };
    if object_store.is_some() {
        contenders.insert(0, Contender::ObjectStoreRawPair);
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
    let mut steps = match with_peer {
        true => PgSteps::open(target, &name).await?,
        false => None,
    };
    if steps.is_some() {
        contenders.extend(Step::ALL.map(Contender::PgStep));
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
            counted_cycles: 0,
            server_ops: None,
            server_cpu: None,
            request_micros: None,
            client_cpu: None,
            rounds: Vec::with_capacity(ROUNDS as usize),
        })
        .collect();
    let count = sides.len();
    for index in 0..ROUNDS as usize {
        // Each round starts with the next contender, so that none always
        // runs first (after the server counts are read) or last.
        for turn in 0..count {
            let side = &mut sides[(index + turn) % count];
            // Only the target's own server is counted.
            let here = !matches!(side.contender, Contender::ClientBeside(_));
            // The server's count is read first, so that the command that
            // reads it (MongoDB's `serverStatus`) is not counted as the
            // contender's.
            let ops_before = if here {
                target.server_ops().await
            } else {
                None
            };
            let before = if counted && here {
                target.counts().await?
            } else {
                None
            };
            // Read closest to the round, so that the reads of the counts
            // fall outside it.
            let cpu_before = if here {
                target.server_cpu().await
            } else {
                None
            };
            let times_before = target.request_micros().filter(|_| here);
            let client_cpu_before = cpu_time();
            let started = Instant::now();
            let cycles = match side.contender {
                Contender::Client => client_cycles(&client, &name, round).await?,
                Contender::ClientBeside(server) => {
                    client_cycles(&beside_clients[server], &name, round).await?
                }
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
                Contender::PgStep(step) => {
                    let steps = steps.as_mut().ok_or("no advisory-mode steps")?;
                    steps.cycles(step, round).await?
                }
                Contender::RedisRawPair => {
                    let server = redis.ok_or("the raw pair needs a Redis target")?;
                    server.raw_cycles(&name, round).await?
                }
                Contender::ObjectStoreRawPair => {
                    let server = object_store.ok_or("the raw pair needs an object store")?;
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
            if side.contender != Contender::Etcdctl {
                *side.client_cpu.get_or_insert(Duration::ZERO) +=
                    cpu_time().saturating_sub(client_cpu_before);
            }
            if let (Some(before), Some(after)) = (cpu_before, target.server_cpu().await) {
                *side.server_cpu.get_or_insert(Duration::ZERO) += after.saturating_sub(before);
            }
            if let (Some(before), Some(after)) = (times_before, target.request_micros()) {
                side.request_micros
                    .get_or_insert_with(Counts::default)
                    .add(&after.since(&before));
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
                side.counted_cycles += cycles;
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
        if let Some(steps) = steps {
            steps.close().await?;
        }
        if let Some(connection) = advisory {
            let _ = sqlx::Connection::close(connection).await;
        }
        tokio::time::sleep(PUBLISHED_AFTER_CLOSE).await;
        pg_counts::count_transactions(target, &name, with_peer, &mut sides).await?;
    }
    Ok(Uncontended {
        sides,
        quiet: None,
        beside: beside
            .iter()
            .map(|server| server.settings.clone())
            .collect(),
    })
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

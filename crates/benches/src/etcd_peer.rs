//! etcd's own lock service as a peer, measured against the same member:
//! the `Lock` and `Unlock` RPCs (`v3lockpb.Lock`) through `etcd-client`'s
//! `lock_client()` (feature `etcd-client-peer`).
//!
//! A `Lock` call names a lease that the lock's key hangs on, and blocks on
//! the server until the lock is granted. As etcd's concurrency sessions do,
//! each contender grants its lease once, up front, and keeps it alive on a
//! keepalive stream every third of its TTL; a cycle is then one `Lock` and
//! one `Unlock`, against our acquire and release. Calls with the same lease
//! count as one acquisition, so every task that contends has a lease of its
//! own (sharing its process's connection).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::LockName;
use etcd_client::{Client, LockOptions};
use tokio::process::Command;

use crate::outcome::Outcome;
use crate::target::{Server, Target};
use crate::worker::{Layout, Take, Taker, WorkerArgs, drive, hold_then_release, report_worker};

/// Whether this build has the peer.
pub(crate) const BUILT: bool = true;

/// The TTL of the peer's leases: the lease of our locks.
const LEASE_TTL: Duration = distlock::LockOptions::DEFAULT_LEASE;

/// A client of one etcd cluster, for the peer.
pub(crate) async fn connect(url: &str) -> Outcome<Client> {
    let config = distlock::etcd::EtcdConfig::parse(url).map_err(|e| e.to_string())?;
    let endpoints: Vec<String> = config
        .endpoints
        .iter()
        .map(|endpoint| format!("http://{endpoint}"))
        .collect();
    Client::connect(endpoints, None)
        .await
        .map_err(|e| format!("etcd Lock RPC peer: {e}"))
}

/// An etcd lease, kept alive by a task of its own until dropped.
pub(crate) struct KeptLease {
    pub(crate) id: i64,
    _keepalive: AbortOnDrop,
}

/// A task that ends when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl KeptLease {
    /// Grants a lease of [`LEASE_TTL`] and keeps it alive, one keepalive
    /// every third of the TTL on one stream, as etcd's Go client does.
    pub(crate) async fn grant(client: &Client) -> Outcome<Self> {
        let mut leases = client.lease_client();
        let ttl = i64::try_from(LEASE_TTL.as_secs()).unwrap_or(i64::MAX);
        let id = leases
            .grant(ttl, None)
            .await
            .map_err(|e| format!("etcd Lock RPC peer, granting a lease: {e}"))?
            .id();
        let keepalive = AbortOnDrop(tokio::spawn(async move {
            // Opening the stream sends the first keepalive.
            let Ok((mut keeper, mut replies)) = leases.keep_alive(id).await else {
                return;
            };
            loop {
                tokio::time::sleep(LEASE_TTL / 3).await;
                if keeper.keep_alive().await.is_err() || replies.message().await.is_err() {
                    return;
                }
            }
        }));
        Ok(Self {
            id,
            _keepalive: keepalive,
        })
    }

    /// Revokes the lease, so that no key of it outlives the run.
    pub(crate) async fn revoke(self, client: &Client) {
        let _ = client.lease_client().revoke(self.id).await;
    }
}

/// The Lock RPC peer of the uncontended scenario: one client and one lease
/// for all its rounds.
pub(crate) struct LockService {
    client: Client,
    lease: KeptLease,
}

impl LockService {
    /// Connects to `target`'s etcd and grants the lease; `None` for other
    /// backends.
    pub(crate) async fn open(target: &Target) -> Outcome<Option<Self>> {
        if !matches!(target.server, Server::Etcd(_)) {
            return Ok(None);
        }
        let client = connect(&target.url).await?;
        let lease = KeptLease::grant(&client).await?;
        Ok(Some(Self { client, lease }))
    }

    /// `Lock` and `Unlock` on `name`, as often as `seconds` allows.
    pub(crate) async fn cycles(&self, name: &LockName, seconds: Duration) -> Outcome<u64> {
        let mut lock = self.client.lock_client();
        let fail = |e: etcd_client::Error| format!("etcd Lock RPC: {e}");
        let started = Instant::now();
        let mut cycles = 0u64;
        while started.elapsed() < seconds {
            let options = LockOptions::new().with_lease(self.lease.id);
            let granted = lock
                .lock(name.as_str(), Some(options))
                .await
                .map_err(fail)?;
            lock.unlock(granted.key().to_vec()).await.map_err(fail)?;
            cycles += 1;
        }
        Ok(cycles)
    }

    /// Gives the lease back.
    pub(crate) async fn close(self) {
        self.lease.revoke(&self.client).await;
    }
}

/// The commands that start the Lock RPC peer's contending workers.
pub(crate) fn workers(exe: &Path, target: &Target, lock: &str, layout: Layout) -> Vec<Command> {
    layout.commands(exe, "etcd-peer-worker", &target.url, lock)
}

/// One task's side of the peer: its process's client, and its own lease.
#[derive(Clone)]
struct LockRpcTaker {
    client: Client,
    name: String,
    /// Every task's lease, by task.
    leases: Arc<Vec<i64>>,
    lease: i64,
}

impl Taker for LockRpcTaker {
    async fn take_once(&self, left: Duration, work: Duration) -> Take {
        let mut lock = self.client.lock_client();
        let options = LockOptions::new().with_lease(self.lease);
        // The call waits on the server; dropping it at the end of the
        // window cancels it, and the server deletes the waiter's key.
        let key =
            match tokio::time::timeout(left, lock.lock(self.name.as_str(), Some(options))).await {
                Err(_) => return Take::TimedOut,
                Ok(Err(_)) => return Take::Failed,
                Ok(Ok(granted)) => granted.key().to_vec(),
            };
        // The reply carries no fencing token (the key's create revision
        // would be one, at the cost of a read).
        hold_then_release(work, 0, async move { lock.unlock(key).await.is_err() }).await
    }

    fn for_task(&self, task: u32) -> Self {
        Self {
            lease: self.leases[task as usize % self.leases.len()],
            ..self.clone()
        }
    }
}

/// One worker process of the Lock RPC peer: one client, a lease per task,
/// `tasks` tasks taking the lock within the window; reports like ours. Its
/// requests are counted by the parent, from the member's metrics.
pub(crate) async fn worker(args: &WorkerArgs) -> Outcome<()> {
    let client = connect(&args.backend).await?;
    let mut leases = Vec::new();
    for _ in 0..args.tasks.max(1) {
        leases.push(KeptLease::grant(&client).await?);
    }
    let taker = LockRpcTaker {
        client: client.clone(),
        name: args.lock.clone(),
        leases: Arc::new(leases.iter().map(|lease| lease.id).collect()),
        lease: leases[0].id,
    };
    let log = drive(taker, args).await?;
    for lease in leases {
        lease.revoke(&client).await;
    }
    report_worker(log, None)
}

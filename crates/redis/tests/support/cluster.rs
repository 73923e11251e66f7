//! A Redis Cluster of the test's own: masters, and one replica each when
//! asked, each an [`OwnServer`] with a cluster bus port of its own. The
//! slots are shared out in equal ranges (`CLUSTER ADDSLOTSRANGE`), the
//! nodes joined (`CLUSTER MEET`), the replicas attached (`CLUSTER
//! REPLICATE`), as `redis-cli --cluster create` does, but with each
//! replica's master known to the test.

use std::time::{Duration, Instant};

use distlock_redis::redis;
use redis::aio::MultiplexedConnection;

use super::tls::Certificates;
use super::{OwnServer, free_port};

/// How many slots a Redis Cluster has.
const SLOTS: u32 = 16_384;

/// How long the cluster may take to form.
const FORMING: Duration = Duration::from_secs(60);

/// The cluster; every node is killed when it is dropped.
pub struct OwnCluster {
    /// The masters, in the order of their slot ranges.
    pub masters: Vec<OwnServer>,
    /// `replicas[i]` replicates `masters[i]`, when the cluster has replicas.
    pub replicas: Vec<OwnServer>,
    /// Each master's node id.
    pub ids: Vec<String>,
    /// `?ca=` for a cluster that serves TLS alone.
    ca: Option<String>,
}

impl OwnCluster {
    /// Starts `masters` masters, and one replica each if `with_replicas`,
    /// over TLS alone if `tls` names certificates, each with `args` added;
    /// returns once every node sees every slot served and every replica
    /// is in sync with its master.
    pub async fn start(
        masters: usize,
        with_replicas: bool,
        tls: Option<&Certificates>,
        args: &[&str],
    ) -> Self {
        let count = if with_replicas { masters * 2 } else { masters };
        let mut servers = Vec::new();
        let mut buses = Vec::new();
        for _ in 0..count {
            let bus = free_port().to_string();
            let mut all = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                &bus,
            ];
            if tls.is_some() {
                all.extend(["--tls-cluster", "yes", "--tls-replication", "yes"]);
            }
            all.extend(args);
            let server = match tls {
                Some(certificates) => OwnServer::start_tls(certificates, &all).await,
                None => OwnServer::start(&all).await,
            };
            servers.push(server);
            buses.push(bus);
        }
        let mut connections = Vec::new();
        let mut ids = Vec::new();
        for server in &servers {
            let mut connection = server.connection().await;
            let id: String = query(&mut connection, &["CLUSTER", "MYID"]).await;
            connections.push(connection);
            ids.push(id);
        }

        for (at, connection) in connections[..masters].iter_mut().enumerate() {
            // Distinct epochs, so that no collision has to be resolved.
            let epoch = (at + 1).to_string();
            let () = query(connection, &["CLUSTER", "SET-CONFIG-EPOCH", &epoch]).await;
            let (first, last) = range(at, masters);
            let (first, last) = (first.to_string(), last.to_string());
            let () = query(connection, &["CLUSTER", "ADDSLOTSRANGE", &first, &last]).await;
        }
        for (server, bus) in servers.iter().zip(&buses).skip(1) {
            let port = server.port().to_string();
            let () = query(
                &mut connections[0],
                &["CLUSTER", "MEET", "127.0.0.1", &port, bus],
            )
            .await;
        }
        let known = format!("cluster_known_nodes:{count}");
        until_every(
            &mut connections,
            "every node knows every other",
            |_, info| info.contains(&known),
        )
        .await;
        if with_replicas {
            for at in 0..masters {
                let master = ids[at].clone();
                // The replica must know its master's role first.
                let started = Instant::now();
                loop {
                    let attached: redis::RedisResult<()> = redis::cmd("CLUSTER")
                        .arg("REPLICATE")
                        .arg(&master)
                        .query_async(&mut connections[masters + at])
                        .await;
                    match attached {
                        Ok(()) => break,
                        Err(error) => assert!(
                            started.elapsed() < FORMING,
                            "CLUSTER REPLICATE {master}: {error}"
                        ),
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        until_every(&mut connections, "the cluster is formed", |at, info| {
            info.contains("cluster_state:ok")
                && info.contains(&known)
                && (at < masters || info.contains("master_link_status:up"))
        })
        .await;

        let replicas = servers.split_off(masters);
        Self {
            masters: servers,
            replicas,
            ids: ids[..masters].to_vec(),
            ca: tls.map(|certificates| certificates.ca().display().to_string()),
        }
    }

    /// `redis://` (or `rediss://…&ca=`) with every master as a seed, in
    /// cluster mode.
    pub fn url(&self) -> String {
        let scheme = if self.ca.is_some() { "rediss" } else { "redis" };
        let seeds: Vec<String> = self
            .masters
            .iter()
            .map(|master| format!("127.0.0.1:{}", master.port()))
            .collect();
        let mut url = format!("{scheme}://{}?mode=cluster", seeds.join(","));
        if let Some(ca) = &self.ca {
            url.push_str(&format!("&ca={ca}"));
        }
        url
    }

    /// Which master serves `slot`, as the cluster was made.
    pub fn master_of(&self, slot: u16) -> usize {
        (0..self.masters.len())
            .find(|at| {
                let (first, last) = range(*at, self.masters.len());
                (first..=last).contains(&u32::from(slot))
            })
            .expect("every slot is served")
    }
}

/// The slots of master `at` of `masters`: equal ranges, in order.
fn range(at: usize, masters: usize) -> (u32, u32) {
    let share = |at: usize| u32::try_from(at).unwrap() * SLOTS / u32::try_from(masters).unwrap();
    (share(at), share(at + 1) - 1)
}

/// `command` on `connection`, which must succeed.
pub async fn query<T: redis::FromRedisValue>(
    connection: &mut MultiplexedConnection,
    command: &[&str],
) -> T {
    let mut cmd = redis::cmd(command[0]);
    for arg in &command[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(connection)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", command.join(" ")))
}

/// Polls every node's `CLUSTER INFO` and `INFO replication` until `done`
/// holds of each (given the node's position), for at most [`FORMING`].
async fn until_every(
    connections: &mut [MultiplexedConnection],
    what: &str,
    done: impl Fn(usize, &str) -> bool,
) {
    let started = Instant::now();
    loop {
        let mut all = true;
        let mut last = String::new();
        for (at, connection) in connections.iter_mut().enumerate() {
            let cluster: String = query(connection, &["CLUSTER", "INFO"]).await;
            let replication: String = query(connection, &["INFO", "replication"]).await;
            let info = format!("{cluster}\n{replication}");
            if !done(at, &info) {
                all = false;
                last = info;
                break;
            }
        }
        if all {
            return;
        }
        assert!(
            started.elapsed() < FORMING,
            "{what}: not within {FORMING:?}; a node says:\n{last}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `count` fresh names (`prefix-…`) whose keys master `master` of
/// `cluster` serves, by the slot `connection`'s server computes
/// (`CLUSTER KEYSLOT`).
pub async fn names_on(
    cluster: &OwnCluster,
    backend: &distlock_redis::RedisBackend,
    connection: &mut MultiplexedConnection,
    master: usize,
    count: usize,
    prefix: &str,
) -> Vec<distlock_core::LockName> {
    let mut names = Vec::new();
    while names.len() < count {
        let name = super::unique(prefix);
        let key = backend.keys_of(&name).remove(0);
        let slot: u16 = query(connection, &["CLUSTER", "KEYSLOT", &key]).await;
        if cluster.master_of(slot) == master {
            names.push(name);
        }
    }
    names
}

//! Redis, in the three deployments the backend offers, as one campaign
//! backend: on the campaign's own single server, in the two settings that
//! decide what a restart does to its locks (with an append-only file
//! synced before every answer, [`REDIS`], where every acknowledged grant
//! and extension outlives a SIGKILL, and without persistence,
//! [`REDIS_VOLATILE`], where a restart forgets every lock); in quorum
//! mode on three servers ([`REDIS_QUORUM`], see [`quorum`]); and as a
//! cluster of three masters ([`REDIS_CLUSTER`], see [`cluster`]). What
//! they share (the server's command, the quiet backend, deleting a name's
//! keys) is in [`node`].

mod cluster;
mod node;
mod quorum;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::LockName;
use distlock::redis::RedisConfig;

use crate::answers::{ClockStep, Detour, OnRestart, SecretCase};
use crate::backends::closed_port;
use crate::campaign::{CampaignBackend, Server};
use crate::outcome::Outcome;
use crate::servers::ServerCommand;

/// Redis, in one of its deployments.
#[derive(Debug)]
pub(crate) struct Redis {
    deployment: Deployment,
}

/// How the campaign runs Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deployment {
    /// One server; `persistent`: with `appendonly yes` and `appendfsync
    /// always`, so the server keeps its data across a restart.
    One { persistent: bool },
    /// Quorum mode, on three servers without persistence.
    Quorum,
    /// Cluster mode, on three masters without persistence.
    Cluster,
}

/// Redis with `appendonly yes` and `appendfsync always`: the server writes
/// and fsyncs each write to its append-only file before it answers, so a
/// SIGKILL loses no acknowledged grant or extension, and the locks held
/// outlive a restart.
pub(crate) const REDIS: Redis = Redis {
    deployment: Deployment::One { persistent: true },
};

/// Redis without persistence (no snapshots, no append-only file), as the
/// test server runs and as many caches do: a restart forgets every lock,
/// and holders learn it at their next extension.
pub(crate) const REDIS_VOLATILE: Redis = Redis {
    deployment: Deployment::One { persistent: false },
};

/// Redis in quorum mode, on the harness's server and two companions.
pub(crate) const REDIS_QUORUM: Redis = Redis {
    deployment: Deployment::Quorum,
};

/// Redis in cluster mode: the harness's server serves every slot, and its
/// two companions are masters of the same cluster.
pub(crate) const REDIS_CLUSTER: Redis = Redis {
    deployment: Deployment::Cluster,
};

#[async_trait::async_trait]
impl CampaignBackend for Redis {
    fn name(&self) -> &'static str {
        match self.deployment {
            Deployment::One { persistent: true } => "Redis",
            Deployment::One { persistent: false } => "Redis without persistence",
            Deployment::Quorum => "Redis in quorum mode",
            Deployment::Cluster => "Redis in cluster mode",
        }
    }

    fn option_name(&self) -> &'static str {
        match self.deployment {
            Deployment::One { persistent: true } => "redis",
            Deployment::One { persistent: false } => "redis-volatile",
            Deployment::Quorum => "redis-quorum",
            Deployment::Cluster => "redis-cluster",
        }
    }

    fn server(&self) -> Option<ServerCommand> {
        Some(ServerCommand {
            binary_var: "REDIS_BIN",
            args: match self.deployment {
                Deployment::One { persistent: true } => node::persistent_args,
                Deployment::One { persistent: false } | Deployment::Quorum => node::volatile_args,
                Deployment::Cluster => cluster::node_args,
            },
            prepare: Some(match self.deployment {
                Deployment::One { .. } | Deployment::Quorum => node::prepare,
                Deployment::Cluster => cluster::prepare,
            }),
            run_as: None,
        })
    }

    fn url(&self, _scratch: &Path, address: &str, companions: &[String]) -> String {
        let mut hosts = vec![address.to_owned()];
        hosts.extend_from_slice(companions);
        match self.deployment {
            Deployment::One { .. } => format!("redis://{address}"),
            Deployment::Quorum => quorum::quorum_url("", &hosts),
            Deployment::Cluster => cluster::cluster_url("", &hosts),
        }
    }

    /// None for one server. Two for three servers in quorum mode: the
    /// fewest quorum mode takes, and the fewest in which one can be lost;
    /// and for three masters in cluster mode: the cluster tests' size.
    fn companions(&self) -> usize {
        match self.deployment {
            Deployment::One { .. } => 0,
            Deployment::Quorum | Deployment::Cluster => 2,
        }
    }

    /// A cluster is formed on its first start, and waited for after each
    /// ([`cluster::ready`]).
    fn ready(&self, server: &Server) -> Outcome<()> {
        match self.deployment {
            Deployment::Cluster => cluster::ready(server),
            Deployment::One { .. } | Deployment::Quorum => Ok(()),
        }
    }

    /// Restarts of a cluster's first node cost it its master's writable
    /// delay.
    fn restart_downtime(&self) -> Duration {
        match self.deployment {
            Deployment::Cluster => cluster::WRITABLE_DELAY,
            Deployment::One { .. } | Deployment::Quorum => Duration::ZERO,
        }
    }

    /// A majority: the one server, or two of three in quorum mode; in
    /// cluster mode, one proxy in front of the master of every slot, which
    /// the master announces while it stands.
    fn faulted_servers(&self) -> usize {
        match self.deployment {
            Deployment::One { .. } | Deployment::Cluster => 1,
            Deployment::Quorum => 2,
        }
    }

    fn route_through(&self, server: &Server, proxies: &[String]) -> Outcome<Option<Detour>> {
        match self.deployment {
            Deployment::Cluster => cluster::route_through(server, proxies),
            Deployment::One { .. } | Deployment::Quorum => Ok(None),
        }
    }

    fn one_client_faulted(&self) -> Result<(), &'static str> {
        match self.deployment {
            Deployment::Cluster => Err(cluster::ONE_ADDRESS),
            Deployment::One { .. } | Deployment::Quorum => Ok(()),
        }
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        let options = match self.deployment {
            // The deployment's `mode=` comes first in the other URLs.
            Deployment::One { .. } => '?',
            Deployment::Quorum | Deployment::Cluster => '&',
        };
        Ok(format!("{}{options}prefix={space}:", server.url()))
    }

    /// With the append-only file synced before each answer, the server
    /// comes back with every grant and extension it acknowledged, and with
    /// each lease's expiry as an absolute time on its clock. Without
    /// persistence it comes back empty, and says nothing: holders learn it
    /// at their next extension, as they do from a cluster's master. In
    /// quorum mode a restart empties one server of three; the other two
    /// keep every copy, a majority, and holders keep extending there.
    fn on_restart(&self) -> OnRestart {
        match self.deployment {
            Deployment::One { persistent: true } | Deployment::Quorum => OnRestart::Kept,
            Deployment::One { persistent: false } | Deployment::Cluster => OnRestart::Forgotten,
        }
    }

    fn semaphores(&self) -> Result<(), &'static str> {
        match self.deployment {
            Deployment::Quorum => Err(quorum::NO_SEMAPHORES),
            Deployment::One { .. } | Deployment::Cluster => Ok(()),
        }
    }

    /// A lease (each copy's, in quorum mode) is a key's `PX` expiry, to the
    /// millisecond on its server's clock: a dead holder's key is gone when
    /// its lease is, and a waiter is then granted (by a majority, in
    /// quorum mode).
    fn regrant_bound(&self, lease: Duration) -> Duration {
        lease
    }

    /// Once its subscriber connections are open (a majority of them, in
    /// quorum mode), whose handshake and the backend's own would otherwise
    /// be what takes the proxy's one shot, and with its scripts loaded on
    /// every server by a lock taken and given back through the proxy, so
    /// that the acquisition is one `EVALSHA` that the server runs, not a
    /// `NOSCRIPT` answer and a second try.
    async fn open_quiet(
        &self,
        url: &str,
        lease: Duration,
    ) -> Outcome<Arc<dyn distlock::backend::Backend>> {
        node::open_quiet(url, lease).await
    }

    /// `DEL` of every key of the name (its grants, their records, its
    /// waiting writers' marks and its token counter), as an operator or an
    /// eviction might: the keys the backend itself says the name has. On
    /// the one server, or the cluster's first node, which serves every
    /// slot; in quorum mode on every server, as an eviction everywhere
    /// would: tokens then come from the servers' clocks, which on one
    /// machine are one clock (the assumption docs/redis.md states).
    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        let addresses = match self.deployment {
            Deployment::Quorum => server.all_addresses(),
            Deployment::One { .. } | Deployment::Cluster => vec![server.address()],
        };
        node::delete_keys(server, &addresses, name).await
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        match self.deployment {
            Deployment::One { .. } => one_server_secret_cases(server, canary),
            Deployment::Quorum => quorum::secret_cases(server, canary),
            Deployment::Cluster => cluster::secret_cases(server, canary),
        }
    }

    fn parse_url(&self, url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
        Some((
            "`RedisConfig::parse`",
            RedisConfig::parse(url).map(|config| format!("{config:?}")),
        ))
    }

    /// Redis judges leases by its wall clock, but cannot run under
    /// libfaketime here.
    fn server_clock(&self) -> Result<ClockStep, &'static str> {
        Err(node::NO_FAKETIME)
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err(node::NOT_MEMCACHED)
    }
}

/// The URLs R12 tries on one server: a closed port, the server with a
/// user, or a password alone, and one the backend refuses.
///
/// # Errors
/// No closed port can be had.
fn one_server_secret_cases(server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
    Ok(vec![
        SecretCase::new(
            "bad host (a closed port)",
            format!("redis://alice:{canary}@127.0.0.1:{}", closed_port()?),
        ),
        SecretCase::new(
            "a user and password on a server without authentication",
            format!("redis://alice:{canary}@{}", server.address()),
        ),
        SecretCase::new(
            "a password alone on a server without authentication",
            format!("redis://:{canary}@{}", server.address()),
        ),
        SecretCase::new(
            "a URL the backend refuses",
            format!("redis://alice:{canary}@127.0.0.1:notaport"),
        ),
    ])
}

//! Redis, on the campaign's own single server, in the two settings that
//! decide what a restart does to its locks: with an append-only file
//! synced before every answer ([`REDIS`]), where every acknowledged grant
//! and extension outlives a SIGKILL, and without persistence
//! ([`REDIS_VOLATILE`]), where a restart forgets every lock.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::LockName;
use distlock::redis::{RedisBackend, RedisConfig, redis};

use super::{closed_port, warmed_up};
use crate::answers::{ClockStep, OnRestart, SecretCase};
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::servers::ServerCommand;

/// Redis with an append-only file.
#[derive(Debug)]
pub(crate) struct Redis {
    /// Whether the server keeps its data across a restart: `appendonly
    /// yes` with `appendfsync always`.
    persistent: bool,
}

/// Redis with `appendonly yes` and `appendfsync always`: the server writes
/// and fsyncs each write to its append-only file before it answers, so a
/// SIGKILL loses no acknowledged grant or extension, and the locks held
/// outlive a restart.
pub(crate) const REDIS: Redis = Redis { persistent: true };

/// Redis without persistence (no snapshots, no append-only file), as the
/// test server runs and as many caches do: a restart forgets every lock,
/// and holders learn it at their next extension.
pub(crate) const REDIS_VOLATILE: Redis = Redis { persistent: false };

/// The server's own directory, under the run's data directory.
fn data_dir(data: &Path) -> std::path::PathBuf {
    data.join("redis")
}

pub(super) fn prepare(data: &Path) -> Outcome<()> {
    std::fs::create_dir_all(data_dir(data))?;
    Ok(())
}

/// The arguments both settings share: loopback, the port, the data
/// directory, no snapshots, and the log on standard output (the campaign's
/// `server.log`).
fn common_args(port: u16, data: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    for (flag, value) in [
        ("--bind", "127.0.0.1".to_owned()),
        ("--port", port.to_string()),
        ("--daemonize", "no".to_owned()),
        ("--logfile", String::new()),
        ("--save", String::new()),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    args.push("--dir".into());
    args.push(data_dir(data).into());
    args
}

fn persistent_args(port: u16, data: &Path) -> Vec<OsString> {
    let mut args = common_args(port, data);
    args.extend(
        ["--appendonly", "yes", "--appendfsync", "always"]
            .into_iter()
            .map(OsString::from),
    );
    args
}

pub(super) fn volatile_args(port: u16, data: &Path) -> Vec<OsString> {
    let mut args = common_args(port, data);
    args.extend(["--appendonly", "no"].into_iter().map(OsString::from));
    args
}

#[async_trait::async_trait]
impl CampaignBackend for Redis {
    fn name(&self) -> &'static str {
        if self.persistent {
            "Redis"
        } else {
            "Redis without persistence"
        }
    }

    fn option_name(&self) -> &'static str {
        if self.persistent {
            "redis"
        } else {
            "redis-volatile"
        }
    }

    fn server(&self) -> Option<ServerCommand> {
        Some(ServerCommand {
            binary_var: "REDIS_BIN",
            args: if self.persistent {
                persistent_args
            } else {
                volatile_args
            },
            prepare: Some(prepare),
            run_as: None,
        })
    }

    fn url(&self, _scratch: &Path, address: &str, _companions: &[String]) -> String {
        format!("redis://{address}")
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok(format!("{}?prefix={space}:", server.url()))
    }

    /// With the append-only file synced before each answer, the server
    /// comes back with every grant and extension it acknowledged, and with
    /// each lease's expiry as an absolute time on its clock. Without
    /// persistence it comes back empty, and says nothing: holders learn it
    /// at their next extension.
    fn on_restart(&self) -> OnRestart {
        if self.persistent {
            OnRestart::Kept
        } else {
            OnRestart::Forgotten
        }
    }

    /// A lease is a key's `PX` expiry, to the millisecond on the server's
    /// clock: a dead holder's key is gone when its lease is.
    fn regrant_bound(&self, lease: Duration) -> Duration {
        lease
    }

    /// Once its subscriber connection is open (its handshake and the
    /// backend's own would otherwise be what takes the proxy's one shot),
    /// and with its scripts loaded by a lock taken and given back through
    /// the proxy, so that the acquisition is one `EVALSHA` that the server
    /// runs, not a `NOSCRIPT` answer and a second try.
    async fn open_quiet(
        &self,
        url: &str,
        lease: Duration,
    ) -> Outcome<Arc<dyn distlock::backend::Backend>> {
        open_quiet(url, lease).await
    }

    /// `DEL` of every key of the name (its grants, their records, its
    /// waiting writers' marks and its token counter), as an operator or an
    /// eviction might: the keys the backend itself says the name has.
    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        delete_keys(server, &[server.address()], name).await
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        Ok(vec![
            SecretCase {
                label: "bad host (a closed port)",
                url: format!("redis://alice:{canary}@127.0.0.1:{}", closed_port()?),
                note: "",
            },
            SecretCase {
                label: "a user and password on a server without authentication",
                url: format!("redis://alice:{canary}@{}", server.address()),
                note: "",
            },
            SecretCase {
                label: "a password alone on a server without authentication",
                url: format!("redis://:{canary}@{}", server.address()),
                note: "",
            },
            SecretCase {
                label: "a URL the backend refuses",
                url: format!("redis://alice:{canary}@127.0.0.1:notaport"),
                note: "",
            },
        ])
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
        Err(NO_FAKETIME)
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err(NOT_MEMCACHED)
    }
}

/// Why R13 cannot step a Redis server's clock.
pub(super) const NO_FAKETIME: &str = "Redis judges leases by its wall clock (`TIME`, `PX`), \
     but the packaged redis-server allocates with jemalloc, which calls `clock_gettime` before \
     libfaketime is ready, and the server hangs at start under it (a known clash between the \
     two, libfaketime issue 130); a redis-server built with libc's malloc would let R13 step it";

/// Why R10 does not apply to Redis.
pub(super) const NOT_MEMCACHED: &str = "memcached only; Redis judges leases to the millisecond \
     on its own clock (`PX`), the campaign's server has no `maxmemory` and so evicts nothing, \
     and what a restart does is R1's and R6's";

/// A backend at `url` whose subscriber connections are open, with its
/// scripts loaded by a lock taken and given back through `url`: R5's
/// proxy then meets one `EVALSHA` per server, which the server runs, not
/// a handshake, nor a `NOSCRIPT` answer and a second try.
///
/// # Errors
/// It cannot be opened, its wake-ups are not on within 10 s, or the lock
/// cannot be taken.
pub(super) async fn open_quiet(
    url: &str,
    lease: Duration,
) -> Outcome<Arc<dyn distlock::backend::Backend>> {
    let backend = Arc::new(RedisBackend::open(url).await?);
    let started = Instant::now();
    while !backend.wake_ups() {
        if started.elapsed() > Duration::from_secs(10) {
            return Err("the redis subscriber connections did not open within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    warmed_up(backend, lease).await
}

/// `DEL` of every key of `name` on each server at `addresses`: the keys
/// the backend opened on `server` says the name has (its grants, their
/// records, its waiting writers' marks and its token counter).
///
/// # Errors
/// A server cannot be reached.
pub(super) async fn delete_keys(
    server: &Server,
    addresses: &[String],
    name: &LockName,
) -> Outcome<()> {
    let backend = RedisBackend::open(&server.url()).await?;
    let keys = backend.keys_of(name);
    for address in addresses {
        let client = redis::Client::open(format!("redis://{address}"))?;
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("DEL")
            .arg(&keys)
            .query_async::<i64>(&mut connection)
            .await?;
    }
    Ok(())
}

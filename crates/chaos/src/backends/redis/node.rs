//! What the three Redis deployments share: how a server starts, how a
//! quiet backend is opened, and how a name's keys are deleted behind its
//! back.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::LockName;
use distlock::redis::{RedisBackend, redis};

use crate::backends::warmed_up;
use crate::campaign::Server;
use crate::outcome::Outcome;

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

pub(super) fn persistent_args(port: u16, data: &Path) -> Vec<OsString> {
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

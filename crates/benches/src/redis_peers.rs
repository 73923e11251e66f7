//! Redis: the server's command counts, the raw pair the backend is measured
//! against, and the Rust Redis locks measured beside it on the same server.
//!
//! - **The raw pair**: `SET key id NX PX lease` to take the lock and an
//!   owner-checked delete script (`GET`, and `DEL` when the value is ours)
//!   to give it back, on one multiplexed connection, on the backend's own
//!   key for the name: the least a Redis lock with an owner-checked release
//!   sends, and the uncontended baseline.
//! - **`rslock` 0.7.4**: the same `SET NX PX` and delete script, through its
//!   `LockManager` on one multiplexed connection per process. A try that
//!   finds the lock held sends the delete script too, sleeps a random time
//!   up to 200 ms, and tries again, three times; `acquire_no_guard` calls
//!   that in a loop until it is granted.
//! - **`redlock` 2.0.0**: the same two commands, synchronous, each on a
//!   connection it opens for that command alone; a try that finds the lock
//!   held also sends the delete script, and sleeps the thread a random time
//!   up to 200 ms, three times. Its calls run on Tokio's blocking threads.
//!
//! Neither peer has a fencing token, background extension or a loss signal.
//! Server commands are counted from the server's `INFO commandstats`.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock::redis::RedisBackend;
use distlock::redis::redis;
use distlock::{LockName, LockOptions};
use tokio::process::Command;

use crate::clock::now_ns;
use crate::commands::Counts;
use crate::outcome::Outcome;
use crate::worker::{Layout, Take, Taker, WorkerArgs, drive, hold_then_release, report_worker};

/// The owner-checked delete of the raw pair: the key goes only while it
/// holds our value.
const RELEASE_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
    return redis.call('DEL', KEYS[1]) else return 0 end";

/// The lease every Redis contender asks for.
const LEASE: Duration = LockOptions::DEFAULT_LEASE;

/// A Redis target under test: distlock's backend on it, and a connection
/// of the benchmark's own to each of its servers, for the raw pair (on the
/// first) and the servers' counters (summed over all of them).
#[derive(Clone)]
pub(crate) struct RedisServer {
    pub(crate) backend: Arc<RedisBackend>,
    connection: redis::aio::MultiplexedConnection,
    /// Every server's connection, the first one's included.
    servers: Vec<redis::aio::MultiplexedConnection>,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// The URL the Redis clients of the benchmark (the raw pair's, the peers')
/// open: distlock's URL without its options, which only distlock reads.
pub(crate) fn client_url(url: &str) -> &str {
    url.split_once('?').map_or(url, |(base, _)| base)
}

/// One URL per server of `url` (several in quorum mode), each with the
/// URL's scheme, credentials and database, and without its options.
fn server_urls(url: &str) -> Vec<String> {
    let base = client_url(url);
    let Some((scheme, rest)) = base.split_once("://") else {
        return vec![base.to_owned()];
    };
    let (user, rest) = match rest.rsplit_once('@') {
        Some((user, rest)) => (format!("{user}@"), rest),
        None => (String::new(), rest),
    };
    let (hosts, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let path = if path.is_empty() {
        String::new()
    } else {
        format!("/{path}")
    };
    hosts
        .split(',')
        .map(|host| format!("{scheme}://{user}{host}{path}"))
        .collect()
}

impl RedisServer {
    /// Opens distlock's backend at `url`, and a connection of its own.
    pub(crate) async fn open(url: &str) -> Outcome<Self> {
        let backend = RedisBackend::open(url).await.map_err(|e| e.to_string())?;
        let mut servers = Vec::new();
        for server in server_urls(url) {
            let client = redis::Client::open(server).map_err(|e| e.to_string())?;
            let connection = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?;
            servers.push(connection);
        }
        let connection = servers
            .first()
            .ok_or("a Redis URL names no server")?
            .clone();
        Ok(Self {
            backend: Arc::new(backend),
            connection,
            servers,
        })
    }

    /// The commands the servers have run so far, by name, from `INFO
    /// commandstats`, summed over every server: each command a script runs
    /// counts besides the `EVALSHA` that runs it. `INFO`, which reads them,
    /// is left out.
    pub(crate) async fn counts(&self) -> Outcome<Counts> {
        let mut total = Counts::default();
        for text in self.info_of_each("commandstats").await? {
            total.add(&parse_commandstats(&text));
        }
        Ok(total)
    }

    /// `INFO section` of every server, in order.
    async fn info_of_each(&self, section: &str) -> Outcome<Vec<String>> {
        let mut texts = Vec::with_capacity(self.servers.len());
        for connection in &self.servers {
            let mut connection = connection.clone();
            let text: String = redis::cmd("INFO")
                .arg(section)
                .query_async(&mut connection)
                .await
                .map_err(|e| format!("redis INFO {section}: {e}"))?;
            texts.push(text);
        }
        Ok(texts)
    }

    /// The server's version, from `INFO server`.
    pub(crate) async fn version(&self) -> Option<String> {
        let mut connection = self.connection.clone();
        let text: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut connection)
            .await
            .ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .map(|version| version.trim().to_owned())
    }

    /// The processor time the servers have used since they started,
    /// user and system (`INFO cpu`), summed over every server; `None` when
    /// one does not say.
    pub(crate) async fn cpu(&self) -> Option<Duration> {
        let mut total = 0.0;
        for text in self.info_of_each("cpu").await.ok()? {
            for field in ["used_cpu_user:", "used_cpu_sys:"] {
                total += text
                    .lines()
                    .find_map(|line| line.strip_prefix(field))?
                    .trim()
                    .parse::<f64>()
                    .ok()?;
            }
        }
        Some(Duration::from_secs_f64(total))
    }

    /// Uncontended cycles of the raw pair on the backend's own key for
    /// `name`, as often as `seconds` allows.
    pub(crate) async fn raw_cycles(&self, name: &LockName, seconds: Duration) -> Outcome<u64> {
        let key = self
            .backend
            .keys_of(name)
            .into_iter()
            .next()
            .ok_or("the backend names no key")?;
        let script = redis::Script::new(RELEASE_SCRIPT);
        let mut connection = self.connection.clone();
        let lease = LEASE.as_millis() as u64;
        let started = Instant::now();
        let mut cycles = 0u64;
        while started.elapsed() < seconds {
            let id = unique_value();
            let set: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&id)
                .arg("NX")
                .arg("PX")
                .arg(lease)
                .query_async(&mut connection)
                .await
                .map_err(|e| format!("redis SET NX PX: {e}"))?;
            if set.is_none() {
                return Err("an uncontended lock was held".into());
            }
            let deleted: i64 = script
                .key(&key)
                .arg(&id)
                .invoke_async(&mut connection)
                .await
                .map_err(|e| format!("redis delete script: {e}"))?;
            if deleted != 1 {
                return Err("a raw grant was gone before its release".into());
            }
            cycles += 1;
        }
        Ok(cycles)
    }
}

/// A value no other grant of this run has: the process and a counter.
fn unique_value() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:08x}{:016x}{:08x}",
        std::process::id(),
        now_ns(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `INFO commandstats` as counts by command name, without `info`.
fn parse_commandstats(text: &str) -> Counts {
    let mut counts = Counts::default();
    for line in text.lines() {
        let Some((name, fields)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|rest| rest.split_once(':'))
        else {
            continue;
        };
        if name == "info" {
            continue;
        }
        let calls = fields
            .split(',')
            .find_map(|field| field.strip_prefix("calls="))
            .and_then(|calls| calls.parse::<u64>().ok());
        if let Some(calls) = calls {
            counts.0.insert(name.to_owned(), calls);
        }
    }
    counts
}

/// rslock's lock manager on the server at `url`, its connection opened.
pub(crate) async fn rslock_manager(url: &str) -> Outcome<rslock::LockManager> {
    let manager = rslock::LockManager::new(vec![client_url(url).to_owned()]);
    // Its connection opens on first use: a lock taken and given back here,
    // so that no measurement pays for it.
    let warm = format!("bench-rslock-warm-{}", std::process::id());
    let lock = manager
        .lock(warm.as_bytes(), LEASE)
        .await
        .map_err(|e| format!("rslock: {e}"))?;
    manager.unlock(&lock).await;
    Ok(manager)
}

/// Uncontended cycles of rslock on `name`: `lock` and `unlock`.
pub(crate) async fn rslock_cycles(
    manager: &rslock::LockManager,
    name: &LockName,
    seconds: Duration,
) -> Outcome<u64> {
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < seconds {
        let lock = manager
            .lock(name.as_str().as_bytes(), LEASE)
            .await
            .map_err(|e| format!("rslock: {e}"))?;
        manager.unlock(&lock).await;
        cycles += 1;
    }
    Ok(cycles)
}

/// Uncontended cycles of redlock on `name`: `lock` and `unlock`, on a
/// blocking thread, since both block.
pub(crate) async fn redlock_cycles(url: &str, name: &LockName, seconds: Duration) -> Outcome<u64> {
    let manager = redlock::RedLock::new(vec![client_url(url).to_owned()]);
    let resource = name.as_str().as_bytes().to_vec();
    let lease = LEASE.as_millis() as usize;
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut cycles = 0u64;
        while started.elapsed() < seconds {
            let lock = manager
                .lock(&resource, lease)
                .map_err(|e| format!("redlock: {e}"))?
                .ok_or("redlock: an uncontended lock was held")?;
            manager.unlock(&lock);
            cycles += 1;
        }
        Ok(cycles)
    })
    .await
    .map_err(|e| e.to_string())?
}

/// A Redis peer, as its worker subcommand names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    Rslock,
    Redlock,
}

/// The commands that start `peer`'s contending workers.
pub(crate) fn workers(
    exe: &Path,
    url: &str,
    peer: Peer,
    lock: &str,
    layout: Layout,
) -> Vec<Command> {
    let subcommand = match peer {
        Peer::Rslock => "rslock-worker",
        Peer::Redlock => "redlock-worker",
    };
    layout.commands(exe, subcommand, url, lock)
}

/// rslock, shared by the tasks of one process: `acquire_no_guard` (its
/// own retry loop) until granted or the window closes, then `unlock`.
#[derive(Clone)]
struct RslockTaker {
    manager: rslock::LockManager,
    resource: Arc<Vec<u8>>,
}

impl Taker for RslockTaker {
    async fn take_once(&self, left: Duration, work: Duration) -> Take {
        let acquired = tokio::time::timeout(
            left,
            self.manager
                .acquire_no_guard(self.resource.as_slice(), LEASE),
        )
        .await;
        let lock = match acquired {
            Err(_) => return Take::TimedOut,
            Ok(Err(_)) => return Take::Failed,
            Ok(Ok(lock)) => lock,
        };
        // rslock's unlock says nothing of how it went; it has no token.
        hold_then_release(work, 0, async move {
            self.manager.unlock(&lock).await;
            false
        })
        .await
    }
}

/// redlock, shared by the tasks of one process: its `lock` (three tries)
/// until granted or the window closes, the work, and its `unlock`, all on
/// one blocking thread per attempt.
#[derive(Clone)]
struct RedlockTaker {
    manager: Arc<redlock::RedLock>,
    resource: Arc<Vec<u8>>,
}

impl Taker for RedlockTaker {
    async fn take_once(&self, left: Duration, work: Duration) -> Take {
        let manager = self.manager.clone();
        let resource = self.resource.clone();
        let lease = LEASE.as_millis() as usize;
        let taken = tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + left;
            let lock = loop {
                if Instant::now() >= deadline {
                    return Take::TimedOut;
                }
                match manager.lock(&resource, lease) {
                    Ok(Some(lock)) => break lock,
                    Ok(None) => {}
                    Err(_) => return Take::Failed,
                }
            };
            let acquired_at_ns = now_ns();
            if !work.is_zero() {
                std::thread::sleep(work);
            }
            let released_at_ns = now_ns();
            manager.unlock(&lock);
            Take::Held {
                acquired_at_ns,
                released_at_ns,
                token: 0,
                release_failed: false,
            }
        })
        .await;
        taken.unwrap_or(Take::Failed)
    }
}

/// One worker process of `peer`: `tasks` tasks take the lock within the
/// window, sharing one lock manager; reports like ours. Its commands are
/// counted by the parent, from the server.
pub(crate) async fn worker(peer: Peer, args: &WorkerArgs) -> Outcome<()> {
    let (url, resource) = (&args.backend, Arc::new(args.lock.as_bytes().to_vec()));
    let log = match peer {
        Peer::Rslock => {
            let taker = RslockTaker {
                manager: rslock_manager(url).await?,
                resource,
            };
            drive(taker, args).await?
        }
        Peer::Redlock => {
            let taker = RedlockTaker {
                manager: Arc::new(redlock::RedLock::new(vec![client_url(url).to_owned()])),
                resource,
            };
            drive(taker, args).await?
        }
    };
    report_worker(log, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_are_read_by_name_without_info() {
        let text = "# Commandstats\r\n\
            cmdstat_set:calls=12,usec=40,usec_per_call=3.33,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_evalsha:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n\
            cmdstat_info:calls=3,usec=9,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_broken:usec=1\r\n";
        let counts = parse_commandstats(text);
        assert_eq!(counts.0.get("set"), Some(&12));
        assert_eq!(counts.0.get("evalsha"), Some(&7));
        assert_eq!(counts.0.get("client|setinfo"), Some(&2));
        assert!(!counts.0.contains_key("info"));
        assert!(!counts.0.contains_key("broken"));
        assert_eq!(counts.total(), 21);
    }

    #[test]
    fn clients_get_the_url_without_distlock_options() {
        assert_eq!(
            client_url("redis://127.0.0.1:6379/2?prefix=b:"),
            "redis://127.0.0.1:6379/2"
        );
        assert_eq!(client_url("redis://h:1"), "redis://h:1");
    }
}

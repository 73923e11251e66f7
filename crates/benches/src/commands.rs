//! Counting the commands a server receives.
//!
//! - MongoDB: the driver's command monitoring. Every client the benchmarks
//!   build (in the parent and in every worker process) carries a
//!   [`MongoMonitor`], which counts each `CommandStartedEvent` by command
//!   name: `findAndModify`, `update`, `delete`, `getMore`, `aggregate`, ….
//!   The driver's own server monitoring (`hello` heartbeats on separate
//!   connections) is not reported to command monitoring, so it is not
//!   counted. As a cross-check, [`mongo_opcounters`] reads the server's
//!   `serverStatus` opcounters.
//! - memcached: deltas of the server's `stats`, summed over
//!   [`MEMCACHED_COMMANDS`].

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex, PoisonError};

use distlock::memcached::MemcachedBackend;
use distlock::mongodb::mongodb::Database;
use distlock::mongodb::mongodb::bson::{Bson, doc};
use distlock::mongodb::mongodb::event::EventHandler;
use distlock::mongodb::mongodb::event::command::CommandEvent;
use serde::{Deserialize, Serialize};

/// Commands by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Counts(pub(crate) BTreeMap<String, u64>);

impl Counts {
    /// All commands.
    pub(crate) fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// What was added since `earlier`.
    pub(crate) fn since(&self, earlier: &Counts) -> Counts {
        Counts(
            self.0
                .iter()
                .map(|(name, &n)| {
                    let before = earlier.0.get(name).copied().unwrap_or(0);
                    (name.clone(), n.saturating_sub(before))
                })
                .filter(|&(_, n)| n > 0)
                .collect(),
        )
    }

    /// Adds `other` to these counts.
    pub(crate) fn add(&mut self, other: &Counts) {
        for (name, n) in &other.0 {
            *self.0.entry(name.clone()).or_default() += n;
        }
    }

    /// Each command, per `unit` (one cycle, one acquisition, one second),
    /// largest first, as `findAndModify 1.00, update 1.00`.
    pub(crate) fn per(&self, unit: f64) -> String {
        let mut named: Vec<(&String, &u64)> = self.0.iter().filter(|(_, n)| **n > 0).collect();
        named.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut out = String::new();
        for (name, &n) in named {
            if !out.is_empty() {
                out.push_str(", ");
            }
            let _ = write!(out, "{name} {:.2}", n as f64 / unit);
        }
        if out.is_empty() {
            out.push_str("none");
        }
        out
    }
}

/// Counts the commands a MongoDB client sends, by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct MongoMonitor {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl MongoMonitor {
    /// The handler to put in the client's options.
    pub(crate) fn handler(&self) -> EventHandler<CommandEvent> {
        let counts = self.counts.clone();
        EventHandler::callback(move |event: CommandEvent| {
            if let CommandEvent::Started(started) = event {
                *counts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(started.command_name)
                    .or_default() += 1;
            }
        })
    }

    /// The commands counted so far.
    pub(crate) fn snapshot(&self) -> Counts {
        Counts(
            self.counts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// The `stats` counters whose sum is the number of commands memcached
/// executed, one per key: `mg` and `get`/`gets` count in `cmd_get`; `ms`,
/// `set`, `add` and `cas` in `cmd_set` (a CAS store also counts in
/// `cas_hits`, `cas_misses` or `cas_badval`, which are therefore left out);
/// `touch` in `cmd_touch`; `md` and `delete` in `delete_hits` or
/// `delete_misses`, conditional or not; `ma`, `incr` and `decr` in
/// `incr_*`/`decr_*`. memcached 1.6 does not count an `ma` that creates a
/// missing counter (`N` flag), nor `mn` or `stats`.
pub(crate) const MEMCACHED_COMMANDS: [&str; 9] = [
    "cmd_get",
    "cmd_set",
    "cmd_touch",
    "delete_hits",
    "delete_misses",
    "incr_hits",
    "incr_misses",
    "decr_hits",
    "decr_misses",
];

/// The [`MEMCACHED_COMMANDS`] counters now, summed over `backend`'s servers.
pub(crate) async fn memcached_counts(backend: &MemcachedBackend) -> Result<Counts, String> {
    let stats = backend.stats().await.map_err(|e| e.to_string())?;
    let mut counts = BTreeMap::new();
    for (_server, stats) in stats {
        for (name, value) in stats {
            if MEMCACHED_COMMANDS.contains(&name.as_str()) {
                let value: u64 = value
                    .parse()
                    .map_err(|_| format!("memcached stat {name} is not a number: {value:?}"))?;
                *counts.entry(name).or_default() += value;
            }
        }
    }
    Ok(Counts(counts))
}

/// memcached's version, from `stats`.
pub(crate) async fn memcached_version(backend: &MemcachedBackend) -> Option<String> {
    let stats = backend.stats().await.ok()?;
    stats.into_iter().find_map(|(_, stats)| {
        stats
            .into_iter()
            .find_map(|(name, value)| (name == "version").then_some(value))
    })
}

/// The server's `serverStatus` opcounters (`insert`, `query`, `update`,
/// `delete`, `getmore`, `command`): what the server itself counted. The
/// `serverStatus` command that reads them counts under `command`.
pub(crate) async fn mongo_opcounters(database: &Database) -> Option<Counts> {
    let admin = database.client().database("admin");
    let status = admin.run_command(doc! { "serverStatus": 1 }).await.ok()?;
    let opcounters = status.get_document("opcounters").ok()?;
    let counts = opcounters
        .iter()
        .filter_map(|(name, value)| {
            let n = match value {
                Bson::Int32(n) => u64::try_from(*n).ok()?,
                Bson::Int64(n) => u64::try_from(*n).ok()?,
                Bson::Double(n) => *n as u64,
                _ => return None,
            };
            Some((name.clone(), n))
        })
        .collect();
    Some(Counts(counts))
}

/// The server's version as `buildInfo` reports it.
pub(crate) async fn mongo_version(database: &Database) -> Option<String> {
    let info = database
        .client()
        .database("admin")
        .run_command(doc! { "buildInfo": 1 })
        .await
        .ok()?;
    info.get_str("version").ok().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> Counts {
        Counts(pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect())
    }

    #[test]
    fn deltas_sums_and_rates() {
        let before = counts(&[("update", 3), ("findAndModify", 5)]);
        let after = counts(&[("update", 7), ("findAndModify", 9), ("getMore", 2)]);
        let delta = after.since(&before);
        assert_eq!(
            delta,
            counts(&[("update", 4), ("findAndModify", 4), ("getMore", 2)])
        );
        assert_eq!(delta.total(), 10);
        assert_eq!(
            delta.per(2.0),
            "findAndModify 2.00, update 2.00, getMore 1.00"
        );
        let mut sum = delta.clone();
        sum.add(&counts(&[("getMore", 1)]));
        assert_eq!(sum.total(), 11);
        assert_eq!(Counts::default().per(1.0), "none");
    }
}

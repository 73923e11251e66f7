//! Cluster mode's own parts: which master serves which slot, commands sent
//! to one chosen master, and extensions batched per master.
//!
//! Everything else is single mode's code on a cluster connection: each of
//! a name's scripts touches keys of one hash tag, so the driver sends it
//! to the master of that slot, and follows `MOVED` and `ASK`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_core::{Error, Lease, Result, ServerInfo};
use futures::future::join_all;
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, Pipeline, RedisFuture, Value};

use crate::deployment;
use crate::error::{from_redis, timed_out, unexpected};
use crate::node::{INFO_TIMEOUT, Node};
use crate::scripts::SCRIPTS;

/// How many slots a Redis Cluster has.
const SLOTS: u16 = 16_384;

/// The slot of `key`, as Redis Cluster computes it: CRC-16/XMODEM of the
/// hash tag (what is between the first `{` and the next `}`, when not
/// empty), or of the whole key, modulo 16,384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&byte| byte == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&byte| byte == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16_xmodem(hashed) % SLOTS
}

/// CRC-16 with polynomial 0x1021, initial value 0, no reflection.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A master of the cluster: its address, as the cluster announces it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Master {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl std::fmt::Display for Master {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Which master serves which slots, from `CLUSTER SLOTS`.
#[derive(Debug, Default)]
pub(crate) struct SlotOwners {
    /// Ranges of slots (first, last) and their master.
    ranges: Vec<(u16, u16, Master)>,
}

impl SlotOwners {
    /// Asks a node of the cluster.
    pub(crate) async fn read(connection: &mut ClusterConnection) -> Result<Self> {
        let what = "reading the cluster's slots (CLUSTER SLOTS)";
        let reply: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(connection)
            .await
            .map_err(|e| from_redis(what, e))?;
        Self::parse(&reply).ok_or_else(|| unexpected(what, &reply))
    }

    /// `CLUSTER SLOTS`' reply: for each range, its first and last slot,
    /// then its master as host, port and id, then its replicas.
    fn parse(reply: &Value) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut owners = Self::default();
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let [
                Value::Int(first),
                Value::Int(last),
                Value::Array(master),
                ..,
            ] = fields.as_slice()
            else {
                return None;
            };
            let [host, Value::Int(port), ..] = master.as_slice() else {
                return None;
            };
            let host = match host {
                Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok()?,
                Value::SimpleString(text) => text.clone(),
                _ => return None,
            };
            owners.ranges.push((
                u16::try_from(*first).ok()?,
                u16::try_from(*last).ok()?,
                Master {
                    host,
                    port: u16::try_from(*port).ok()?,
                },
            ));
        }
        Some(owners)
    }

    /// The master of `slot`, if a range covers it.
    pub(crate) fn owner(&self, slot: u16) -> Option<&Master> {
        self.ranges
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, master)| master)
    }

    /// Every master that serves a slot, each once.
    pub(crate) fn masters(&self) -> Vec<Master> {
        let mut masters: Vec<Master> = self
            .ranges
            .iter()
            .map(|(_, _, master)| master.clone())
            .collect();
        masters.sort();
        masters.dedup();
        masters
    }
}

/// The slot map as last read, shared by a node's clones. It is dropped
/// whenever a batch meets a redirection, and read again when next needed.
#[derive(Clone, Default)]
pub(crate) struct SlotCache {
    owners: Arc<Mutex<Option<Arc<SlotOwners>>>>,
}

impl SlotCache {
    /// The slot map, read from the cluster if none is cached.
    pub(crate) async fn get(&self, connection: &mut ClusterConnection) -> Result<Arc<SlotOwners>> {
        if let Some(owners) = self.cached() {
            return Ok(owners);
        }
        let owners = Arc::new(SlotOwners::read(connection).await?);
        *self.lock() = Some(owners.clone());
        Ok(owners)
    }

    /// Forgets the slot map: a slot has moved.
    pub(crate) fn forget(&self) {
        *self.lock() = None;
    }

    fn cached(&self) -> Option<Arc<SlotOwners>> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<SlotOwners>>> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A cluster connection whose every command and pipeline goes to one
/// master, for what has no key to route by: `SCAN`, `INFO`, `TIME`,
/// `CONFIG GET`, and `list`'s reads of the keys that master's `SCAN`
/// found.
pub(crate) struct OnMaster {
    connection: ClusterConnection,
    master: Master,
}

impl OnMaster {
    pub(crate) fn new(connection: ClusterConnection, master: Master) -> Self {
        Self { connection, master }
    }

    fn route(&self) -> SingleNodeRoutingInfo {
        SingleNodeRoutingInfo::ByAddress {
            host: self.master.host.clone(),
            port: self.master.port,
        }
    }
}

impl ConnectionLike for OnMaster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let route = RoutingInfo::SingleNode(self.route());
        Box::pin(self.connection.route_command(cmd, route))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let route = self.route();
        Box::pin(
            self.connection
                .route_pipeline(pipeline, offset, count, route),
        )
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl Node {
    /// Extends `leases` on a cluster: one pipeline per master, as the slot
    /// map last read has it, all at once, all within `timeout` (each batch
    /// gets what reading the map left of it). A batch
    /// that meets a redirection (a slot moved), or fails as a whole, is
    /// sent again lease by lease, each call routed by its keys; extending
    /// twice is harmless, since each extension runs the lease from the
    /// server's now.
    pub(crate) async fn extend_in_cluster(
        &self,
        mut connection: ClusterConnection,
        what: &str,
        leases: &[Lease],
        timeout: Duration,
    ) -> Vec<Result<bool>> {
        let started = std::time::Instant::now();
        let map = tokio::time::timeout(timeout / 4, self.slot_cache().get(&mut connection)).await;
        // The batches get what the map left of the call's timeout, so the
        // whole call ends within it, as the keeper bounds it.
        let timeout = timeout.saturating_sub(started.elapsed());
        // Without a map, each lease is a batch of its own.
        let owners = match map {
            Ok(Ok(owners)) => owners,
            Ok(Err(error)) => {
                tracing::debug!(%error, "extending without the cluster's slot map");
                Arc::new(SlotOwners::default())
            }
            Err(_) => {
                tracing::debug!("extending without the cluster's slot map: no answer");
                Arc::new(SlotOwners::default())
            }
        };
        let slots: Vec<u16> = leases
            .iter()
            .map(|lease| self.slot_of(&lease.name))
            .collect();
        let groups = group_by_master(&owners, &slots);
        let batches = groups.iter().map(|group| {
            let connection = connection.clone();
            let batch: Vec<&Lease> = group.iter().map(|at| &leases[*at]).collect();
            let count = batch.len();
            let extend = self.extend_batch(connection, what, batch, slots[group[0]], timeout);
            async move {
                tokio::time::timeout(timeout, extend)
                    .await
                    .unwrap_or_else(|_| {
                        (0..count)
                            .map(|_| Err(timed_out("extend", timeout)))
                            .collect()
                    })
            }
        });
        let answers = join_all(batches).await;
        let mut outcomes: Vec<Option<Result<bool>>> = leases.iter().map(|_| None).collect();
        for (group, answer) in groups.iter().zip(answers) {
            for (at, outcome) in group.iter().zip(answer) {
                outcomes[*at] = Some(outcome);
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| {
                    Err(Error::Backend {
                        backend: "redis",
                        message: format!("{what}: no answer for this lease"),
                        source: None,
                    })
                })
            })
            .collect()
    }

    /// Extends `batch`, whose slots one master serves, in one pipeline to
    /// the master of `slot`.
    async fn extend_batch(
        &self,
        mut connection: ClusterConnection,
        what: &str,
        batch: Vec<&Lease>,
        slot: u16,
        timeout: Duration,
    ) -> Vec<Result<bool>> {
        let pipe = self.extend_pipe(batch.iter().copied());
        let mut sent = pipeline_to_slot(&mut connection, &pipe, batch.len(), slot).await;
        if matches!(&sent, Err(error) if error.kind() == ErrorKind::NoScriptError) {
            // The master lost its scripts (a restart, SCRIPT FLUSH): the
            // driver loads the script on every node.
            let script = SCRIPTS.extend.prepare_invoke();
            if script.load_async(&mut connection).await.is_ok() {
                sent = pipeline_to_slot(&mut connection, &pipe, batch.len(), slot).await;
            }
        }
        match sent {
            Ok(replies) if replies.len() == batch.len() => replies
                .into_iter()
                .map(|reply| match reply {
                    Value::Int(extended) => Ok(extended == 1),
                    Value::ServerError(error) => Err(from_redis(what, error.into())),
                    other => Err(unexpected(what, &other)),
                })
                .collect(),
            other => {
                if let Err(error) = &other {
                    tracing::debug!(%error, "extending a batch lease by lease");
                }
                // A redirection (MOVED, ASK, TRYAGAIN) means the map is
                // stale; any other error is told lease by lease.
                self.slot_cache().forget();
                join_all(batch.iter().map(|lease| self.extend_one(lease, timeout))).await
            }
        }
    }
}

impl Node {
    /// What the cluster says of itself: the first master's version and
    /// clock, and the eviction and persistence settings of every master,
    /// asked at once, each master that falls short named by its address.
    pub(crate) async fn server_info_in_cluster(
        &self,
        mut cluster: ClusterConnection,
    ) -> Result<ServerInfo> {
        let owners = tokio::time::timeout(INFO_TIMEOUT, SlotOwners::read(&mut cluster))
            .await
            .map_err(|_| timed_out("server info", INFO_TIMEOUT))??;
        let masters = owners.masters();
        let Some(first) = masters.first() else {
            return Err(Error::Backend {
                backend: "redis",
                message: "the redis cluster serves no slot: no master is known".into(),
                source: None,
            });
        };
        let asked = join_all(masters.iter().map(|master| {
            let mut on = OnMaster::new(cluster.clone(), master.clone());
            async move { self.server_info_on(&mut on, &format!(" on {master}")).await }
        }))
        .await;
        let mut infos = Vec::with_capacity(asked.len());
        for info in asked {
            infos.push(info?);
        }
        let features: Vec<(String, Vec<_>)> = masters
            .iter()
            .zip(&mut infos)
            .map(|(master, info)| (master.to_string(), std::mem::take(&mut info.features)))
            .collect();
        let first_info = infos.swap_remove(0);
        let version = first_info.version.map(|version| {
            format!(
                "{version} ({first}, the first of {} masters in cluster mode)",
                masters.len()
            )
        });
        Ok(deployment::across("master", &features).into_iter().fold(
            ServerInfo::new(version, first_info.clock),
            ServerInfo::with_feature,
        ))
    }
}

/// Sends `pipeline`, whose commands all touch keys of slots one master
/// serves, to the master of `slot` (one of them), as the driver's slot
/// map has it.
pub(crate) async fn pipeline_to_slot(
    connection: &mut ClusterConnection,
    pipeline: &Pipeline,
    count: usize,
    slot: u16,
) -> redis::RedisResult<Vec<Value>> {
    let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
    connection.route_pipeline(pipeline, 0, count, route).await
}

/// Groups `slots` (one per item) by the master that serves each, as far as
/// `owners` knows; an item whose slot no range covers is a group of its
/// own. Each group lists the items' positions, in order.
pub(crate) fn group_by_master(owners: &SlotOwners, slots: &[u16]) -> Vec<Vec<usize>> {
    let mut groups: BTreeMap<&Master, Vec<usize>> = BTreeMap::new();
    let mut unknown = Vec::new();
    for (at, slot) in slots.iter().enumerate() {
        match owners.owner(*slot) {
            Some(master) => groups.entry(master).or_default().push(at),
            None => unknown.push(vec![at]),
        }
    }
    groups.into_values().chain(unknown).collect()
}

/// The error for a cluster that cannot be opened, with what to check.
pub(crate) fn opening_error(what: &str, error: redis::RedisError) -> Error {
    match from_redis(what, error) {
        Error::Backend {
            backend,
            message,
            source,
        } => Error::Backend {
            backend,
            message: format!(
                "{message} (mode=cluster needs nodes of a Redis Cluster, with cluster-enabled \
                 yes and every slot served; for one server, drop mode=cluster)"
            ),
            source,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // Redis Cluster's specification gives CRC16("123456789") = 0x31C3.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(slot(b"123456789"), 0x31C3 % SLOTS);
        // Only the tag counts, when there is one.
        assert_eq!(slot(b"a{tag}b"), slot(b"tag"));
        assert_eq!(slot(b"{tag}"), slot(b"x{tag}:y"));
        // An empty tag is no tag: the whole key is hashed.
        assert_eq!(slot(b"{}tag"), crc16_xmodem(b"{}tag") % SLOTS);
        // Only the first `{`, and the next `}`.
        assert_eq!(slot(b"{a}{b}"), slot(b"a"));
        assert_eq!(slot(b"{a{b}c}"), slot(b"a{b"));
        assert_eq!(slot(b"no brace"), crc16_xmodem(b"no brace") % SLOTS);
    }

    #[test]
    fn slot_ranges_are_read_and_grouped() {
        let master = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Int(0), Value::Int(99), master("a", 1)]),
            Value::Array(vec![Value::Int(100), Value::Int(199), master("b", 2)]),
            Value::Array(vec![Value::Int(200), Value::Int(299), master("a", 1)]),
        ]);
        let owners = SlotOwners::parse(&reply).expect("a CLUSTER SLOTS reply");
        assert_eq!(
            owners.owner(250).map(ToString::to_string),
            Some("a:1".into())
        );
        assert_eq!(
            owners.owner(100).map(ToString::to_string),
            Some("b:2".into())
        );
        assert_eq!(owners.owner(300), None);
        assert_eq!(owners.masters().len(), 2);
        let groups = group_by_master(&owners, &[5, 150, 250, 9000, 120]);
        assert_eq!(groups, [vec![0, 2], vec![1, 4], vec![3]]);
        assert!(SlotOwners::parse(&Value::Int(1)).is_none());
    }
}

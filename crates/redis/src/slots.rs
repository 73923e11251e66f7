//! Redis Cluster's slots: which master serves which slot, the slot map as
//! last read, and commands sent to one chosen master or to a slot's master.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use distlock_core::Result;
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::{from_redis, unexpected};

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

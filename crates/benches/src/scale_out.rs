//! Scale-out forms of a backend: an etcd cluster of several members,
//! memcached over several servers, in quorum mode or sharded, and Redis in
//! quorum mode over several independent servers or as a Redis Cluster.
//! Each is
//! measured beside its single-server form, the primary target of its kind,
//! which the goals are stated for; the report gives a form's figures as
//! ratios to the single server's.

use distlock::etcd::EtcdConfig;
use distlock::memcached::{MemcachedConfig, Mode};
use distlock::redis::{Mode as RedisMode, RedisConfig};

use crate::url_kind::{is_etcd_url, kind_of_url};

/// How a target spreads over more than one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScaleOut {
    /// etcd: a cluster of this many members.
    EtcdCluster { members: usize },
    /// memcached in quorum mode over this many servers.
    MemcachedQuorum { servers: usize },
    /// memcached in sharded mode over this many servers.
    MemcachedSharded { servers: usize },
    /// Redis in quorum mode over this many independent servers.
    RedisQuorum { servers: usize },
    /// A Redis Cluster, reached through this many nodes named in the URL
    /// (the test cluster's URL names each of its masters).
    RedisCluster { nodes: usize },
}

impl ScaleOut {
    /// The scale-out form `url` names; `None` for a single server (or
    /// member), and for backends that have no such form here.
    pub(crate) fn of_url(url: &str) -> Option<Self> {
        if is_etcd_url(url) {
            let members = EtcdConfig::parse(url).ok()?.endpoints.len();
            return (members > 1).then_some(Self::EtcdCluster { members });
        }
        if kind_of_url(url) == "memcached" {
            let config = MemcachedConfig::parse(url).ok()?;
            let servers = config.servers().len();
            return match config.mode() {
                Mode::Quorum => Some(Self::MemcachedQuorum { servers }),
                _ if servers > 1 => Some(Self::MemcachedSharded { servers }),
                _ => None,
            };
        }
        if kind_of_url(url) == "Redis" {
            let config = RedisConfig::parse(url).ok()?;
            return match config.mode {
                RedisMode::Quorum => Some(Self::RedisQuorum {
                    servers: config.servers.len(),
                }),
                RedisMode::Cluster => Some(Self::RedisCluster {
                    nodes: config.servers.len(),
                }),
                _ => None,
            };
        }
        None
    }

    /// What the report calls it after its kind, e.g. `3-member cluster`.
    pub(crate) fn form(self) -> String {
        match self {
            Self::EtcdCluster { members } => format!("{members}-member cluster"),
            Self::MemcachedQuorum { servers } | Self::RedisQuorum { servers } => {
                format!("quorum of {servers}")
            }
            Self::MemcachedSharded { servers } => format!("sharded over {servers}"),
            Self::RedisCluster { nodes } => format!("cluster of {nodes}"),
        }
    }
}

/// The name a target goes by in the report: its kind, and its scale-out
/// form if it has one (`etcd, 3-member cluster`).
pub(crate) fn label(kind: &str, scale_out: Option<ScaleOut>) -> String {
    match scale_out {
        Some(form) => format!("{kind}, {}", form.form()),
        None => kind.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_told_from_the_url() {
        let cluster = "etcd://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
        assert_eq!(
            ScaleOut::of_url(cluster),
            Some(ScaleOut::EtcdCluster { members: 3 })
        );
        assert_eq!(ScaleOut::of_url("etcd://127.0.0.1:1"), None);
        let quorum = "memcache://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?mode=quorum";
        assert_eq!(
            ScaleOut::of_url(quorum),
            Some(ScaleOut::MemcachedQuorum { servers: 3 })
        );
        assert_eq!(
            ScaleOut::of_url("memcache://127.0.0.1:1,127.0.0.1:2"),
            Some(ScaleOut::MemcachedSharded { servers: 2 })
        );
        assert_eq!(ScaleOut::of_url("memcache://127.0.0.1:1"), None);
        let redis_quorum = "redis://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?mode=quorum";
        assert_eq!(
            ScaleOut::of_url(redis_quorum),
            Some(ScaleOut::RedisQuorum { servers: 3 })
        );
        assert_eq!(ScaleOut::of_url("redis://127.0.0.1:1"), None);
        assert_eq!(
            ScaleOut::of_url("redis://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?mode=cluster"),
            Some(ScaleOut::RedisCluster { nodes: 3 })
        );
        assert_eq!(
            label("Redis", ScaleOut::of_url(redis_quorum)),
            "Redis, quorum of 3"
        );
        assert_eq!(ScaleOut::of_url("postgres://h/db"), None);
        assert_eq!(
            label("memcached", ScaleOut::of_url(quorum)),
            "memcached, quorum of 3"
        );
        assert_eq!(label("etcd", None), "etcd");
    }
}

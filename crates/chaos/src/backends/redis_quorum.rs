//! Redis in quorum mode ([`REDIS_QUORUM`]): three independent servers
//! without persistence, as the tests run it, and a lock held while a
//! majority (2 of 3) holds its copy.
//!
//! How the three servers are run. The harness starts the first, the one
//! scenarios kill, restart and put fault proxies in front of; it starts
//! the other two beside it as its companions (the same command, free
//! loopback ports, data in the run's scratch directory, stopped on drop).
//! So the faults reach:
//!
//! - **restarts one server of three** (R1, R6, R7): the restarted server
//!   comes back empty and abstains for a lease, so a holder whose grant
//!   lost a copy to the restart is never granted again by the restarted
//!   server and one other. Its locks are [`OnRestart::Kept`], and overlaps
//!   stay forbidden: that is what quorum mode promises for a server that
//!   came back empty (docs/redis.md, "A server that came back empty").
//!   No scenario restarts a second server within one hold.
//! - **network faults a majority** (R3, R5, R9): proxies stand in front of
//!   the first server and one companion, and the third is reached
//!   directly, so a delay, a blackhole or a lost answer costs the holder
//!   its majority, as it costs a single server's holder its server. A
//!   fault of one server of three would leave the holder its lock, and
//!   those scenarios' judgements (the late write turned away, `lost()`
//!   before the next grant) would no longer describe what quorum mode
//!   promises.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::LockName;
use distlock::redis::RedisConfig;

use super::closed_port;
use super::redis::{NO_FAKETIME, NOT_MEMCACHED, delete_keys, open_quiet, prepare, volatile_args};
use crate::answers::{ClockStep, OnRestart, SecretCase};
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::servers::ServerCommand;

/// Redis in quorum mode, on three servers without persistence.
#[derive(Debug)]
pub(crate) struct RedisQuorum;

/// Redis in quorum mode, on the harness's server and two companions.
pub(crate) const REDIS_QUORUM: RedisQuorum = RedisQuorum;

/// `redis://` with the servers at `hosts` (`host:port` each), in quorum
/// mode, with `userinfo` (`user:password@`, or empty) before them.
fn quorum_url(userinfo: &str, hosts: &[String]) -> String {
    format!("redis://{userinfo}{}?mode=quorum", hosts.join(","))
}

/// `count` loopback ports nobody listens on, each a different one: a
/// quorum URL that names a server twice is refused before it is tried.
fn closed_ports(count: usize) -> Outcome<Vec<u16>> {
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < count {
        let port = closed_port()?;
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    Ok(ports)
}

#[async_trait::async_trait]
impl CampaignBackend for RedisQuorum {
    fn name(&self) -> &'static str {
        "Redis in quorum mode"
    }

    fn option_name(&self) -> &'static str {
        "redis-quorum"
    }

    fn server(&self) -> Option<ServerCommand> {
        Some(ServerCommand {
            binary_var: "REDIS_BIN",
            args: volatile_args,
            prepare: Some(prepare),
            run_as: None,
        })
    }

    fn url(&self, _scratch: &Path, address: &str, companions: &[String]) -> String {
        let mut hosts = vec![address.to_owned()];
        hosts.extend_from_slice(companions);
        quorum_url("", &hosts)
    }

    /// Two, for three servers: the fewest quorum mode takes, and the
    /// fewest in which one can be lost.
    fn companions(&self) -> usize {
        2
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok(format!("{}&prefix={space}:", server.url()))
    }

    /// A restart empties one server of three; the other two keep every
    /// copy, a majority, and holders keep extending there.
    fn on_restart(&self) -> OnRestart {
        OnRestart::Kept
    }

    fn semaphores(&self) -> Result<(), &'static str> {
        Err(
            "quorum mode grants no semaphores: each server counts only the permits it holds, \
             and permits held by different majorities could together exceed the limit",
        )
    }

    /// Each copy is a key with a `PX` expiry on its server's clock: a dead
    /// holder's copies end a lease after its last extension, and a waiter
    /// is then granted by a majority.
    fn regrant_bound(&self, lease: Duration) -> Duration {
        lease
    }

    /// Once a majority of its subscriber connections are open, and its
    /// scripts loaded on every server, as on a single server.
    async fn open_quiet(
        &self,
        url: &str,
        lease: Duration,
    ) -> Outcome<Arc<dyn distlock::backend::Backend>> {
        open_quiet(url, lease).await
    }

    /// `DEL` of every key of the name on every server, as an eviction
    /// everywhere would: tokens then come from the servers' clocks, which
    /// on one machine are one clock (the assumption docs/redis.md states).
    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        delete_keys(server, &server.all_addresses(), name).await
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        let closed: Vec<String> = closed_ports(3)?
            .into_iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let servers = server.all_addresses();
        let [first, second, ..] = servers.as_slice() else {
            return Err("the quorum's companions are not running".into());
        };
        let user = format!("alice:{canary}@");
        Ok(vec![
            SecretCase {
                label: "bad hosts (three closed ports)",
                url: quorum_url(&user, &closed),
                note: "",
            },
            SecretCase {
                label: "a user and password on servers without authentication",
                url: quorum_url(&user, &servers),
                note: "",
            },
            SecretCase {
                label: "a password alone on servers without authentication",
                url: quorum_url(&format!(":{canary}@"), &servers),
                note: "",
            },
            SecretCase {
                label: "a URL the backend refuses (a port that is not one)",
                url: quorum_url(
                    &user,
                    &[
                        first.clone(),
                        "127.0.0.1:notaport".to_owned(),
                        second.clone(),
                    ],
                ),
                note: "",
            },
            SecretCase {
                label: "a quorum the backend refuses (a server named twice)",
                url: quorum_url(&user, &[first.clone(), second.clone(), first.clone()]),
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

    fn server_clock(&self) -> Result<ClockStep, &'static str> {
        Err(NO_FAKETIME)
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err(NOT_MEMCACHED)
    }
}

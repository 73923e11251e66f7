//! Redis in cluster mode ([`REDIS_CLUSTER`](super::REDIS_CLUSTER)): a Redis Cluster of three
//! masters without persistence and without replicas, on loopback, opened
//! as `redis://n1,n2,n3?mode=cluster`.
//!
//! How the cluster is formed. The harness starts the first node, the one
//! scenarios kill, restart and put a fault proxy in front of, and the other
//! two beside it as its companions; each has `cluster-enabled yes`, a
//! cluster bus port of its own (chosen once and kept in its data directory)
//! and its `nodes.conf` there. [`ready`] then gives
//! the first node every slot (`CLUSTER ADDSLOTSRANGE 0 16383`), has it meet
//! the other two, and waits until every node sees `cluster_state:ok`.
//!
//! Where faults land. A name's keys carry a hash tag that is a digest of
//! the name, so a scenario cannot pick the master its names live on; the
//! first node serving every slot is what makes each scenario's names live
//! where its faults land. So:
//!
//! - **restarts** (R1, R6, R7) reach the master of every name. The node
//!   comes back empty, as [`REDIS_VOLATILE`](super::REDIS_VOLATILE) does, so its
//!   locks are [`OnRestart::Forgotten`](crate::answers::OnRestart::Forgotten): holders learn the loss at their
//!   next extension, and overlaps until then are reported, not forbidden.
//!   Its `nodes.conf` keeps its identity and slots, and it rejoins the
//!   other two over the bus. A restarted master refuses commands
//!   (`CLUSTERDOWN`) for 2 s after it starts (Redis's writable delay,
//!   which gives the cluster time to reconfigure it), so a restart here
//!   ends once the node serves again, and R6 allows for those 2 s.
//! - **a lost answer** (R5) reaches the master of every name through one
//!   fault proxy. The cluster client goes where `CLUSTER SLOTS` says, not
//!   where the URL says, so for the proxy to carry anything the first node
//!   announces the proxy's port (`cluster-announce-port`, over the bus to
//!   the other two) while the proxy stands, and its own port again after.
//!   Every client then reaches that master through the proxy: its one shot
//!   takes the first client's acquisition, and once spent and cleared it
//!   only passes bytes on, to the second holder too.
//! - **R3 and R9 do not apply**: their premise is one holder's traffic
//!   delayed or swallowed while a second holder reaches the same master
//!   directly. The master announces one address to every client, and the
//!   backend gives a client no way to reach a node at an address other
//!   than the announced one, so a proxy carries either every client's
//!   traffic to that master or none.
//!
//! What this does not exercise: the two companions are masters with no
//! slots, so each run routes to one master. Names spread over several
//! masters, extension batches to several masters at once, and slot moves
//! are the cluster tests' (`crates/redis/tests/cluster.rs`); a failover to
//! a replica is not tested anywhere (docs/redis.md). What it does
//! exercise: the cluster client's routing through the slot map its seeds
//! give, wake-ups heard on subscriber connections to slotless nodes (each
//! release's `PUBLISH` crosses the cluster bus), `list` on every master,
//! and a master that rejoins its cluster empty.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use distlock::redis::redis;

use super::node::volatile_args;
use crate::answers::{Detour, SecretCase};
use crate::backends::closed_port;
use crate::campaign::Server;
use crate::outcome::Outcome;

/// How long a restarted master refuses commands before it serves again:
/// Redis's `CLUSTER_WRITABLE_DELAY` (2 s), and a little for the holders'
/// retries to find it back.
pub(super) const WRITABLE_DELAY: Duration = Duration::from_millis(2500);

/// How long the cluster gets to agree on its state, or on an address.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// The file in a node's data directory that holds its cluster bus port.
fn bus_port_file(data: &Path) -> PathBuf {
    data.join("redis").join("bus-port")
}

/// Makes the node's data directory, and chooses its bus port, once: a
/// restart must keep it, since the other nodes reach it there.
pub(super) fn prepare(data: &Path) -> Outcome<()> {
    super::node::prepare(data)?;
    std::fs::write(bus_port_file(data), closed_port()?.to_string())?;
    Ok(())
}

/// A node without persistence, in cluster mode, its state in `nodes.conf`
/// in its data directory.
pub(super) fn node_args(port: u16, data: &Path) -> Vec<OsString> {
    let mut args = volatile_args(port, data);
    // A missing file is passed on as it is: the server then refuses to
    // start, and its log (`server.log`) says why.
    let bus = std::fs::read_to_string(bus_port_file(data)).map_or_else(
        |_| "missing-bus-port-file".to_owned(),
        |text| text.trim().to_owned(),
    );
    for (flag, value) in [
        ("--cluster-enabled", "yes".to_owned()),
        ("--cluster-port", bus),
        ("--cluster-config-file", "nodes.conf".to_owned()),
        ("--cluster-node-timeout", "5000".to_owned()),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    args
}

/// `redis://` with the nodes at `hosts` as seeds, in cluster mode, with
/// `userinfo` (`user:password@`, or empty) before them.
pub(super) fn cluster_url(userinfo: &str, hosts: &[String]) -> String {
    format!("redis://{userinfo}{}?mode=cluster", hosts.join(","))
}

/// A connection to the node at `address`, which answers within 5 s.
fn node(address: &str) -> Outcome<redis::Connection> {
    let client = redis::Client::open(format!("redis://{address}"))?;
    let connection = client.get_connection_with_timeout(Duration::from_secs(5))?;
    connection.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(connection)
}

/// A field of the node's `CLUSTER INFO`.
fn cluster_info(address: &str, field: &str) -> Outcome<String> {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut node(address)?)?;
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
        .ok_or_else(|| format!("CLUSTER INFO of {address} has no {field}").into())
}

/// The port the node at `address` says slot 0's master is reached at.
fn announced_port(address: &str) -> Outcome<Option<i64>> {
    let reply: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut node(address)?)?;
    let redis::Value::Array(ranges) = reply else {
        return Ok(None);
    };
    Ok(ranges.iter().find_map(|range| match range {
        redis::Value::Array(fields) => match fields.as_slice() {
            [redis::Value::Int(0), _, redis::Value::Array(master), ..] => match master.as_slice() {
                [_, redis::Value::Int(port), ..] => Some(*port),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }))
}

/// Waits until `done` holds, for at most [`SETTLE_LIMIT`].
fn settle(what: &str, done: impl Fn() -> Outcome<bool>) -> Outcome<()> {
    let started = Instant::now();
    loop {
        // A node that is not back yet answers nothing: that is waited out.
        if done().unwrap_or(false) {
            return Ok(());
        }
        if started.elapsed() > SETTLE_LIMIT {
            return Err(format!("{what} within {SETTLE_LIMIT:?}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether every node at `addresses` knows them all and serves.
fn serving(addresses: &[String]) -> Outcome<bool> {
    for address in addresses {
        if cluster_info(address, "cluster_state")? != "ok"
            || cluster_info(address, "cluster_known_nodes")? != addresses.len().to_string()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Has the node at `first` announce `port` (0: its own) as where clients
/// reach it, and waits until every node at `addresses` says so.
fn announce(first: &str, addresses: &[String], port: u16) -> Outcome<()> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-announce-port")
        .arg(port)
        .query::<()>(&mut node(first)?)?;
    let shown = if port == 0 {
        first
            .rsplit_once(':')
            .and_then(|(_, own)| own.parse().ok())
            .ok_or_else(|| format!("{first} is not host:port"))?
    } else {
        i64::from(port)
    };
    settle(
        &format!("the cluster did not learn that {first} is reached at port {shown}"),
        || {
            for address in addresses {
                if announced_port(address)? != Some(shown) {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
}

/// Forms the cluster on its first start (every slot to the first node,
/// which meets the other two), and waits until every node serves: on
/// a restart, until the restarted master's writable delay is over.
///
/// # Errors
/// A node cannot be reached, or the cluster does not serve within
/// [`SETTLE_LIMIT`].
pub(super) fn ready(server: &Server) -> Outcome<()> {
    let addresses = server.all_addresses();
    let first = server.address();
    if cluster_info(&first, "cluster_slots_assigned")? == "0" {
        let mut first_node = node(&first)?;
        redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(0)
            .arg(16_383)
            .query::<()>(&mut first_node)?;
        for companion in server.companion_addresses() {
            let (host, port) = companion
                .rsplit_once(':')
                .ok_or_else(|| format!("{companion} is not host:port"))?;
            let bus: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg("cluster-port")
                .query(&mut node(&companion)?)?;
            let bus = bus.get(1).ok_or("CONFIG GET cluster-port: no value")?;
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg(host)
                .arg(port)
                .arg(bus)
                .query::<()>(&mut first_node)?;
        }
    }
    settle("the cluster did not reach cluster_state:ok", || {
        serving(&addresses)
    })
}

/// Has the first node announce the one fault proxy in `proxies` while
/// the detour stands, and its own port again after.
///
/// # Errors
/// Not one proxy, a node that cannot be reached, a proxy already
/// announced, or a cluster that does not learn the port within
/// [`SETTLE_LIMIT`].
pub(super) fn route_through(server: &Server, proxies: &[String]) -> Outcome<Option<Detour>> {
    let [proxy] = proxies else {
        return Err(format!(
            "a cluster node announces one address: one fault proxy, not {}",
            proxies.len()
        )
        .into());
    };
    let first = server.address();
    let current: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("cluster-announce-port")
        .query(&mut node(&first)?)?;
    if current.get(1).is_some_and(|port| port != "0") {
        return Err("the cluster's first node already announces a fault proxy: \
             one proxy at a time"
            .into());
    }
    let port: u16 = proxy
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .ok_or_else(|| format!("{proxy} is not host:port"))?;
    let addresses = server.all_addresses();
    announce(&first, &addresses, port)?;
    Ok(Some(Detour::new(move || {
        // A restart already ended the announcement; this only waits.
        if let Err(error) = announce(&first, &addresses, 0) {
            eprintln!("distlock-chaos: the cluster's first node still announces a proxy: {error}");
        }
    })))
}

/// Why a fault proxy cannot stand between one holder and the master while
/// a second holder reaches it directly (R3, R9).
pub(super) const ONE_ADDRESS: &str = "a cluster client reaches a master at the address the master announces (CLUSTER \
             SLOTS), the same for every client, and the backend cannot map it to another: a \
             proxy in front of the master carries every client's traffic or none, so no \
             second holder can reach it directly while the first is delayed";

/// The URLs R12 tries: a bad seed, the running nodes with a user, or a
/// password alone, and two the backend refuses.
///
/// # Errors
/// No closed port can be had.
pub(super) fn secret_cases(server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
    let closed = format!("127.0.0.1:{}", closed_port()?);
    let nodes = server.all_addresses();
    let user = format!("alice:{canary}@");
    Ok(vec![
        SecretCase::new(
            "a bad seed (a closed port)",
            cluster_url(&user, std::slice::from_ref(&closed)),
        ),
        SecretCase::new(
            "a user and password on nodes without authentication",
            cluster_url(&user, &nodes),
        ),
        SecretCase::new(
            "a password alone on nodes without authentication",
            cluster_url(&format!(":{canary}@"), &nodes),
        ),
        SecretCase::new(
            "a URL the backend refuses (a port that is not one)",
            cluster_url(&user, &[nodes[0].clone(), "127.0.0.1:notaport".to_owned()]),
        ),
        SecretCase::new(
            "a cluster the backend refuses (a database other than 0)",
            format!("redis://{user}{}/3?mode=cluster", nodes.join(",")),
        ),
    ])
}

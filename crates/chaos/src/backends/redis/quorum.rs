//! Redis in quorum mode ([`REDIS_QUORUM`](super::REDIS_QUORUM)): three independent servers
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
//!   server and one other. Its locks are [`OnRestart::Kept`](crate::answers::OnRestart::Kept), and overlaps
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

use crate::answers::SecretCase;
use crate::backends::closed_port;
use crate::campaign::Server;
use crate::outcome::Outcome;

/// `redis://` with the servers at `hosts` (`host:port` each), in quorum
/// mode, with `userinfo` (`user:password@`, or empty) before them.
pub(super) fn quorum_url(userinfo: &str, hosts: &[String]) -> String {
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

/// The URLs R12 tries: quorums of closed ports, of the running servers
/// with a user, or a password alone, and two the backend refuses.
///
/// # Errors
/// No closed port can be had, or the companions are not running.
pub(super) fn secret_cases(server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
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
        SecretCase::new("bad hosts (three closed ports)", quorum_url(&user, &closed)),
        SecretCase::new(
            "a user and password on servers without authentication",
            quorum_url(&user, &servers),
        ),
        SecretCase::new(
            "a password alone on servers without authentication",
            quorum_url(&format!(":{canary}@"), &servers),
        ),
        SecretCase::new(
            "a URL the backend refuses (a port that is not one)",
            quorum_url(
                &user,
                &[
                    first.clone(),
                    "127.0.0.1:notaport".to_owned(),
                    second.clone(),
                ],
            ),
        ),
        SecretCase::new(
            "a quorum the backend refuses (a server named twice)",
            quorum_url(&user, &[first.clone(), second.clone(), first.clone()]),
        ),
    ])
}

/// Why quorum mode grants no semaphores.
pub(super) const NO_SEMAPHORES: &str = "quorum mode grants no semaphores: each server counts \
     only the permits it holds, and permits held by different majorities could together \
     exceed the limit";

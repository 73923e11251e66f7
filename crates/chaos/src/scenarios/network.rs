//! What the network-fault scenarios (R3, R5, R9) share: a runtime for
//! fault proxies, proxies in front of a scenario's server (or a majority
//! of a quorum's servers), and the row of a backend that has no connection
//! to fault.

use std::net::SocketAddr;

use distlock_faultproxy::{Fault, FaultProxy};
use tokio::runtime::Runtime;

use crate::answers::Detour;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::report::Row;

/// A runtime for fault proxies (and in-process lock clients). Proxies run
/// on its worker threads, so the scenario's own thread may block while it
/// starts holders and waits for them.
///
/// # Errors
/// The runtime cannot be built.
pub(crate) fn runtime() -> Outcome<Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// Fault proxies in front of as many of a backend's servers as a holder
/// needs (its one server; a majority of a quorum's; a cluster's master of
/// every slot), which a fault reaches together.
pub(crate) struct Proxies {
    /// Declared first, so dropped first: clients are sent back to the
    /// servers before the proxies close.
    _detour: Option<Detour>,
    proxies: Vec<FaultProxy>,
}

impl Proxies {
    /// Puts `fault` in force on every proxy.
    pub(crate) fn set_fault(&self, fault: Fault) {
        for proxy in &self.proxies {
            proxy.set_fault(fault);
        }
    }

    /// Lets everything pass again, on every proxy.
    pub(crate) fn clear(&self) {
        for proxy in &self.proxies {
            proxy.clear();
        }
    }

    /// Whether every proxy's fault is over: a one-shot fault
    /// ([`Fault::ResetAfterRequest`]) was taken on each.
    pub(crate) fn all_spent(&self) -> bool {
        self.proxies
            .iter()
            .all(|proxy| proxy.fault() == Fault::None)
    }
}

/// Fault proxies in front of as many of `server`'s servers as the backend
/// says a fault reaches (the restarted one first, then its companions),
/// running on `runtime` (which must outlive them), and the URL of the
/// backend through them: a fault reaches as many servers as it must for a
/// holder to lose its lock, while the others are reached directly. A
/// backend whose clients learn its servers' addresses from the servers is
/// told to announce the proxies while they stand.
///
/// # Errors
/// The servers' addresses cannot be read, or no port can be bound.
pub(crate) fn proxy(runtime: &Runtime, server: &Server) -> Outcome<(Proxies, String)> {
    let _entered = runtime.enter();
    let mut proxies = Vec::new();
    let reached = server.kind.faulted_servers();
    for address in server.all_addresses().into_iter().take(reached) {
        let upstream: SocketAddr = address.parse()?;
        proxies.push(FaultProxy::start(upstream)?);
    }
    let addresses: Vec<String> = proxies
        .iter()
        .map(|proxy| proxy.addr().to_string())
        .collect();
    let (first, companions) = addresses
        .split_first()
        .ok_or("a backend without a server to put a proxy in front of")?;
    let url = server.url_via(first, companions);
    let detour = server.kind.route_through(server, &addresses)?;
    Ok((
        Proxies {
            _detour: detour,
            proxies,
        },
        url,
    ))
}

/// The row of scenario `id` on a backend without a server (the file
/// backend, whose locks live in this machine's kernel): there is no
/// connection to fault.
pub(crate) fn does_not_apply(id: &'static str, server: &Server, why: &str) -> Row {
    super::kinds::not_applicable(id, server, "exclusive", why)
}

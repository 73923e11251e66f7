//! What the network-fault scenarios (R3, R5, R9) share: a runtime for
//! fault proxies, a proxy in front of a scenario's server, and the row of
//! a backend that has no connection to fault.

use std::net::SocketAddr;

use distlock_faultproxy::FaultProxy;
use tokio::runtime::Runtime;

use crate::Outcome;
use crate::report::Row;
use crate::servers::Server;

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

/// A fault proxy in front of `server`, running on `runtime` (which must
/// outlive it), and the URL of the backend through it.
///
/// # Errors
/// The server's address cannot be read, or no port can be bound.
pub(crate) fn proxy(runtime: &Runtime, server: &Server) -> Outcome<(FaultProxy, String)> {
    let _entered = runtime.enter();
    let upstream: SocketAddr = server.address().parse()?;
    let proxy = FaultProxy::start(upstream)?;
    let url = server.url_at(&proxy.addr().to_string());
    Ok((proxy, url))
}

/// The row of scenario `id` on a backend without a server (the file
/// backend, whose locks live in this machine's kernel): there is no
/// connection to fault.
pub(crate) fn does_not_apply(id: &'static str, server: &Server, why: &str) -> Row {
    super::not_applicable(id, server, "exclusive", why)
}

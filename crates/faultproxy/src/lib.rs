//! A TCP proxy that injects faults between a lock client and its server.
//!
//! Chaos tests put a [`FaultProxy`] in front of a server (a
//! MongoDB-compatible server, memcached, …), point the lock client at
//! [`FaultProxy::addr`], and switch faults on and off while the client
//! runs. Each accepted connection gets its own connection to the server,
//! and bytes are copied both ways under the [`Fault`] in force, which
//! running connections pick up at once, mid-stream:
//!
//! - [`Fault::Delay`] and [`Fault::DelayOne`] hold every chunk back for a
//!   while, keeping order;
//! - [`Fault::Blackhole`] swallows everything, like a network partition;
//! - [`Fault::Drop`] swallows one direction, e.g. the replies;
//! - [`Fault::Refuse`] closes new connections at once;
//! - [`Fault::ResetAfterRequest`] lets the next request reach the server,
//!   then resets that connection before the reply passes;
//!   [`Fault::ResetAfterRequestStarting`] does so to the next request that
//!   starts with given bytes (a `PUT`, not the `GET` before it).
//!
//! [`FaultProxy::reset_all`] resets every open connection, and
//! [`FaultProxy::stats`] counts connections and bytes. Resets are real TCP
//! resets (RST, via `SO_LINGER` zero), not orderly closes, on both sides.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use distlock_faultproxy::{Fault, FaultProxy};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! use tokio::net::{TcpListener, TcpStream};
//!
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! // A server that echoes whatever it receives.
//! let server = TcpListener::bind("127.0.0.1:0").await?;
//! let server_addr = server.local_addr()?;
//! tokio::spawn(async move {
//!     while let Ok((mut stream, _)) = server.accept().await {
//!         tokio::spawn(async move {
//!             let (mut rd, mut wr) = stream.split();
//!             let _ = tokio::io::copy(&mut rd, &mut wr).await;
//!         });
//!     }
//! });
//!
//! let proxy = FaultProxy::start(server_addr)?;
//!
//! // No fault: bytes pass through.
//! let mut client = TcpStream::connect(proxy.addr()).await?;
//! client.write_all(b"ping").await?;
//! let mut reply = [0; 4];
//! client.read_exact(&mut reply).await?;
//! assert_eq!(&reply, b"ping");
//!
//! // A partition: the connection stays open, but nothing gets through.
//! proxy.set_fault(Fault::Blackhole);
//! client.write_all(b"lost").await?;
//! let read = client.read(&mut reply);
//! let waited = tokio::time::timeout(Duration::from_millis(200), read).await;
//! assert!(waited.is_err(), "no reply through a blackhole");
//!
//! // Healed: new requests get through again.
//! proxy.clear();
//! let mut client = TcpStream::connect(proxy.addr()).await?;
//! client.write_all(b"pong").await?;
//! client.read_exact(&mut reply).await?;
//! assert_eq!(&reply, b"pong");
//!
//! proxy.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod conn;
mod doom;
mod fault;
mod listener;
mod pipe;
mod shared;
mod stats;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::debug;

pub use fault::{Direction, Fault};
pub use stats::Stats;

use shared::Shared;

/// A running fault-injection proxy in front of one upstream server.
///
/// Dropping it, or calling [`FaultProxy::shutdown`], stops the listener
/// and closes every connection; no task outlives it.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    /// Dropping this sender tells the listener to stop.
    stop: Option<oneshot::Sender<()>>,
    listener: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream`, listening on a free port of
    /// 127.0.0.1 (see [`FaultProxy::addr`]), with no fault in force.
    ///
    /// Must be called from within a Tokio runtime with I/O and time
    /// enabled, on which the proxy then runs. The upstream server is only
    /// connected to when a client connects.
    ///
    /// # Errors
    ///
    /// Fails when called outside a Tokio runtime, or when no port can be
    /// bound.
    ///
    /// # Panics
    ///
    /// Panics when the current runtime has no I/O driver (a runtime
    /// built without `enable_io`), as Tokio's listener requires one.
    pub fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let runtime = Handle::try_current().map_err(io::Error::other)?;
        // Binding with std keeps `start` synchronous; the port is local.
        let std_listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(std_listener)?
        };
        let shared = Arc::new(Shared::new());
        let (stop, stopped) = oneshot::channel();
        let task = runtime.spawn(listener::run(
            listener,
            upstream,
            Arc::clone(&shared),
            stopped,
        ));
        debug!(%addr, %upstream, "proxy started");
        Ok(FaultProxy {
            addr,
            upstream,
            shared,
            stop: Some(stop),
            listener: Some(task),
        })
    }

    /// The address clients connect to instead of the upstream server.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Puts `fault` in force, replacing the previous one, for existing and
    /// new connections alike.
    pub fn set_fault(&self, fault: Fault) {
        debug!(addr = %self.addr, ?fault, "fault set");
        self.shared.fault.send_replace(fault);
    }

    /// Lets everything pass again: the same as `set_fault(Fault::None)`.
    pub fn clear(&self) {
        self.set_fault(Fault::None);
    }

    /// The fault in force. After [`Fault::ResetAfterRequest`] took its
    /// shot, this is [`Fault::None`].
    pub fn fault(&self) -> Fault {
        self.shared.fault()
    }

    /// Resets every open connection, on both sides: the client and the
    /// server each see a TCP reset (RST). New connections are not affected.
    pub fn reset_all(&self) {
        debug!(addr = %self.addr, "resetting all connections");
        self.shared
            .resets
            .send_modify(|generation| *generation += 1);
    }

    /// A snapshot of the proxy's counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Stops listening, closes every connection, and waits until all of
    /// the proxy's tasks have ended.
    pub async fn shutdown(mut self) {
        self.stop.take();
        if let Some(listener) = self.listener.take()
            && let Err(error) = listener.await
        {
            debug!(addr = %self.addr, %error, "listener task failed");
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the listener drops its set of connection tasks, which
        // aborts them in turn; their sockets close as they are dropped.
        if let Some(listener) = self.listener.take() {
            listener.abort();
        }
    }
}

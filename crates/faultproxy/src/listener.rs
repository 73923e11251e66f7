//! The accept loop, which owns every connection task.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::sleep;
use tracing::debug;

use crate::conn;
use crate::shared::Shared;

/// Pause after a failed accept, e.g. when out of file descriptors, so the
/// loop does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Accepts connections until `stop` fires or its sender is dropped, then
/// ends every connection task before returning.
///
/// The connection tasks live in a [`JoinSet`], so that they are aborted
/// even when this task is aborted rather than stopped.
pub(crate) async fn run(
    listener: TcpListener,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            // Reap finished connections so the set does not grow.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => admit(stream, peer, upstream, &shared, &mut conns),
                Err(error) => {
                    debug!(%error, "accept failed");
                    sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    }
    debug!(connections = conns.len(), "proxy stopping");
    conns.shutdown().await;
}

/// Refuses a new connection or starts proxying it.
fn admit(
    stream: TcpStream,
    peer: SocketAddr,
    upstream: SocketAddr,
    shared: &Arc<Shared>,
    conns: &mut JoinSet<()>,
) {
    shared.counters.accepted();
    if shared.fault().refuses() {
        debug!(%peer, "refusing the connection");
        shared.counters.refused();
        conn::reset(&stream);
        return;
    }
    debug!(%peer, "accepted");
    let resets = shared.resets.subscribe();
    conns.spawn(conn::serve(
        stream,
        peer,
        upstream,
        Arc::clone(shared),
        resets,
    ));
}

//! One proxied connection: its upstream connection, its two pipes, and
//! how it ends.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::debug;

use crate::Direction;
use crate::doom::ConnState;
use crate::pipe::Pipe;
use crate::shared::Shared;

/// How a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Both directions reached their end of stream.
    Closed,
    /// To be closed abruptly on both sides.
    Reset,
}

/// Proxies one accepted client connection until it ends.
///
/// `resets` must have been subscribed when the connection was accepted,
/// so that a `reset_all` from then on reaches it.
pub(crate) async fn serve(
    mut client: TcpStream,
    peer: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    mut resets: watch::Receiver<u64>,
) {
    let _active = shared.counters.open();
    let mut server = match TcpStream::connect(upstream).await {
        Ok(server) => server,
        Err(error) => {
            debug!(%peer, %upstream, %error, "cannot reach upstream; resetting the client");
            shared.counters.reset();
            reset(&client);
            return;
        }
    };
    // Requests and replies are small; Nagle's algorithm would add delays
    // of its own to the ones we inject.
    for stream in [&client, &server] {
        if let Err(error) = stream.set_nodelay(true) {
            debug!(%peer, %error, "cannot set TCP_NODELAY");
        }
    }
    let conn = ConnState::new();
    let ending = {
        let (client_rd, client_wr) = client.split();
        let (server_rd, server_wr) = server.split();
        let to_server = Pipe::new(Direction::ToServer, &shared, &conn).run(client_rd, server_wr);
        let to_client = Pipe::new(Direction::ToClient, &shared, &conn).run(server_rd, client_wr);
        tokio::select! {
            piped = async { tokio::try_join!(to_server, to_client) } => match piped {
                Ok(_) => Ending::Closed,
                Err(error) => {
                    debug!(%peer, %error, "connection failed; resetting both sides");
                    Ending::Reset
                }
            },
            _ = resets.changed() => {
                debug!(%peer, "reset_all: resetting both sides");
                Ending::Reset
            }
            () = conn.grace_over() => {
                debug!(%peer, "no reply after the request; resetting both sides");
                Ending::Reset
            }
        }
    };
    if ending == Ending::Reset {
        shared.counters.reset();
        reset(&client);
        reset(&server);
    }
    debug!(%peer, ?ending, "connection over");
}

/// Makes the coming close of `stream` send a reset (RST) rather than an
/// orderly end of stream (FIN), dropping whatever is still unsent.
pub(crate) fn reset(stream: &TcpStream) {
    if let Err(error) = stream.set_zero_linger() {
        debug!(%error, "cannot set SO_LINGER to zero; the close will be orderly");
    }
}

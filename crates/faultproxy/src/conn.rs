//! One proxied connection: its upstream connection, its two pipes, and
//! how it ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::sleep;
use tracing::debug;

use crate::Direction;
use crate::pipe::Pipe;
use crate::shared::Shared;

/// How long a connection doomed by [`Fault::ResetAfterRequest`] waits for
/// the server to start replying before it is reset anyway. Waiting for the
/// reply makes sure the server has read and handled the request.
///
/// [`Fault::ResetAfterRequest`]: crate::Fault::ResetAfterRequest
const RESET_GRACE: Duration = Duration::from_secs(1);

/// Per-connection state the two pipes share.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// Set once the connection took the `ResetAfterRequest` shot.
    doomed: watch::Sender<bool>,
}

impl ConnState {
    fn new() -> Self {
        Self {
            doomed: watch::Sender::new(false),
        }
    }

    /// Marks the connection for a reset once the server has the request.
    pub(crate) fn doom(&self) {
        self.doomed.send_replace(true);
    }

    pub(crate) fn is_doomed(&self) -> bool {
        *self.doomed.borrow()
    }

    /// Completes [`RESET_GRACE`] after the connection was doomed.
    async fn grace_over(&self) {
        let mut doomed = self.doomed.subscribe();
        // Cannot fail: `self` holds the sender.
        let _ = doomed.wait_for(|doomed| *doomed).await;
        sleep(RESET_GRACE).await;
    }
}

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

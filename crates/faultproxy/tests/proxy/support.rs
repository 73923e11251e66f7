//! Servers to put behind the proxy, and helpers to talk through it.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout};

/// How long to wait before deciding that nothing arrives. Only ever used
/// to show an absence, so a slow machine cannot make a test fail.
pub(crate) const NOTHING: Duration = Duration::from_millis(500);

/// How long to wait for something that must happen. Generous: the machine
/// is shared and busy.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// Starts a server that echoes every connection's bytes back.
pub(crate) async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
    let addr = listener.local_addr().expect("echo addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut rd, mut wr) = stream.split();
                let _ = tokio::io::copy(&mut rd, &mut wr).await;
            });
        }
    });
    addr
}

/// What a recording server saw.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A connection was accepted.
    Connected,
    /// Bytes arrived on a connection.
    Received(Vec<u8>),
    /// A connection ended: cleanly, or with this error.
    Ended(Result<(), io::ErrorKind>),
}

/// Starts a server that reports everything it sees and answers each chunk
/// it receives with `reply`.
pub(crate) async fn recording_server(
    reply: &'static [u8],
) -> (SocketAddr, mpsc::UnboundedReceiver<Event>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind recorder");
    let addr = listener.local_addr().expect("recorder addr");
    let (events, seen) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let events = events.clone();
            let _ = events.send(Event::Connected);
            tokio::spawn(async move {
                let mut buf = vec![0; 64 * 1024];
                let ended = loop {
                    match stream.read(&mut buf).await {
                        Ok(0) => break Ok(()),
                        Ok(n) => {
                            let _ = events.send(Event::Received(buf[..n].to_vec()));
                            if let Err(e) = stream.write_all(reply).await {
                                break Err(e.kind());
                            }
                        }
                        Err(e) => break Err(e.kind()),
                    }
                };
                let _ = events.send(Event::Ended(ended));
            });
        }
    });
    (addr, seen)
}

/// The next event of a recording server.
pub(crate) async fn next_event(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    timeout(PATIENCE, events.recv())
        .await
        .expect("the server saw nothing")
        .expect("the server is gone")
}

/// Asserts that a recording server sees nothing for a while.
pub(crate) async fn assert_server_idle(events: &mut mpsc::UnboundedReceiver<Event>) {
    if let Ok(event) = timeout(NOTHING, events.recv()).await {
        panic!("the server saw {event:?}");
    }
}

/// Connects to `addr`.
pub(crate) async fn connect(addr: SocketAddr) -> TcpStream {
    timeout(PATIENCE, TcpStream::connect(addr))
        .await
        .expect("connect timed out")
        .expect("connect failed")
}

/// Sends `request` and reads exactly `reply_len` bytes back.
pub(crate) async fn round_trip(
    stream: &mut TcpStream,
    request: &[u8],
    reply_len: usize,
) -> Vec<u8> {
    stream.write_all(request).await.expect("write");
    let mut reply = vec![0; reply_len];
    timeout(PATIENCE, stream.read_exact(&mut reply))
        .await
        .expect("no reply")
        .expect("read");
    reply
}

/// Asserts that nothing arrives on `stream` for a while, and that it
/// stays open.
pub(crate) async fn assert_silent(stream: &mut TcpStream) {
    let mut buf = [0; 64];
    if let Ok(read) = timeout(NOTHING, stream.read(&mut buf)).await {
        panic!("expected silence, read {read:?}");
    }
}

/// Reads `stream` until it ends, discarding data, and returns how:
/// `Ok(())` for an end of stream, or the error's kind.
pub(crate) async fn ending(stream: &mut TcpStream) -> Result<(), io::ErrorKind> {
    let mut buf = [0; 1024];
    loop {
        let read = timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("the connection did not end");
        match read {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(e.kind()),
        }
    }
}

/// Waits until `condition` holds, failing after [`PATIENCE`].
pub(crate) async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let give_up = tokio::time::Instant::now() + PATIENCE;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < give_up,
            "never happened: {what}"
        );
        sleep(Duration::from_millis(10)).await;
    }
}

//! One direction of a connection: read chunks, apply the fault, write.

use std::collections::VecDeque;
use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, sleep_until};
use tracing::debug;

use crate::Direction;
use crate::doom::ConnState;
use crate::shared::Shared;

/// Bytes read at once; also the largest chunk a delay holds back.
const CHUNK: usize = 16 * 1024;

/// Chunks a delay may hold back before reading pauses. Pausing pushes back
/// on the sender like a full TCP window instead of buffering without end.
const MAX_HELD: usize = 256;

/// A chunk held back by a delay.
struct Held {
    arrived: Instant,
    bytes: Vec<u8>,
}

/// What happens to a chunk that is due.
enum Verdict {
    Deliver,
    Swallow,
    /// The connection is being reset after a request: no reply may pass.
    Withhold,
}

/// Copies one direction of a connection under the proxy's faults.
pub(crate) struct Pipe<'a> {
    dir: Direction,
    shared: &'a Shared,
    conn: &'a ConnState,
}

impl<'a> Pipe<'a> {
    pub(crate) fn new(dir: Direction, shared: &'a Shared, conn: &'a ConnState) -> Self {
        Self { dir, shared, conn }
    }

    /// Copies from `from` to `to` until `from` ends, then closes `to` for
    /// writing so the peer sees the end of stream too.
    ///
    /// Fails on an I/O error on either side, and, in the reply direction,
    /// as soon as a reply would pass a connection that is to be reset.
    pub(crate) async fn run<R, W>(self, mut from: R, mut to: W) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut faults = self.shared.fault.subscribe();
        let mut held: VecDeque<Held> = VecDeque::new();
        let mut buf = vec![0; CHUNK];
        let mut ended = false;
        loop {
            // Marks the current fault seen, so `changed` wakes only on news.
            let delay = faults.borrow_and_update().delay(self.dir);
            while let Some(front) = held.front()
                && front.arrived + delay <= Instant::now()
            {
                if let Some(chunk) = held.pop_front() {
                    self.deliver(&mut to, &chunk.bytes).await?;
                }
            }
            if ended && held.is_empty() {
                if self.withholding() {
                    return Err(withheld());
                }
                return to.shutdown().await;
            }
            let next_due = held.front().map(|chunk| chunk.arrived + delay);
            tokio::select! {
                biased;
                changed = faults.changed() => {
                    // The sender lives in `Shared`, which outlives every pipe.
                    if changed.is_err() {
                        return Ok(());
                    }
                }
                () = sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {}
                read = from.read(&mut buf), if !ended && held.len() < MAX_HELD => {
                    let arrived = Instant::now();
                    match read? {
                        0 => ended = true,
                        n => self.arrive(&mut to, &mut held, arrived, &buf[..n]).await?,
                    }
                }
            }
        }
    }

    /// Handles a chunk that just arrived: deliver it now, or hold it back.
    async fn arrive<W>(
        &self,
        to: &mut W,
        held: &mut VecDeque<Held>,
        arrived: Instant,
        bytes: &[u8],
    ) -> io::Result<()>
    where
        W: AsyncWrite + Unpin,
    {
        if self.dir == Direction::ToServer && self.shared.take_reset_after_request(bytes) {
            debug!(
                bytes = bytes.len(),
                "forwarding the request, then resetting"
            );
            self.conn.doom();
        }
        let fault = self.shared.fault();
        // Chunks to swallow go now: a partition loses them, it does not
        // keep them for later.
        let now = held.is_empty() && fault.delay(self.dir).is_zero();
        if now || fault.swallows(self.dir) || self.withholding() {
            return self.deliver(to, bytes).await;
        }
        held.push_back(Held {
            arrived,
            bytes: bytes.to_vec(),
        });
        Ok(())
    }

    /// Writes a due chunk, or throws it away if the fault now says so.
    async fn deliver<W>(&self, to: &mut W, bytes: &[u8]) -> io::Result<()>
    where
        W: AsyncWrite + Unpin,
    {
        let counters = &self.shared.counters;
        match self.verdict() {
            Verdict::Deliver => {
                to.write_all(bytes).await?;
                counters.delivered(self.dir, bytes.len());
            }
            Verdict::Swallow => counters.swallowed(self.dir, bytes.len()),
            Verdict::Withhold => {
                counters.swallowed(self.dir, bytes.len());
                return Err(withheld());
            }
        }
        Ok(())
    }

    fn verdict(&self) -> Verdict {
        if self.withholding() {
            Verdict::Withhold
        } else if self.shared.fault().swallows(self.dir) {
            Verdict::Swallow
        } else {
            Verdict::Deliver
        }
    }

    /// Whether this pipe carries replies on a connection doomed by
    /// [`Fault::ResetAfterRequest`](crate::Fault::ResetAfterRequest).
    fn withholding(&self) -> bool {
        self.dir == Direction::ToClient && self.conn.is_doomed()
    }
}

/// The error that ends a doomed connection once the server answers.
fn withheld() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "reply withheld: resetting after the request",
    )
}

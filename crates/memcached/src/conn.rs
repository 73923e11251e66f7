//! One pipelined connection to one memcached server.
//!
//! Callers hand a [`Batch`] to the connection and await its replies. A
//! writer task sends batches in order, coalescing those queued together
//! into one write; a reader task parses replies and hands each batch its
//! own, in order. Many tasks share one connection without waiting for each
//! other's round trips.
//!
//! Cancel safety: a caller that stops waiting only drops its reply channel.
//! A batch not yet written is skipped; one already written still has its
//! replies read (and thrown away), so the stream never falls out of step.
//!
//! Every batch carries a deadline, the server's patience. If its replies
//! have not all arrived by then, the server is judged unresponsive: the
//! connection is closed and every batch on it fails, and the pool opens a
//! new one on next use. Callers may stop waiting sooner.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::proto::{Batch, Expect, Malformed, Outcome, parse};

/// How many bytes of queued batches go into one write at most.
const MAX_WRITE: usize = 64 * 1024;

/// Why a batch got no replies.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    /// Connecting failed.
    #[error("cannot connect: {0}")]
    Connect(#[source] io::Error),
    /// Connecting took too long.
    #[error("connecting timed out after {0:?}")]
    ConnectTimeout(Duration),
    /// The connection was already closed; the batch was not sent, so it is
    /// safe to send it again on a new connection.
    #[error("the connection was closed before the request was sent")]
    NotSent,
    /// The connection failed while the batch was in flight.
    #[error("the connection failed: {0}")]
    Failed(String),
    /// The replies did not arrive in time.
    #[error("no reply within {0:?}")]
    TimedOut(Duration),
}

struct Job {
    bytes: Vec<u8>,
    expect: Vec<Expect>,
    deadline: Instant,
    reply: oneshot::Sender<Result<Vec<Outcome>, ConnError>>,
}

struct Pending {
    expect: Vec<Expect>,
    got: Vec<Outcome>,
    deadline: Instant,
    reply: oneshot::Sender<Result<Vec<Outcome>, ConnError>>,
}

/// A handle to one connection; clones share it.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    jobs: mpsc::UnboundedSender<Job>,
    alive: Arc<AtomicBool>,
}

impl Connection {
    /// Connects to `addr` within `timeout` and starts the connection's tasks.
    pub(crate) async fn open(addr: &str, timeout: Duration) -> Result<Self, ConnError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ConnError::ConnectTimeout(timeout))?
            .map_err(ConnError::Connect)?;
        stream.set_nodelay(true).map_err(ConnError::Connect)?;
        let (read, write) = stream.into_split();
        let (jobs, job_rx) = mpsc::unbounded_channel();
        let (pending_tx, pending_rx) = mpsc::unbounded_channel();
        let (closed_tx, closed_rx) = watch::channel(false);
        let alive = Arc::new(AtomicBool::new(true));
        tokio::spawn(write_loop(
            write,
            job_rx,
            pending_tx,
            closed_rx,
            alive.clone(),
        ));
        tokio::spawn(read_loop(read, pending_rx, closed_tx, alive.clone()));
        Ok(Self { jobs, alive })
    }

    /// Whether the connection can still carry requests.
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire) && !self.jobs.is_closed()
    }

    /// Sends `batch` and waits at most `timeout` for all of its replies.
    ///
    /// A caller may give up sooner than the server is given to answer: the
    /// connection is closed only when a reply is later than `patience` (or
    /// `timeout`, if longer), so one impatient caller does not fail the
    /// others sharing the connection.
    pub(crate) async fn call(
        &self,
        batch: Batch,
        timeout: Duration,
        patience: Duration,
    ) -> Result<Vec<Outcome>, ConnError> {
        let (bytes, expect) = batch.into_parts();
        let (reply, answer) = oneshot::channel();
        let job = Job {
            bytes,
            expect,
            deadline: Instant::now() + timeout.max(patience),
            reply,
        };
        if !self.is_alive() || self.jobs.send(job).is_err() {
            return Err(ConnError::NotSent);
        }
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(ConnError::Failed("the connection closed".into())),
            Err(_) => Err(ConnError::TimedOut(timeout)),
        }
    }
}

async fn write_loop(
    mut write: OwnedWriteHalf,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    pending: mpsc::UnboundedSender<Pending>,
    mut closed: watch::Receiver<bool>,
    alive: Arc<AtomicBool>,
) {
    let mut buf = Vec::with_capacity(4096);
    'outer: loop {
        let first = tokio::select! {
            job = jobs.recv() => job,
            _ = closed.wait_for(|closed| *closed) => None,
        };
        let Some(first) = first else {
            break;
        };
        buf.clear();
        let mut next = Some(first);
        while let Some(job) = next {
            // A caller that already gave up need not be asked for.
            if !job.reply.is_closed() {
                buf.extend_from_slice(&job.bytes);
                let entry = Pending {
                    got: Vec::with_capacity(job.expect.len()),
                    expect: job.expect,
                    deadline: job.deadline,
                    reply: job.reply,
                };
                // The reader learns of a batch before its bytes are sent, so
                // it always knows whose replies it reads.
                if let Err(mpsc::error::SendError(entry)) = pending.send(entry) {
                    let _ = entry.reply.send(Err(ConnError::NotSent));
                    break 'outer;
                }
            }
            next = if buf.len() < MAX_WRITE {
                jobs.try_recv().ok()
            } else {
                None
            };
        }
        if buf.is_empty() {
            continue;
        }
        if let Err(error) = write.write_all(&buf).await {
            tracing::debug!(%error, "memcached write failed; closing the connection");
            break;
        }
    }
    alive.store(false, Ordering::Release);
    // Batches queued but never written were not sent.
    jobs.close();
    while let Ok(job) = jobs.try_recv() {
        let _ = job.reply.send(Err(ConnError::NotSent));
    }
    let _ = write.shutdown().await;
}

async fn read_loop(
    mut read: OwnedReadHalf,
    mut incoming: mpsc::UnboundedReceiver<Pending>,
    closed: watch::Sender<bool>,
    alive: Arc<AtomicBool>,
) {
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let failure = loop {
        while let Ok(entry) = incoming.try_recv() {
            queue.push_back(entry);
        }
        if let Err(failure) = deliver(&mut buf, &mut queue) {
            break failure;
        }
        let deadline = queue.front().map(|entry| entry.deadline);
        tokio::select! {
            entry = incoming.recv() => match entry {
                Some(entry) => queue.push_back(entry),
                None => break "the writer stopped".to_owned(),
            },
            read = read.read_buf(&mut buf) => match read {
                Ok(0) => break "the server closed the connection".to_owned(),
                Ok(_) => {
                    // Replies may belong to batches sent since we last looked.
                    while let Ok(entry) = incoming.try_recv() {
                        queue.push_back(entry);
                    }
                }
                Err(error) => break format!("read failed: {error}"),
            },
            () = sleep_until(deadline), if deadline.is_some() => {
                break "a reply did not arrive in time".to_owned();
            }
        }
    };
    alive.store(false, Ordering::Release);
    let _ = closed.send(true);
    if !queue.is_empty() {
        tracing::debug!(reason = %failure, in_flight = queue.len(), "memcached connection failed");
    }
    incoming.close();
    while let Ok(entry) = incoming.try_recv() {
        queue.push_back(entry);
    }
    for entry in queue {
        let _ = entry.reply.send(Err(ConnError::Failed(failure.clone())));
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Hands out every complete reply in `buf` to the batches in `queue`.
/// Fails when the stream is malformed, when a reply arrives that nobody
/// asked for, or after a refusal that leaves the stream in doubt.
fn deliver(buf: &mut Vec<u8>, queue: &mut VecDeque<Pending>) -> Result<(), String> {
    let mut used = 0;
    let mut poisoned = None;
    while used < buf.len() {
        let Some(front) = queue.front_mut() else {
            return Err("the server sent a reply nobody asked for".into());
        };
        let expect = front.expect[front.got.len()];
        let (len, outcome) = match parse(&buf[used..], expect) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => break,
            Err(Malformed(what)) => return Err(format!("malformed reply: {what}")),
        };
        used += len;
        if let Err(refusal) = &outcome
            && refusal.poisons_connection()
        {
            poisoned = Some(format!("the server refused a command: {refusal}"));
        }
        front.got.push(outcome);
        if front.got.len() == front.expect.len() {
            let done = queue.pop_front().expect("the front exists");
            let _ = done.reply.send(Ok(done.got));
        }
        if poisoned.is_some() {
            break;
        }
    }
    buf.drain(..used);
    match poisoned {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::net::TcpListener;

    use super::*;
    use crate::proto::{Answer, Code, Key, Refusal};

    /// A stand-in server: answers `mg <key>` with the key as the value,
    /// after the delay the key names (`slow-<ms>`), or never (`mute`), or
    /// with a client error (`bad`). `quit` closes the connection.
    async fn fake_server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let key = line.split(' ').nth(1).unwrap_or("").to_owned();
                        if key == "quit" {
                            return;
                        }
                        if key == "mute" {
                            continue;
                        }
                        if let Some(ms) = key.strip_prefix("slow-") {
                            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
                        }
                        let reply = if key == "bad" {
                            "CLIENT_ERROR bad command line format\r\n".to_owned()
                        } else {
                            format!("VA {} c1\r\n{key}\r\n", key.len())
                        };
                        if write.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn get(key: &str) -> Batch {
        Batch::new().mg(&Key::new(key.to_owned()).unwrap(), "v")
    }

    fn value(outcomes: &[Outcome]) -> String {
        match &outcomes[0] {
            Ok(Answer::Meta(reply)) => {
                assert_eq!(reply.code, Code::Va);
                String::from_utf8(reply.value.clone().unwrap().to_vec()).unwrap()
            }
            other => panic!("{other:?}"),
        }
    }

    const LONG: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn concurrent_callers_each_get_their_own_replies() {
        let connection = Connection::open(&fake_server().await, LONG).await.unwrap();
        let calls = (0..200).map(|i| {
            let connection = connection.clone();
            async move {
                let key = format!("k{i}");
                let outcomes = connection.call(get(&key), LONG, LONG).await.unwrap();
                assert_eq!(value(&outcomes), key);
            }
        });
        futures::future::join_all(calls).await;
        // A batch gets all of its replies, in order.
        let batch = get("a").mg(&Key::new("b".into()).unwrap(), "v");
        let outcomes = connection.call(batch, LONG, LONG).await.unwrap();
        assert_eq!(outcomes.len(), 2);
        assert_eq!(value(&outcomes[1..]), "b");
    }

    #[tokio::test]
    async fn a_caller_that_gives_up_leaves_the_stream_in_step() {
        let connection = Connection::open(&fake_server().await, LONG).await.unwrap();
        let impatient = connection
            .call(get("slow-300"), Duration::from_millis(20), LONG)
            .await;
        assert!(
            matches!(impatient, Err(ConnError::TimedOut(_))),
            "{impatient:?}"
        );
        // The late reply is read and dropped; the next caller gets its own.
        let outcomes = connection.call(get("next"), LONG, LONG).await.unwrap();
        assert_eq!(value(&outcomes), "next");
        assert!(connection.is_alive());
    }

    #[tokio::test]
    async fn a_server_that_does_not_answer_is_dropped() {
        let connection = Connection::open(&fake_server().await, LONG).await.unwrap();
        let patience = Duration::from_millis(100);
        let outcome = connection.call(get("mute"), patience, patience).await;
        assert!(
            matches!(outcome, Err(ConnError::Failed(_) | ConnError::TimedOut(_))),
            "{outcome:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!connection.is_alive());
        let after = connection.call(get("x"), LONG, patience).await;
        assert!(matches!(after, Err(ConnError::NotSent)), "{after:?}");
    }

    #[tokio::test]
    async fn a_closed_connection_is_noticed() {
        let connection = Connection::open(&fake_server().await, LONG).await.unwrap();
        let outcome = connection.call(get("quit"), LONG, LONG).await;
        assert!(matches!(outcome, Err(ConnError::Failed(_))), "{outcome:?}");
        assert!(!connection.is_alive());
    }

    #[tokio::test]
    async fn a_client_error_is_reported_then_the_connection_closed() {
        let connection = Connection::open(&fake_server().await, LONG).await.unwrap();
        let outcomes = connection.call(get("bad"), LONG, LONG).await.unwrap();
        assert_eq!(
            outcomes[0],
            Err(Refusal::Client("bad command line format".into()))
        );
        // Give the reader a moment to close; then nothing more is sent.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!connection.is_alive());
    }

    #[tokio::test]
    async fn connecting_to_nothing_fails_at_once() {
        let port = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let outcome = Connection::open(&format!("127.0.0.1:{port}"), LONG).await;
        assert!(matches!(outcome, Err(ConnError::Connect(_))), "{outcome:?}");
    }
}

//! The connection pool: a few pipelined connections per server, opened on
//! first use and reopened after a failure. Each connection learns, as it
//! opens, which memcached process it reaches (see [`crate::instance`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock_core::Error;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::conn::{ConnError, Connection};
use crate::instance::Instance;
use crate::proto::{Answer, Batch, Outcome, Refusal, Reply};

pub(crate) const BACKEND: &str = "memcached";

/// One server and its connections.
#[derive(Debug)]
pub(crate) struct Server {
    addr: String,
    slots: Vec<Mutex<Option<Open>>>,
    next: AtomicUsize,
    /// How long the server may take to answer before its connection is
    /// judged dead.
    patience: Duration,
}

/// An open connection and the memcached process it reaches (`None` when
/// the server's `stats` did not say).
#[derive(Debug, Clone)]
struct Open {
    connection: Connection,
    instance: Option<Instance>,
}

impl Server {
    pub(crate) fn new(addr: String, connections: usize, patience: Duration) -> Self {
        Self {
            addr,
            slots: (0..connections.max(1)).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            patience,
        }
    }

    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends the batch that `batch_for` makes for the process the
    /// connection reaches, or nothing when it makes none (`Ok(None)`).
    /// Returns one outcome per command, and that process, within `timeout`
    /// for connecting and answering together.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call leaves the connection usable.
    async fn send(
        &self,
        timeout: Duration,
        batch_for: impl Fn(Option<Instance>) -> Option<Batch>,
    ) -> Result<Option<(Vec<Outcome>, Option<Instance>)>, Error> {
        let deadline = Instant::now() + timeout;
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()];
        // A connection found dead before the batch went out is replaced
        // once; a batch that may have been sent is never sent twice.
        for _ in 0..2 {
            let open = self.connection(slot, deadline).await?;
            let Some(batch) = batch_for(open.instance) else {
                return Ok(None);
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match open.connection.call(batch, left, self.patience).await {
                Ok(outcomes) => return Ok(Some((outcomes, open.instance))),
                Err(ConnError::NotSent) => continue,
                Err(error) => return Err(self.error(error)),
            }
        }
        Err(self.error(ConnError::NotSent))
    }

    /// Sends `batch` and returns one outcome per command, and the process
    /// that answered.
    async fn call(
        &self,
        batch: Batch,
        timeout: Duration,
    ) -> Result<(Vec<Outcome>, Option<Instance>), Error> {
        let sent = self.send(timeout, |_| Some(batch.clone())).await?;
        Ok(sent.expect("every connection gets the batch"))
    }

    /// Sends commands that each expect one meta reply, and returns the
    /// replies; a refusal by the server becomes an error.
    pub(crate) async fn meta(&self, batch: Batch, timeout: Duration) -> Result<Vec<Reply>, Error> {
        Ok(self.meta_from(batch, timeout).await?.0)
    }

    /// As [`meta`](Self::meta), and the process that answered, so that the
    /// CAS values in the replies can be trusted later (see
    /// [`crate::instance`]).
    pub(crate) async fn meta_from(
        &self,
        batch: Batch,
        timeout: Duration,
    ) -> Result<(Vec<Reply>, Option<Instance>), Error> {
        let (outcomes, instance) = self.call(batch, timeout).await?;
        Ok((self.replies(outcomes)?, instance))
    }

    /// Sends one command expecting one meta reply.
    pub(crate) async fn meta_one(&self, batch: Batch, timeout: Duration) -> Result<Reply, Error> {
        self.meta(batch, timeout)
            .await?
            .pop()
            .ok_or_else(|| self.message("no reply"))
    }

    /// Sends one command expecting one meta reply, only over a connection
    /// to `instance`: for a command conditional on a CAS that `instance`
    /// issued. `Ok(None)` when the server's connection now reaches another
    /// process, and nothing was sent. A process that `stats` did not
    /// identify (`None`) matches only connections that cannot tell either.
    pub(crate) async fn meta_one_to(
        &self,
        instance: Option<Instance>,
        batch: Batch,
        timeout: Duration,
    ) -> Result<Option<Reply>, Error> {
        let Some(mut replies) = self.meta_to(instance, batch, timeout).await? else {
            return Ok(None);
        };
        let reply = replies.pop();
        reply.map(Some).ok_or_else(|| self.message("no reply"))
    }

    /// As [`meta_one_to`](Self::meta_one_to), for commands that each
    /// expect one meta reply, sent together in one write.
    pub(crate) async fn meta_to(
        &self,
        instance: Option<Instance>,
        batch: Batch,
        timeout: Duration,
    ) -> Result<Option<Vec<Reply>>, Error> {
        let Some((outcomes, _)) = self
            .send(timeout, |reached| {
                (reached == instance).then(|| batch.clone())
            })
            .await?
        else {
            return Ok(None);
        };
        self.replies(outcomes).map(Some)
    }

    /// The server's `stats`.
    pub(crate) async fn stats(&self, timeout: Duration) -> Result<Vec<(String, String)>, Error> {
        let (outcomes, _) = self.call(Batch::new().stats(), timeout).await?;
        self.stats_of(outcomes)
    }

    /// The server's `stats settings`.
    pub(crate) async fn settings(&self, timeout: Duration) -> Result<Vec<(String, String)>, Error> {
        let (outcomes, _) = self.call(Batch::new().stats_settings(), timeout).await?;
        self.stats_of(outcomes)
    }

    fn replies(&self, outcomes: Vec<Outcome>) -> Result<Vec<Reply>, Error> {
        outcomes
            .into_iter()
            .map(|outcome| match outcome {
                Ok(Answer::Meta(reply)) => Ok(reply),
                Ok(Answer::Stats(_)) => Err(self.message("a stats reply to a meta command")),
                // Left to the caller: a refused store has consequences
                // (see `Code::ServerError`).
                Err(Refusal::Server(message)) => Ok(Reply::server_error(&message)),
                Err(refusal) => Err(self.refused(&refusal)),
            })
            .collect()
    }

    fn stats_of(&self, mut outcomes: Vec<Outcome>) -> Result<Vec<(String, String)>, Error> {
        match outcomes.pop() {
            Some(Ok(Answer::Stats(stats))) => Ok(stats),
            Some(Err(refusal)) => Err(self.refused(&refusal)),
            _ => Err(self.message("no stats in the reply")),
        }
    }

    async fn connection(
        &self,
        slot: &Mutex<Option<Open>>,
        deadline: Instant,
    ) -> Result<Open, Error> {
        // Usually free: only then is a timer worth setting up.
        let mut slot = match slot.try_lock() {
            Ok(slot) => slot,
            Err(_) => {
                let left = deadline.saturating_duration_since(Instant::now());
                tokio::time::timeout(left, slot.lock())
                    .await
                    .map_err(|_| self.error(ConnError::ConnectTimeout(left)))?
            }
        };
        if let Some(open) = slot.as_ref().filter(|open| open.connection.is_alive()) {
            return Ok(open.clone());
        }
        let open = self.open(deadline).await?;
        *slot = Some(open.clone());
        Ok(open)
    }

    /// Opens a connection and asks, first thing on it, which process it
    /// reaches: one round trip per connection, not per command.
    async fn open(&self, deadline: Instant) -> Result<Open, Error> {
        let left = deadline.saturating_duration_since(Instant::now());
        let connection = Connection::open(&self.addr, left)
            .await
            .map_err(|error| self.error(error))?;
        let left = deadline.saturating_duration_since(Instant::now());
        let outcomes = connection
            .call(Batch::new().stats(), left, self.patience)
            .await
            .map_err(|error| self.error(error))?;
        let instance = Instance::from_stats(&self.stats_of(outcomes)?);
        match instance {
            Some(instance) => {
                tracing::debug!(server = %self.addr, ?instance, "connected to memcached");
            }
            None => tracing::debug!(
                server = %self.addr,
                "connected; `stats` does not identify the process, so no CAS is remembered"
            ),
        }
        Ok(Open {
            connection,
            instance,
        })
    }

    pub(crate) fn message(&self, message: impl std::fmt::Display) -> Error {
        Error::Backend {
            backend: BACKEND,
            message: format!("{}: {message}", self.addr),
            source: None,
        }
    }

    fn refused(&self, refusal: &Refusal) -> Error {
        self.message(format!("the server refused a command: {refusal}"))
    }

    fn error(&self, error: ConnError) -> Error {
        Error::backend(BACKEND, format!("{}: {error}", self.addr), error)
    }
}

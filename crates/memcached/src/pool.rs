//! The connection pool: a few pipelined connections per server, opened on
//! first use and reopened after a failure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock_core::Error;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::conn::{ConnError, Connection};
use crate::proto::{Answer, Batch, Outcome, Refusal, Reply};

pub(crate) const BACKEND: &str = "memcached";

/// One server and its connections.
#[derive(Debug)]
pub(crate) struct Server {
    addr: String,
    slots: Vec<Mutex<Option<Connection>>>,
    next: AtomicUsize,
    /// How long the server may take to answer before its connection is
    /// judged dead.
    patience: Duration,
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

    /// Sends `batch` and returns one outcome per command, within `timeout`
    /// for connecting and answering together.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call leaves the connection usable.
    pub(crate) async fn call(
        &self,
        batch: Batch,
        timeout: Duration,
    ) -> Result<Vec<Outcome>, Error> {
        let deadline = Instant::now() + timeout;
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()];
        // A connection found dead before the batch went out is replaced
        // once; a batch that may have been sent is never sent twice.
        for _ in 0..2 {
            let connection = self.connection(slot, deadline).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            match connection.call(batch.clone(), left, self.patience).await {
                Ok(outcomes) => return Ok(outcomes),
                Err(ConnError::NotSent) => continue,
                Err(error) => return Err(self.error(error)),
            }
        }
        Err(self.error(ConnError::NotSent))
    }

    /// Sends commands that each expect one meta reply, and returns the
    /// replies; a refusal by the server becomes an error.
    pub(crate) async fn meta(&self, batch: Batch, timeout: Duration) -> Result<Vec<Reply>, Error> {
        let outcomes = self.call(batch, timeout).await?;
        outcomes
            .into_iter()
            .map(|outcome| match outcome {
                Ok(Answer::Meta(reply)) => Ok(reply),
                Ok(Answer::Stats(_)) => Err(self.message("a stats reply to a meta command")),
                Err(refusal) => Err(self.refused(&refusal)),
            })
            .collect()
    }

    /// Sends one command expecting one meta reply.
    pub(crate) async fn meta_one(&self, batch: Batch, timeout: Duration) -> Result<Reply, Error> {
        self.meta(batch, timeout)
            .await?
            .pop()
            .ok_or_else(|| self.message("no reply"))
    }

    /// The server's `stats`.
    pub(crate) async fn stats(&self, timeout: Duration) -> Result<Vec<(String, String)>, Error> {
        match self.call(Batch::new().stats(), timeout).await?.pop() {
            Some(Ok(Answer::Stats(stats))) => Ok(stats),
            Some(Err(refusal)) => Err(self.refused(&refusal)),
            _ => Err(self.message("no stats in the reply")),
        }
    }

    async fn connection(
        &self,
        slot: &Mutex<Option<Connection>>,
        deadline: Instant,
    ) -> Result<Connection, Error> {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut slot = tokio::time::timeout(left, slot.lock())
            .await
            .map_err(|_| self.error(ConnError::ConnectTimeout(left)))?;
        if let Some(connection) = slot.as_ref().filter(|c| c.is_alive()) {
            return Ok(connection.clone());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let connection = Connection::open(&self.addr, left)
            .await
            .map_err(|error| self.error(error))?;
        tracing::debug!(server = %self.addr, "connected to memcached");
        *slot = Some(connection.clone());
        Ok(connection)
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

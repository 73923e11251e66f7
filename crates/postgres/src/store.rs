//! What both modes keep of the server alike: the pool, the channels that
//! releases are announced on, the listening connection, the record of
//! election terms and the sweep of idle rows. Each mode owns one; the
//! backend answers from it what does not depend on the mode.

use distlock_core::Result;

use crate::pool::Connections;
use crate::sweep::{Sweep, Sweeper};
use crate::terms::TermRecord;
use crate::wake::{Channels, Listener};

pub(crate) struct Store {
    pub(crate) connections: Connections,
    pub(crate) channels: Channels,
    /// Hears releases for this backend's waiters; stops when dropped.
    pub(crate) listener: Listener,
    /// The record of election terms, unless its table could not be made.
    pub(crate) terms: Option<TermRecord>,
    sweep: Sweep,
    /// Sweeps now and then; stops when dropped.
    _sweeper: Sweeper,
}

impl Store {
    /// The parts of a mode's backend, its sweep started.
    pub(crate) fn new(
        connections: Connections,
        channels: Channels,
        listener: Listener,
        terms: Option<TermRecord>,
        sweep: Sweep,
    ) -> Self {
        Self {
            connections,
            channels,
            listener,
            terms,
            _sweeper: sweep.clone().start(),
            sweep,
        }
    }

    /// Deletes the rows of names nobody holds or waits for; see
    /// [`PostgresBackend::remove_idle_rows`](crate::PostgresBackend::remove_idle_rows).
    ///
    /// # Errors
    /// A backend error.
    ///
    /// # Cancel safety
    /// As [`Sweep::run`].
    pub(crate) async fn remove_idle_rows(&self) -> Result<u64> {
        self.sweep.run().await
    }
}

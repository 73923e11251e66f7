//! The public backend: it opens the server, prepares the mode's table and
//! the listening connection, answers what both modes answer alike from
//! their [`Store`], and passes the rest to its mode.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, Extended, GrantState, HandOver,
    HandOvers, Lease, ReleaseWatch, Resumes, ServerInfo, WaitState, WaiterList, Wakeups,
};
use distlock_core::{Error, LockInfo, LockName, Result, Waiter};

use crate::advisory::{self, AdvisoryMode};
use crate::config::{Mode, PostgresConfig};
use crate::deployment;
use crate::error::{from_driver, within};
use crate::lease::{self, LeaseMode};
use crate::pool::{Connections, SETUP_TIMEOUT};
use crate::store::Store;
use crate::table::{self, Layout, TableName};
use crate::wake::{Channels, Listener, WakeUpQueue, WakeUps};

/// Locks kept on one PostgreSQL server, as rows of a table (`mode=lease`)
/// or as session advisory locks (`mode=advisory`). See the
/// [crate documentation](crate) for the modes and their guarantees.
pub struct PostgresBackend {
    mode: Modes,
    config: PostgresConfig,
}

/// The mode every call goes to. Boxed: each is large, and they differ.
enum Modes {
    Lease(Box<LeaseMode>),
    Advisory(Box<AdvisoryMode>),
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("config", &self.config)
            .field("wake_ups", &self.wake_ups())
            .finish_non_exhaustive()
    }
}

impl PostgresBackend {
    /// Opens the backend at `url` (see [`PostgresConfig::parse`]), creating
    /// the mode's table if it is missing.
    ///
    /// # Errors
    /// As [`connect`](Self::connect), and [`Error::InvalidConfig`] for a
    /// malformed URL.
    ///
    /// # Cancel safety
    /// Dropping the future leaves at most a table created, whole or not at
    /// all.
    pub async fn open(url: &str) -> Result<Self> {
        Self::connect(PostgresConfig::parse(url)?).await
    }

    /// Opens the backend `config` describes, creating the mode's table (and
    /// its schema) if missing, each step within [`SETUP_TIMEOUT`], and starts opening
    /// its listening connection for release wake-ups in the background
    /// (see [`wake_ups`](Self::wake_ups)).
    ///
    /// # Errors
    /// [`Error::Denied`] for refused credentials or missing privileges;
    /// [`Error::InvalidConfig`] when `sslrootcert` cannot be read or holds
    /// no CA certificate, when a table of that name exists but was not made
    /// by distlock for this mode, or, in advisory mode, when the server is
    /// older than PostgreSQL 14 or the URL reaches a transaction pooler;
    /// a backend error when the server cannot be reached, does not offer TLS
    /// that `sslmode` requires, or presents a certificate that fails
    /// `sslmode`'s checks (the message says which check, and how to fix
    /// it). No message includes the credentials.
    ///
    /// # Cancel safety
    /// As [`open`](Self::open).
    pub async fn connect(config: PostgresConfig) -> Result<Self> {
        // The TLS connectors, built once for every connection to come.
        let (endpoint, listen) = config.endpoints()?;
        let what = format!("connecting to {}", config.redacted_url());
        let (client, connection) = within(&what, SETUP_TIMEOUT, endpoint.connect())
            .await?
            .map_err(|error| from_driver(&what, error))?;
        // The setup connection lives until `client` is dropped below.
        let connection = tokio::spawn(connection);
        let layout = match config.mode {
            Mode::Lease => Layout::Lease,
            Mode::Advisory => Layout::Advisory,
        };
        let mut ready = table::ensure(&client, &config.table, layout, SETUP_TIMEOUT).await;
        if ready.is_ok() && config.mode == Mode::Advisory {
            ready = advisory::check_server(&client, SETUP_TIMEOUT).await;
        }
        let records_terms = match ready {
            Ok(()) => terms_table(&client, &config.table).await,
            Err(_) => Ok(false),
        };
        drop(client);
        connection.abort();
        ready?;
        let records_terms = records_terms?;
        let connections = Connections::new(endpoint.clone())?;
        let channels = Channels::new(&config.table);
        let listener = Listener::start(listen, connections.clone(), channels);
        if config.mode == Mode::Lease {
            connections
                .prepare_unless_pooled(config.advisory_class, SETUP_TIMEOUT)
                .await?;
        }
        let mode = match config.mode {
            Mode::Lease => Modes::Lease(Box::new(LeaseMode::new(
                connections,
                &config.table,
                channels,
                listener,
                records_terms,
                config.fair,
            ))),
            Mode::Advisory => Modes::Advisory(Box::new(
                AdvisoryMode::open(
                    &config,
                    endpoint,
                    connections,
                    channels,
                    listener,
                    records_terms,
                )
                .await?,
            )),
        };
        Ok(Self { mode, config })
    }

    /// Whether releases wake this backend's waiters now, or they poll.
    ///
    /// The backend keeps one connection of its own that `LISTEN`s for
    /// releases (`listen_url`'s, or the main URL's), trusted once a probe
    /// notification sent the way releases are sent has come back over it.
    /// It is [`WakeUps::Starting`] just after opening, usually for
    /// milliseconds. A wait that begins while it is not
    /// [`WakeUps::Listening`] polls, with the client's backoff, to its end.
    pub fn wake_ups(&self) -> WakeUps {
        self.store().listener.state()
    }

    /// Deletes the table's rows of names that nobody holds or waits for,
    /// in batches of 100, and answers how many went.
    ///
    /// Each backend does this by itself, about once a minute, and most
    /// rows go with the release that leaves them unused; this is for when
    /// the table's size matters now (after a burst of names used once).
    /// A name whose row is deleted keeps its fencing tokens increasing:
    /// `docs/postgres.md`, "Rows of unused names", says why. A sweep stops after
    /// 100,000 rows; call it again for more.
    ///
    /// # Errors
    /// A backend error when a batch fails; the batches before it stay done.
    ///
    /// # Cancel safety
    /// Dropping the future leaves whole batches done, and at most one
    /// batch undone.
    pub async fn remove_idle_rows(&self) -> Result<u64> {
        self.store().remove_idle_rows().await
    }

    /// How the queue between the listening connection and the task that
    /// wakes waiters has fared.
    ///
    /// The connection's notifications are read at once, however many come
    /// (a reader that stopped would fill the server's notification queue,
    /// and then releases across the database go unannounced), into a queue
    /// of the names released, each kept once however often it was
    /// announced, at most [`WakeUpQueue::limit`] of them. When more come
    /// before the waiters are woken, the names are forgotten and every
    /// waiter of this backend tries again instead, so that none misses its
    /// release.
    pub fn wake_up_queue(&self) -> WakeUpQueue {
        self.store().listener.queue()
    }

    /// How many waiters have a live place in `name`'s line in the store,
    /// in [fair mode](crate#fair-mode); none outside it.
    ///
    /// # Errors
    /// A backend error when the row cannot be read, and
    /// [`Error::Unsupported`] in advisory mode, which keeps no line.
    ///
    /// # Cancel safety
    /// A read: dropping the future changes nothing.
    pub async fn queued(&self, name: &LockName) -> Result<usize> {
        match &self.mode {
            Modes::Lease(lease) => lease.queued(name).await,
            Modes::Advisory(_) => Err(Error::Unsupported(
                "advisory mode keeps no line of waiters in the store".to_owned(),
            )),
        }
    }

    /// What this backend was opened with.
    pub fn config(&self) -> &PostgresConfig {
        &self.config
    }

    /// What the mode keeps of the server alike in both modes.
    fn store(&self) -> &Store {
        match &self.mode {
            Modes::Lease(lease) => &lease.store,
            Modes::Advisory(advisory) => &advisory.store,
        }
    }
}

/// Makes sure the table of election terms beside `table` exists, and
/// answers whether it does. A role that may use the lock table but not
/// create tables beside it still locks: its backend keeps no record of
/// terms, so observing an election is `Unsupported` and campaigning is
/// refused, and the warning says how to give it one.
///
/// # Errors
/// As [`table::ensure`], but for [`Error::Denied`].
///
/// # Cancel safety
/// As [`PostgresBackend::open`].
async fn terms_table(client: &tokio_postgres::Client, table: &TableName) -> Result<bool> {
    let terms = table.terms();
    match table::ensure(client, &terms, Layout::Terms, SETUP_TIMEOUT).await {
        Ok(()) => Ok(true),
        Err(error @ Error::Denied { .. }) => {
            tracing::warn!(
                %error,
                table = ?terms,
                "cannot create the table of election terms: locks work, campaigns are refused \
                 and observing is unsupported; open a backend once as a role that may create \
                 the table"
            );
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

#[async_trait]
impl Backend for PostgresBackend {
    fn store_name(&self) -> &'static str {
        "postgres"
    }

    async fn server_info(&self, limit: Duration) -> Result<ServerInfo> {
        let store = self.store();
        let started = tokio::time::Instant::now();
        let info = store.connections.server_info(limit).await?;
        let left = limit.saturating_sub(started.elapsed());
        let info = info.with_feature(deployment::notify(&store.listener, left).await);
        Ok(match &self.mode {
            Modes::Lease(_) => info,
            Modes::Advisory(_) => info.with_feature(deployment::no_pooler()),
        })
    }

    fn capabilities(&self) -> Capabilities {
        match &self.mode {
            Modes::Lease(lease) => lease.capabilities(),
            Modes::Advisory(advisory) => advisory.capabilities(),
        }
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        match &self.mode {
            Modes::Lease(lease) => lease.try_acquire(request, wait).await,
            Modes::Advisory(advisory) => advisory.try_acquire(request, wait).await,
        }
    }

    async fn end_wait(&self, request: &AcquireRequest, wait: WaitState) -> Result<()> {
        match &self.mode {
            Modes::Lease(lease) => lease.end_wait(request, wait).await,
            Modes::Advisory(advisory) => advisory.end_wait(request, wait).await,
        }
    }

    fn extend_many_limit(&self) -> usize {
        match &self.mode {
            Modes::Lease(_) => lease::EXTEND_MANY_LIMIT,
            Modes::Advisory(_) => advisory::CHECKS_AT_ONCE,
        }
    }

    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        match &self.mode {
            Modes::Lease(lease) => lease.extend_many(leases).await,
            // A check reads no clock.
            Modes::Advisory(advisory) => Extended::new(advisory.check_many(leases).await, None),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        match &self.mode {
            Modes::Lease(mode) => mode.release(lease).await,
            Modes::Advisory(mode) => mode.release(lease).await,
        }
    }

    async fn list(&self, limit: Duration) -> Result<Vec<LockInfo>> {
        match &self.mode {
            Modes::Lease(lease) => lease.list(limit).await,
            Modes::Advisory(advisory) => advisory.list(limit).await,
        }
    }

    async fn force_release(&self, name: &LockName, limit: Duration) -> Result<bool> {
        match &self.mode {
            Modes::Lease(lease) => lease.force_release(name, limit).await,
            Modes::Advisory(advisory) => advisory.force_release(name, limit).await,
        }
    }

    /// Lease mode hands locks over, releases later by an extension
    /// (the row's end becomes the server's clock plus the lease, shorter
    /// ones too), and resumes a grant by its identity, which is in its
    /// row; in advisory mode a lock passes between a client's tasks by a
    /// release and a new grant, and can neither outlive its session nor
    /// be taken up by another.
    fn abilities(&self) -> Abilities<'_> {
        let mut abilities = match &self.mode {
            Modes::Lease(_) => Abilities::none().with_hand_overs(self).with_resumes(self),
            Modes::Advisory(_) => Abilities::none()
                .without_delayed_release(
                    "PostgreSQL's advisory mode cannot keep a lock after its release (min_hold): \
                     an advisory lock lives on its session and ends with it; \
                     use the lease mode (?mode=lease, the default) for min_hold",
                )
                .without_resumes(ADVISORY_CANNOT_RESUME),
        };
        if let Some(terms) = &self.store().terms {
            abilities = abilities.with_term_log(terms);
        }
        // Lease mode keeps who waits in the lock's row: its fair line, or
        // else the waiting writers' marks. Advisory mode's fair line is
        // the server's queue of the name's key; without fair mode each of
        // its waiters polls on its own, unrecorded.
        let keeps_waiters = match &self.mode {
            Modes::Lease(_) => true,
            Modes::Advisory(advisory) => advisory.is_fair(),
        };
        if keeps_waiters {
            abilities = abilities.with_waiters(self);
        }
        // Without wake-ups only once notifications proved not to arrive;
        // until they are shown to, `watch` answers `None` and waits poll.
        if self.wake_ups() != WakeUps::Unavailable {
            abilities = abilities.with_wakeups(self);
        }
        abilities
    }
}

#[async_trait]
impl WaiterList for PostgresBackend {
    /// Only waits for the whole lock keep a place in line, or leave a
    /// mark: readers and permits poll, in both modes.
    fn sees_every_wait(&self) -> bool {
        false
    }

    /// A fair line serves in its order; lease mode's marks without fair
    /// mode keep who waits but no line: whichever writer asks first after
    /// a release is served, and the marks are listed in the order their
    /// waits began.
    fn serves_in_order(&self) -> bool {
        match &self.mode {
            Modes::Lease(lease) => lease.is_fair(),
            Modes::Advisory(_) => true,
        }
    }

    async fn waiters(&self, limit: Duration) -> Result<Vec<(LockName, Waiter)>> {
        match &self.mode {
            Modes::Lease(lease) => lease.waiters(limit).await,
            Modes::Advisory(advisory) => advisory.waiters(limit).await,
        }
    }
}

/// Lease mode's only: see [`Abilities::hand_overs`].
#[async_trait]
impl HandOvers for PostgresBackend {
    async fn hand_over(&self, lease: &Lease, next: &AcquireRequest) -> Result<HandOver> {
        match &self.mode {
            Modes::Lease(mode) => mode.hand_over(lease, next).await,
            Modes::Advisory(_) => Err(Error::Unsupported(
                "PostgreSQL's advisory mode offers no hand-overs".into(),
            )),
        }
    }
}

/// Why advisory mode cannot resume a lock, as
/// [`LockClient::resume`](distlock_core::LockClient::resume) says after
/// "postgres cannot resume a lock: ".
const ADVISORY_CANNOT_RESUME: &str = "in PostgreSQL's advisory mode a lock is a session advisory \
     lock, held by the database session that took it and ended with that session, which a \
     restarted process cannot take up; use the lease mode (?mode=lease, the default) to resume \
     locks";

/// Lease mode's only: see [`Abilities::resumes`].
#[async_trait]
impl Resumes for PostgresBackend {
    async fn resume(&self, lease: &Lease, request: &AcquireRequest) -> Result<Option<GrantState>> {
        match &self.mode {
            Modes::Lease(mode) => mode.resume(lease, request).await,
            Modes::Advisory(_) => Err(Error::Unsupported(format!(
                "postgres cannot resume a lock: {ADVISORY_CANNOT_RESUME}"
            ))),
        }
    }
}

impl Wakeups for PostgresBackend {
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.store().listener.watch(name)
    }
}

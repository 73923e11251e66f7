//! The backends the campaign runs against, each described once, in a
//! module of its own: how its server starts, how a client reaches it, and
//! what the scenarios must know of it. A backend joins the campaign with
//! its module here and one line in [`ALL`]; what it does not say, the
//! trait's defaults say for it.

mod etcd;
mod file;
mod form;
mod memcached;
mod mongodb;
mod postgres;
mod redis;
mod redis_cluster;
mod redis_quorum;

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::LockName;
use distlock::testing::Mutation;

use crate::Outcome;
use crate::servers::Server;

pub(crate) use memcached::MEMCACHED;

/// A backend of the campaign.
pub(crate) type Kind = &'static dyn CampaignBackend;

/// Every backend the campaign runs against, in report order.
pub(crate) const ALL: [Kind; 14] = [
    &file::FILE,
    &mongodb::MONGODB,
    &memcached::MEMCACHED,
    &etcd::ETCD,
    &postgres::POSTGRES,
    &postgres::POSTGRES_ADVISORY,
    &redis::REDIS,
    &redis::REDIS_VOLATILE,
    &redis_quorum::REDIS_QUORUM,
    &redis_cluster::REDIS_CLUSTER,
    &MONGODB_FAIR,
    &ETCD_FAIR,
    &POSTGRES_FAIR,
    &POSTGRES_ADVISORY_FAIR,
];

/// The backends with a fair mode, in it.
const MONGODB_FAIR: form::Form =
    form::Form::fair(&mongodb::MONGODB, "MongoDB, fair", "mongodb-fair");
const ETCD_FAIR: form::Form = form::Form::fair(&etcd::ETCD, "etcd, fair", "etcd-fair");
const POSTGRES_FAIR: form::Form =
    form::Form::fair(&postgres::POSTGRES, "PostgreSQL, fair", "postgresql-fair");
const POSTGRES_ADVISORY_FAIR: form::Form = form::Form::fair(
    &postgres::POSTGRES_ADVISORY,
    "PostgreSQL, advisory mode, fair",
    "postgresql-advisory-fair",
);

/// Redis (one server, its data persisted) opened through each mutant of
/// `crate::mutants`: R1 must fail on every one. Not in [`ALL`].
pub(crate) const MUTANTS: [Kind; 5] = [
    &form::Form::mutant(&redis::REDIS, "mutant-grants-everyone", |url| {
        crate::mutants::dress(Mutation::GrantsEveryone, &url)
    }),
    &form::Form::mutant(&redis::REDIS, "mutant-repeats-tokens", |url| {
        crate::mutants::dress(Mutation::RepeatsTokens, &url)
    }),
    &form::Form::mutant(&redis::REDIS, "mutant-skips-owner-check", |url| {
        crate::mutants::dress(Mutation::SkipsOwnerCheck, &url)
    }),
    &form::Form::mutant(&redis::REDIS, "mutant-hides-losses", |url| {
        crate::mutants::dress(Mutation::HidesLosses, &url)
    }),
    &form::Form::mutant(&redis::REDIS, "mutant-readers-beside-writers", |url| {
        crate::mutants::dress(Mutation::ReadersBesideWriters, &url)
    }),
];

/// The backend called `text` (as `--backend` takes it, in any case): its
/// option name, or its name in reports; a mutant too.
pub(crate) fn parse(text: &str) -> Option<Kind> {
    ALL.into_iter().chain(MUTANTS).find(|kind| {
        kind.option_name().eq_ignore_ascii_case(text) || kind.name().eq_ignore_ascii_case(text)
    })
}

/// What a server restart does to the locks held on it (R1, R6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnRestart {
    /// They outlive it: a holder whose extensions resume in time keeps its
    /// lock.
    Kept,
    /// They end with their holders' connections, and each holder hears it
    /// as its connection ends, before the server is back to grant them
    /// again: overlaps stay forbidden.
    EndedAndTold,
    /// The server forgets them without a word, and holders learn it at
    /// their next extension: overlaps until then are reported, not
    /// forbidden.
    Forgotten,
}

/// How a backend's server starts.
pub(crate) struct ServerCommand {
    /// The environment variable naming its binary, which `scripts/servers`
    /// exports.
    pub(crate) binary_var: &'static str,
    /// Its arguments, to listen on loopback at a port and keep its data in
    /// a directory.
    pub(crate) args: fn(port: u16, data: &Path) -> Vec<OsString>,
    /// Run once before the server first starts, to make its data
    /// directory (PostgreSQL's `initdb`).
    pub(crate) prepare: Option<fn(data: &Path) -> Outcome<()>>,
    /// The user it runs as, when it refuses to run as root.
    pub(crate) run_as: Option<&'static str>,
}

impl ServerCommand {
    /// How it starts, for the report's head: its binary's variable and its
    /// arguments, with `<port>` and `<data>` for each start's own.
    pub(crate) fn shown(&self) -> String {
        const PORT: u16 = 65_535;
        let data = Path::new("/<data>");
        let args: Vec<String> = (self.args)(PORT, data)
            .iter()
            .map(|arg| {
                arg.to_string_lossy()
                    .replace(&PORT.to_string(), "<port>")
                    .replace("/<data>", "<data>")
            })
            .collect();
        let user = self
            .run_as
            .map(|user| format!(" (as {user})"))
            .unwrap_or_default();
        format!("`${} {}`{user}", self.binary_var, args.join(" "))
    }

    /// A server that needs nothing before it starts, run as this user.
    pub(crate) const fn plain(
        binary_var: &'static str,
        args: fn(port: u16, data: &Path) -> Vec<OsString>,
    ) -> Self {
        Self {
            binary_var,
            args,
            prepare: None,
            run_as: None,
        }
    }
}

/// How an acquisition's answer can be lost on the way back (R5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostAnswer {
    /// MongoDB's `failCommand` fail point closes the connection of the
    /// client's `findAndModify`, which then does not run.
    FailPoint,
    /// The proxy passes the acquisition to the server, which applies it,
    /// and resets the connection before the reply passes.
    ResetAfterRequest,
}

/// What a step of the server's wall clock reaches (R13), on a backend
/// whose server libfaketime can move.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClockStep {
    /// Whether the clock the backend reads from the server
    /// (`server_info`) is the one libfaketime steps, so that the step must
    /// show there.
    pub(crate) clock_moves: bool,
    /// Whether leases are judged by that clock, so that a step forward
    /// ends them early and a step back makes them last longer.
    pub(crate) leases_follow: bool,
    /// Why, in a sentence for the report.
    pub(crate) why: &'static str,
}

/// What a backend changed so that its clients pass through fault proxies
/// ([`CampaignBackend::route_through`]), undone when dropped.
pub(crate) struct Detour(Option<Box<dyn FnOnce() + Send>>);

impl Detour {
    /// A detour that `undo` ends.
    pub(crate) fn new(undo: impl FnOnce() + Send + 'static) -> Self {
        Self(Some(Box::new(undo)))
    }
}

impl Drop for Detour {
    fn drop(&mut self) {
        if let Some(undo) = self.0.take() {
            undo();
        }
    }
}

/// A URL with a password canary in it, tried in R12.
pub(crate) struct SecretCase {
    pub(crate) label: &'static str,
    pub(crate) url: String,
    /// Said before the row's findings (why a backend without credentials
    /// is tried at all, say).
    pub(crate) note: &'static str,
}

/// What the campaign must know of one backend.
#[async_trait::async_trait]
pub(crate) trait CampaignBackend: Sync + std::fmt::Debug {
    /// The backend's name in reports (and in `--backend`).
    fn name(&self) -> &'static str;

    /// Its name in `--backend`, when its name in reports has spaces.
    fn option_name(&self) -> &'static str {
        self.name()
    }

    /// The scenarios it runs (by id), when not every one: a fair form runs
    /// only those whose promises it keeps in a way of its own.
    fn scenarios(&self) -> Option<&'static [&'static str]> {
        None
    }

    /// How its server starts, if it has one the campaign can restart.
    fn server(&self) -> Option<ServerCommand>;

    /// Whether it has a server.
    fn has_server(&self) -> bool {
        self.server().is_some()
    }

    /// Why it has no server, for the rows of scenarios that fault one.
    fn without_server(&self) -> &'static str {
        "it has no server"
    }

    /// The URL lock clients open, with the server at `address` (its own,
    /// or a fault proxy's), its [companions] at `companions` (likewise;
    /// none for a backend of one server), and the run's scratch directory
    /// `scratch`.
    ///
    /// [companions]: Self::companions
    fn url(&self, scratch: &Path, address: &str, companions: &[String]) -> String;

    /// How many servers the harness runs beside the one it restarts, from
    /// the same command: restarts reach that one server, and network
    /// faults a majority of them all.
    fn companions(&self) -> usize {
        0
    }

    /// Makes the started servers one deployment, if they must be (a Redis
    /// Cluster's slots and meetings), and waits until it serves. The
    /// harness calls it once all of them listen, and again after each
    /// restart.
    ///
    /// # Errors
    /// The servers cannot be reached, or do not serve within a bound.
    fn ready(&self, _server: &Server) -> Outcome<()> {
        Ok(())
    }

    /// How long a restart keeps the backend from serving beyond the
    /// server's start, which scenarios that restart on a schedule (R6)
    /// must allow for.
    fn restart_downtime(&self) -> Duration {
        Duration::ZERO
    }

    /// How many of its servers a network fault reaches, the restarted one
    /// first: a majority of them (the one server, for a backend of one),
    /// so that the fault costs a holder its lock.
    fn faulted_servers(&self) -> usize {
        let servers = 1 + self.companions();
        servers / 2 + 1
    }

    /// Has clients of `server` reach its first servers through `proxies`
    /// (fault proxies' addresses, in order), for a backend whose clients
    /// learn where its servers are from the servers themselves and would
    /// otherwise pass the proxies by; undone when the detour is dropped.
    /// Clients of most backends go where their URL says, which needs
    /// nothing.
    ///
    /// # Errors
    /// The servers cannot be told, or do not agree within a bound.
    fn route_through(&self, _server: &Server, _proxies: &[String]) -> Outcome<Option<Detour>> {
        Ok(None)
    }

    /// Whether a fault proxy can stand between one holder and the server
    /// while a second holder reaches it directly (R3, R9), or why not.
    fn one_client_faulted(&self) -> Result<(), &'static str> {
        Ok(())
    }

    /// The server's URL with a key space of its own called `space` (a
    /// collection, a key prefix, a directory), so that `list()` shows only
    /// the locks taken there.
    ///
    /// # Errors
    /// The key space cannot be made.
    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String>;

    /// Whether a lock lives exactly as long as its holder's process, so a
    /// paused holder keeps it.
    fn process_bound(&self) -> bool {
        false
    }

    /// Whether a lock ends as soon as its holder's process does (the kernel
    /// drops its flocks, or closes its connection, whose end the server
    /// sees at once), so that a killed holder's lock may be granted again
    /// at once (R4).
    fn ends_with_holder(&self) -> bool {
        self.process_bound()
    }

    /// The shortest lease it grants.
    fn min_lease(&self) -> Duration {
        Duration::ZERO
    }

    /// What a server restart does to its locks.
    fn on_restart(&self) -> OnRestart {
        OnRestart::Kept
    }

    /// Whether the backend grants shared (reader) locks.
    fn has_shared(&self) -> bool {
        true
    }

    /// Whether the backend grants semaphores, or why not.
    fn semaphores(&self) -> Result<(), &'static str> {
        Ok(())
    }

    /// The most locks one process should hold at once, when each costs a
    /// server connection: R11 takes its names in batches no larger.
    fn max_held(&self) -> Option<usize> {
        None
    }

    /// The documented bound on granting a dead holder's lock again, after
    /// its last extension, for a lease of `lease` (R4 adds one poll).
    fn regrant_bound(&self, lease: Duration) -> Duration;

    /// How R5 loses an acquisition's answer on this backend.
    fn lost_answers(&self) -> &'static [LostAnswer] {
        &[LostAnswer::ResetAfterRequest]
    }

    /// A backend at `url` that sends only what it is asked to, on as few
    /// connections as it can, for clients with leases of `lease`: R5's
    /// proxy has one shot, which a request of the backend's own (a wake-up
    /// stream, a second connection's handshake, a session's creation) must
    /// not take.
    ///
    /// # Errors
    /// It cannot be opened.
    async fn open_quiet(
        &self,
        url: &str,
        _lease: Duration,
    ) -> Outcome<Arc<dyn distlock::backend::Backend>> {
        Ok(distlock::open(url).await?)
    }

    /// Makes what a first acquisition of `name` makes before it can grant
    /// (PostgreSQL's advisory mode gives the name its key in a statement
    /// of its own), so that R5's one shot hits the acquisition itself.
    ///
    /// # Errors
    /// The server cannot be reached.
    async fn prepare_name(&self, _server: &Server, _name: &LockName) -> Outcome<()> {
        Ok(())
    }

    /// Deletes `name`'s record behind the backend's back (R7), as an
    /// operator or a cache eviction might.
    ///
    /// # Errors
    /// The server cannot be reached.
    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()>;

    /// The URLs R12 tries, each with `canary` as a password.
    ///
    /// # Errors
    /// A scratch directory or a closed port cannot be had.
    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>>;

    /// The backend's own parse of `url`: where it came from, and its
    /// `Debug` print or error (R12 searches both for the canary).
    fn parse_url(&self, _url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
        None
    }

    /// What a step of its server's wall clock reaches (R13), or why R13
    /// cannot step it.
    fn server_clock(&self) -> Result<ClockStep, &'static str>;

    /// Whether R10 (TTL rounding, eviction, stale release and restart)
    /// applies, or why not.
    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err("memcached only")
    }
}

/// `backend`, once a lock taken and given back through it with a lease of
/// `lease` has made whatever a first acquisition makes (a session, loaded
/// scripts), so that the next acquisition sends only itself.
///
/// # Errors
/// The lock cannot be taken or given back.
pub(crate) async fn warmed_up(
    backend: Arc<dyn distlock::backend::Backend>,
    lease: Duration,
) -> Outcome<Arc<dyn distlock::backend::Backend>> {
    let warm = distlock::LockClient::new(
        backend.clone(),
        distlock::LockOptions::builder().lease(lease).build()?,
    );
    let name = LockName::new(format!("warm-up-{}", std::process::id()))?;
    if let Some(guard) = warm.try_acquire(&name).await? {
        guard.release().await?;
    }
    Ok(backend)
}

/// A loopback port nobody listens on.
///
/// # Errors
/// No port can be bound.
pub(crate) fn closed_port() -> Outcome<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

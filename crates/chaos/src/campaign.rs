//! What the campaign must know of a backend, and a backend under test:
//! the trait each backend of [`backends`](crate::backends) implements,
//! and the [`Server`] its scenarios run against.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::LockName;

use crate::answers::{ClockStep, Detour, LostAnswer, OnRestart, SecretCase};
use crate::outcome::Outcome;
use crate::servers::{ServerCommand, Servers};

/// A backend of the campaign.
pub(crate) type Kind = &'static dyn CampaignBackend;

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

/// A backend under test: what it is, and its servers, running.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) kind: Kind,
    servers: Servers,
}

impl Server {
    /// Starts `kind`'s servers (see [`Servers::start`]), and waits until
    /// the backend serves.
    ///
    /// # Errors
    /// A binary that is not there, a server that does not listen within
    /// 30 s, or a backend that does not serve within its bound.
    pub(crate) fn start(kind: Kind) -> Outcome<Server> {
        Server::start_in(kind, &[], Vec::new())
    }

    /// Starts `kind`'s server as [`Server::start`] does, with `extra_args`
    /// added to its command line (memcached's `-m 1`, say), also on every
    /// restart.
    ///
    /// # Errors
    /// As [`Server::start`].
    pub(crate) fn start_with(kind: Kind, extra_args: &[&str]) -> Outcome<Server> {
        Server::start_in(kind, extra_args, Vec::new())
    }

    /// Starts `kind`'s server as [`Server::start`] does, with `env` added
    /// to its environment, also on every restart.
    ///
    /// # Errors
    /// As [`Server::start`].
    pub(crate) fn start_with_env(kind: Kind, env: Vec<(OsString, OsString)>) -> Outcome<Server> {
        Server::start_in(kind, &[], env)
    }

    fn start_in(
        kind: Kind,
        extra_args: &[&str],
        env: Vec<(OsString, OsString)>,
    ) -> Outcome<Server> {
        let servers = Servers::start(
            kind.name(),
            kind.server(),
            kind.companions(),
            extra_args,
            env,
        )?;
        let server = Server { kind, servers };
        kind.ready(&server)?;
        Ok(server)
    }

    /// The URL lock clients open.
    pub(crate) fn url(&self) -> String {
        self.url_at(&self.address())
    }

    /// The URL of this backend with its restarted server reached through
    /// `address` (a fault proxy), and its companions directly.
    pub(crate) fn url_at(&self, address: &str) -> String {
        self.url_via(address, &[])
    }

    /// The URL of this backend with its restarted server reached through
    /// `address`, and its first companions through `companions` (fault
    /// proxies in front of them, in order); the others directly.
    pub(crate) fn url_via(&self, address: &str, companions: &[String]) -> String {
        let mut others = companions.to_vec();
        others.extend(
            self.companion_addresses()
                .into_iter()
                .skip(companions.len()),
        );
        self.kind.url(self.scratch(), address, &others)
    }

    /// The address of the server that scenarios restart.
    pub(crate) fn address(&self) -> String {
        self.servers.address()
    }

    /// The addresses of the servers run beside it, which restarts never
    /// reach (none, for a backend of one server).
    pub(crate) fn companion_addresses(&self) -> Vec<String> {
        self.servers.companion_addresses()
    }

    /// Every server's address: the restarted one's first.
    pub(crate) fn all_addresses(&self) -> Vec<String> {
        self.servers.all_addresses()
    }

    /// A directory of this run's own, for stores and logs.
    pub(crate) fn scratch(&self) -> &Path {
        self.servers.scratch()
    }

    /// The server's process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.servers.pid()
    }

    /// Kills the server (SIGKILL) and starts it again on the same port
    /// and data, and returns once the backend serves again (a Redis
    /// Cluster's master waits a moment before it does). Does nothing for
    /// the file backend.
    ///
    /// # Errors
    /// A server that does not listen again within 30 s, or a backend that
    /// does not serve again within its bound.
    pub(crate) fn restart(&mut self) -> Outcome<()> {
        self.servers.restart()?;
        self.kind.ready(self)
    }
}

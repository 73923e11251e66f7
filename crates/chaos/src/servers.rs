//! The backends under test, each with a server of the campaign's own that a
//! scenario may restart, on a free loopback port with its data in a temp
//! dir (and the file backend, which has no server, in a temp dir). A
//! backend of several servers (Redis in quorum mode) also gets companions:
//! more servers of the same command, which restarts never reach.

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Outcome;
use crate::backends::{Kind, ServerCommand};

/// A running backend.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) kind: Kind,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    bin: Option<PathBuf>,
    /// Arguments added to the server's command line.
    extra_args: Vec<String>,
    /// Variables added to the server's environment (libfaketime's, say).
    env: Vec<(OsString, OsString)>,
    /// The servers run beside this one, as many as the backend asks for.
    companions: Vec<Companion>,
}

/// A server run beside the one the scenarios restart, with the same
/// command, on a port and data directory of its own; stopped on drop.
#[derive(Debug)]
struct Companion {
    port: u16,
    child: Child,
}

impl Drop for Companion {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `kind`'s server, from the binary its variable names
    /// (`scripts/servers` exports them).
    ///
    /// # Errors
    /// A binary that is not there, or a server that does not listen within
    /// 30 s.
    pub(crate) fn start(kind: Kind) -> Outcome<Server> {
        Server::start_with(kind, &[])
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
        let bin = match kind.server() {
            Some(command) => Some(binary(command.binary_var)?),
            None => None,
        };
        let mut server = Server {
            kind,
            dir: tempfile::Builder::new()
                .prefix("distlock-chaos")
                .tempdir()?,
            port: free_port()?,
            child: None,
            bin,
            extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
            env,
            companions: Vec::new(),
        };
        if let Some(prepare) = kind.server().and_then(|command| command.prepare) {
            prepare(server.dir.path())?;
        }
        server.launch()?;
        for index in 1..=kind.companions() {
            let companion = server.start_companion(index)?;
            server.companions.push(companion);
        }
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
        self.kind.url(self.dir.path(), address, &others)
    }

    /// The address of the server that scenarios restart.
    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The addresses of the servers run beside it, which restarts never
    /// reach (none, for a backend of one server).
    pub(crate) fn companion_addresses(&self) -> Vec<String> {
        self.companions
            .iter()
            .map(|companion| format!("127.0.0.1:{}", companion.port))
            .collect()
    }

    /// Every server's address: the restarted one's first.
    pub(crate) fn all_addresses(&self) -> Vec<String> {
        let mut addresses = vec![self.address()];
        addresses.extend(self.companion_addresses());
        addresses
    }

    /// A directory of this run's own, for stores and logs.
    pub(crate) fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// The server's process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
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
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.launch()?;
        self.kind.ready(self)
    }

    /// Starts companion `index`, with its data in a directory of its own
    /// under the scratch directory, and waits until it listens.
    fn start_companion(&self, index: usize) -> Outcome<Companion> {
        let (Some(bin), Some(command)) = (&self.bin, self.kind.server()) else {
            return Err(format!("{} has no server to run companions of", self.kind.name()).into());
        };
        let data = self.dir.path().join(format!("companion-{index}"));
        std::fs::create_dir_all(&data)?;
        if let Some(prepare) = command.prepare {
            prepare(&data)?;
        }
        let port = free_port()?;
        let companion = Companion {
            port,
            child: self.spawn_in(bin, &command, port, &data)?,
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "companion {index} of {} does not listen on {port}",
                    self.kind.name()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(companion)
    }

    fn launch(&mut self) -> Outcome<()> {
        let Some(bin) = &self.bin else {
            return Ok(());
        };
        let Some(server) = self.kind.server() else {
            return Ok(());
        };
        let started = Instant::now();
        self.child = Some(self.spawn(bin, &server)?);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(
                    format!("{} does not listen on {}", self.kind.name(), self.port).into(),
                );
            }
            // A server that gave up starting is started again: PostgreSQL
            // refuses while the processes of the one just killed still
            // hold its shared memory, and they leave within moments.
            if let Some(child) = self.child.as_mut()
                && child.try_wait()?.is_some()
            {
                std::thread::sleep(Duration::from_millis(100));
                self.child = Some(self.spawn(bin, &server)?);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn spawn(&self, bin: &Path, server: &ServerCommand) -> Outcome<Child> {
        self.spawn_in(bin, server, self.port, self.dir.path())
    }

    /// Starts the server's command on `port`, with its data and its log
    /// (`server.log`) in `data`.
    fn spawn_in(
        &self,
        bin: &Path,
        server: &ServerCommand,
        port: u16,
        data: &Path,
    ) -> Outcome<Child> {
        let mut command = match server.run_as {
            // `setpriv` execs the server in its place, so killing the
            // child kills the server itself.
            Some(user) => {
                let mut command = Command::new("setpriv");
                command
                    .arg(format!("--reuid={user}"))
                    .arg(format!("--regid={user}"))
                    .arg("--init-groups");
                // The server's own variables are set by `env`, once it runs
                // as the user: a library preloaded into root's `setpriv`
                // too (libfaketime) would leave it resources the user
                // cannot open.
                if !self.env.is_empty() {
                    command.arg("env");
                    for (key, value) in &self.env {
                        let mut pair = key.clone();
                        pair.push("=");
                        pair.push(value);
                        command.arg(pair);
                    }
                }
                command.arg(bin);
                command
            }
            None => {
                let mut command = Command::new(bin);
                command.envs(self.env.iter().map(|(key, value)| (key, value)));
                command
            }
        };
        command.args((server.args)(port, data));
        command.args(&self.extra_args);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(data.join("server.log"))?;
        Ok(command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|error| format!("cannot start {}: {error}", bin.display()))?)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn binary(variable: &str) -> Outcome<PathBuf> {
    std::env::var_os(variable).map(PathBuf::from).ok_or_else(|| {
        format!("{variable} is not set: run through scripts/test or scripts/chaos, which install and name the servers").into()
    })
}

fn free_port() -> Outcome<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

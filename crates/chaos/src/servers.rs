//! A backend's servers, run by the campaign: the one a scenario may
//! restart, on a free loopback port with its data in a temp dir, and its
//! companions, more servers of the same command, which restarts never
//! reach (Redis in quorum mode). A backend without a server (the file
//! backend) gets the temp dir alone. What the backend makes of them is
//! [`Server`](crate::campaign::Server)'s part.

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::outcome::Outcome;

/// How a backend's server starts.
#[derive(Debug, Clone, Copy)]
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

/// A backend's servers, running; stopped on drop.
#[derive(Debug)]
pub(crate) struct Servers {
    /// The backend's name, for messages.
    name: &'static str,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    /// The binary and how it starts; `None` for a backend without a server.
    command: Option<(PathBuf, ServerCommand)>,
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

impl Servers {
    /// Starts `command`'s server, if there is one, from the binary its
    /// variable names (`scripts/servers` exports them), with `extra_args`
    /// added to its command line and `env` to its environment (also on
    /// every restart), and `companions` more beside it.
    ///
    /// # Errors
    /// A binary that is not there, or a server that does not listen within
    /// 30 s.
    pub(crate) fn start(
        name: &'static str,
        command: Option<ServerCommand>,
        companions: usize,
        extra_args: &[&str],
        env: Vec<(OsString, OsString)>,
    ) -> Outcome<Servers> {
        let command = match command {
            Some(command) => Some((binary(command.binary_var)?, command)),
            None => None,
        };
        let mut servers = Servers {
            name,
            dir: tempfile::Builder::new()
                .prefix("distlock-chaos")
                .tempdir()?,
            port: free_port()?,
            child: None,
            command,
            extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
            env,
            companions: Vec::new(),
        };
        if let Some(prepare) = servers
            .command
            .as_ref()
            .and_then(|(_, command)| command.prepare)
        {
            prepare(servers.dir.path())?;
        }
        servers.launch()?;
        for index in 1..=companions {
            let companion = servers.start_companion(index)?;
            servers.companions.push(companion);
        }
        Ok(servers)
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
    /// and data, and returns once it listens. Does nothing for a backend
    /// without a server.
    ///
    /// # Errors
    /// A server that does not listen again within 30 s.
    pub(crate) fn restart(&mut self) -> Outcome<()> {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.launch()
    }

    /// Starts companion `index`, with its data in a directory of its own
    /// under the scratch directory, and waits until it listens.
    fn start_companion(&self, index: usize) -> Outcome<Companion> {
        let Some((bin, command)) = &self.command else {
            return Err(format!("{} has no server to run companions of", self.name).into());
        };
        let data = self.dir.path().join(format!("companion-{index}"));
        std::fs::create_dir_all(&data)?;
        if let Some(prepare) = command.prepare {
            prepare(&data)?;
        }
        let port = free_port()?;
        let companion = Companion {
            port,
            child: self.spawn_in(bin, command, port, &data)?,
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "companion {index} of {} does not listen on {port}",
                    self.name
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(companion)
    }

    fn launch(&mut self) -> Outcome<()> {
        let Some((bin, server)) = &self.command else {
            return Ok(());
        };
        let started = Instant::now();
        self.child = Some(self.spawn(bin, server)?);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("{} does not listen on {}", self.name, self.port).into());
            }
            // A server that gave up starting is started again: PostgreSQL
            // refuses while the processes of the one just killed still
            // hold its shared memory, and they leave within moments.
            if let Some(child) = self.child.as_mut()
                && child.try_wait()?.is_some()
            {
                std::thread::sleep(Duration::from_millis(100));
                self.child = Some(self.spawn(bin, server)?);
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

impl Drop for Servers {
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

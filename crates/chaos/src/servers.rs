//! The backends under test, each with a server of the campaign's own that a
//! scenario may restart: memcached and SecantusDB (MongoDB) on a free
//! loopback port with their data in a temp dir, and the file backend in a
//! temp dir.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Outcome;

/// A backend of the campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    MongoDb,
    Memcached,
}

impl Kind {
    /// Every backend the campaign runs against. Adding a backend is one
    /// entry here (and its arm in [`Server::start`]).
    pub(crate) const ALL: [Kind; 3] = [Kind::File, Kind::MongoDb, Kind::Memcached];

    /// The backend's name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::MongoDb => "MongoDB",
            Kind::Memcached => "memcached",
        }
    }

    /// Parses a name as `--backend` takes it.
    pub(crate) fn parse(text: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(text))
    }

    /// Whether the backend has a server that can be restarted.
    pub(crate) fn has_server(self) -> bool {
        self != Kind::File
    }

    /// Whether a lock lives exactly as long as its holder's process, so a
    /// paused holder keeps it.
    pub(crate) fn process_bound(self) -> bool {
        self == Kind::File
    }

    /// Whether the backend keeps its locks across a server restart.
    pub(crate) fn keeps_locks_across_restarts(self) -> bool {
        self != Kind::Memcached
    }

    /// Whether the backend grants shared (reader) locks.
    pub(crate) fn has_shared(self) -> bool {
        self != Kind::Memcached
    }
}

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
}

impl Server {
    /// Starts `kind`'s server (memcached from `MEMCACHED_BIN`, SecantusDB
    /// from `SECANTUSD_BIN`, both exported by `scripts/servers`).
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
        let bin = match kind {
            Kind::File => None,
            Kind::MongoDb => Some(binary("SECANTUSD_BIN")?),
            Kind::Memcached => Some(binary("MEMCACHED_BIN")?),
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
        };
        server.launch()?;
        Ok(server)
    }

    /// The URL lock clients open.
    pub(crate) fn url(&self) -> String {
        self.url_at(&format!("127.0.0.1:{}", self.port))
    }

    /// The URL of this backend reached through `address` (a fault proxy).
    pub(crate) fn url_at(&self, address: &str) -> String {
        match self.kind {
            Kind::File => format!("file://{}", self.dir.path().join("locks").display()),
            // A proxy in between hides the replica set's member list from
            // the driver, so it must not go looking for the members.
            Kind::MongoDb => {
                format!("mongodb://{address}/distlock_chaos?directConnection=true")
            }
            Kind::Memcached => format!("memcache://{address}"),
        }
    }

    /// The server's own address.
    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A directory of this run's own, for stores and logs.
    pub(crate) fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the server (SIGKILL) and starts it again on the same port
    /// and data. Does nothing for the file backend.
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

    fn launch(&mut self) -> Outcome<()> {
        let Some(bin) = &self.bin else {
            return Ok(());
        };
        let port = self.port.to_string();
        let mut command = Command::new(bin);
        match self.kind {
            Kind::File => unreachable!("the file backend has no server"),
            Kind::MongoDb => {
                let data = self.dir.path().join("mongodb");
                command
                    .args(["--port", &port, "--storage-path"])
                    .arg(&data)
                    .args(["--enable-test-commands", "--cache-size", "256M"]);
            }
            // `-u root` matters only when running as root, where memcached
            // insists on being told which user to be.
            Kind::Memcached => {
                command.args(["-u", "root", "-l", "127.0.0.1", "-U", "0", "-p", &port]);
            }
        }
        command.args(&self.extra_args);
        let log = std::fs::File::create(self.dir.path().join("server.log"))?;
        self.child = Some(
            command
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .map_err(|error| format!("cannot start {}: {error}", bin.display()))?,
        );
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("{} does not listen on {port}", self.kind.name()).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
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

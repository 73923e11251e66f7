//! A 3-master Redis Cluster on loopback of a test's own, each master with
//! settings the test chooses, so that one master can differ from the
//! others without disturbing the cluster `scripts/test` starts. The
//! servers are `REDIS_BIN` (which `scripts/servers/redis.sh` exports) and
//! the cluster is made by the `redis-cli` beside it, as that script makes
//! its own. Dropping it stops the servers and removes their data.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long the cluster may take to form: a bound on hangs.
const PATIENCE: Duration = Duration::from_secs(60);

pub(crate) struct OwnRedisCluster {
    servers: Vec<Child>,
    ports: Vec<u16>,
    cli: PathBuf,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

impl OwnRedisCluster {
    /// Starts three masters, master `i` with `settings(i)` added to its
    /// command line, makes them a cluster, and waits until each serves.
    pub(crate) fn start(settings: impl Fn(usize) -> Vec<&'static str>) -> Self {
        let bin = PathBuf::from(std::env::var("REDIS_BIN").unwrap_or_else(|_| {
            panic!("REDIS_BIN is not set: run the tests with scripts/test, which installs redis")
        }));
        let cli = bin.with_file_name("redis-cli");
        // Built first, so that a panic on the way stops what started.
        let mut cluster = Self {
            servers: Vec::new(),
            ports: Vec::new(),
            cli,
            dir: tempfile::tempdir().expect("temp dir"),
        };
        for at in 0..3 {
            let data = cluster.dir.path().join(format!("node-{at}"));
            std::fs::create_dir(&data).expect("a data dir");
            let (server, port) = cluster.spawn_master(&bin, &data, &settings(at));
            cluster.servers.push(server);
            cluster.ports.push(port);
        }
        let hosts: Vec<String> = cluster.addresses();
        let created = Command::new(&cluster.cli)
            .args(["--cluster", "create"])
            .args(&hosts)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli");
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {created:?}"
        );
        for port in cluster.ports.clone() {
            cluster.until(
                port,
                "serves every slot",
                &["CLUSTER", "INFO"],
                "cluster_state:ok",
            );
        }
        cluster
    }

    /// Starts one master with its data in `data` and `settings` added, on
    /// free ports, and waits until it answers. A port found free can be
    /// taken before the server binds it (another test's server, or this
    /// master's two ports picked alike): a server that exits before it
    /// answers is started again on other ports, a few times.
    fn spawn_master(&self, bin: &PathBuf, data: &Path, settings: &[&str]) -> (Child, u16) {
        let mut last_exit = None;
        for _ in 0..5 {
            let port = free_port();
            let bus = loop {
                let bus = free_port();
                if bus != port {
                    break bus;
                }
            };
            let log = std::fs::File::create(data.join("server.log")).expect("a log file");
            let mut server = Command::new(bin)
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(data)
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .args(["--cluster-port", &bus.to_string()])
                .args(settings)
                .stdin(Stdio::null())
                // redis-server logs to its standard output.
                .stdout(log.try_clone().expect("a log file"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let started = Instant::now();
            loop {
                if let Some(status) = server.try_wait().expect("the server's status") {
                    last_exit = Some(status);
                    break;
                }
                let output = self.ask(port, &["PING"]);
                if String::from_utf8_lossy(&output.stdout).contains("PONG") {
                    return (server, port);
                }
                if started.elapsed() >= PATIENCE {
                    let _ = server.kill();
                    let _ = server.wait();
                    panic!("the redis server on port {port} never answered PING: {output:?}");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let log = std::fs::read_to_string(data.join("server.log")).unwrap_or_default();
        panic!("redis-server exited before answering, 5 times; last {last_exit:?}: {log}");
    }

    /// Each master's `127.0.0.1:PORT`, in order.
    pub(crate) fn addresses(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect()
    }

    /// The cluster's URL, every master a seed.
    pub(crate) fn url(&self) -> String {
        format!("redis://{}?mode=cluster", self.addresses().join(","))
    }

    fn ask(&self, port: u16, command: &[&str]) -> Output {
        Command::new(&self.cli)
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(command)
            .output()
            .expect("run redis-cli")
    }

    /// Waits until `command` on the server at `port` answers with `text`.
    fn until(&self, port: u16, what: &str, command: &[&str], text: &str) {
        let started = Instant::now();
        loop {
            let output = self.ask(port, command);
            if String::from_utf8_lossy(&output.stdout).contains(text) {
                return;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "the redis server on port {port} never {what}: {output:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for OwnRedisCluster {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
    }
}

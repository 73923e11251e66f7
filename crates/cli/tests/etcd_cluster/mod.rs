//! A 3-member etcd cluster on loopback of a test's own, whose members the
//! test may kill and start again: its leader's loss cannot disturb the
//! tests that share the cluster `scripts/test` starts. etcd and etcdctl
//! are those `scripts/servers/etcd.sh` found (`DISTLOCK_ETCD_BIN`,
//! `DISTLOCK_ETCDCTL_BIN`). Dropping it stops the members and removes
//! their data.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the cluster may take to come up or elect a leader: a bound on
/// hangs.
const PATIENCE: Duration = Duration::from_secs(60);

pub(crate) struct EtcdCluster {
    /// Each member's command line and, while it runs, its process.
    members: Vec<Member>,
    dir: tempfile::TempDir,
}

struct Member {
    command: Vec<String>,
    log: PathBuf,
    process: Mutex<Option<Child>>,
    /// `http://127.0.0.1:PORT`.
    client: String,
}

fn binary(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with scripts/test, which installs etcd")
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

impl EtcdCluster {
    /// Starts three members, with etcd's shortest sensible election
    /// timeout (1 s), and waits until one leads.
    pub(crate) fn start() -> Self {
        let etcd = binary("DISTLOCK_ETCD_BIN");
        let dir = tempfile::tempdir().expect("temp dir");
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let initial = (0..3)
            .map(|i| format!("m{}=http://127.0.0.1:{}", i + 1, ports[i].1))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("distlock-cli-churn-{}", std::process::id());
        let members = (0..3)
            .map(|i| {
                let (client, peer) = (
                    format!("http://127.0.0.1:{}", ports[i].0),
                    format!("http://127.0.0.1:{}", ports[i].1),
                );
                let data = dir.path().join(format!("m{}", i + 1));
                let command = [
                    etcd.as_str(),
                    "--name",
                    &format!("m{}", i + 1),
                    "--data-dir",
                    &data.display().to_string(),
                    "--listen-client-urls",
                    &client,
                    "--advertise-client-urls",
                    &client,
                    "--listen-peer-urls",
                    &peer,
                    "--initial-advertise-peer-urls",
                    &peer,
                    "--initial-cluster",
                    &initial,
                    "--initial-cluster-state",
                    "new",
                    "--initial-cluster-token",
                    &token,
                    "--heartbeat-interval",
                    "100",
                    "--election-timeout",
                    "1000",
                    "--logger",
                    "zap",
                    "--log-level",
                    "error",
                ]
                .map(str::to_owned)
                .to_vec();
                Member {
                    command,
                    log: dir.path().join(format!("m{}.log", i + 1)),
                    process: Mutex::new(None),
                    client,
                }
            })
            .collect();
        let cluster = Self { members, dir };
        for member in &cluster.members {
            member.start();
        }
        cluster.wait_for_leader();
        cluster
    }

    /// The `etcd://` URL naming every member.
    pub(crate) fn url(&self) -> String {
        let hosts: Vec<&str> = self
            .members
            .iter()
            .map(|member| member.client.trim_start_matches("http://"))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }

    /// Waits for a member that says it leads; returns its index.
    pub(crate) fn wait_for_leader(&self) -> usize {
        let started = Instant::now();
        loop {
            if let Some(leader) = (0..3).find(|&i| self.members[i].leads()) {
                return leader;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "no member of the test's cluster led within {PATIENCE:?} (logs in {})",
                self.dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILLs the leader, then starts it again on its data, as a member
    /// that crashed and was restarted; returns its index.
    pub(crate) fn kill_leader(&self) -> usize {
        let leader = self.wait_for_leader();
        let member = &self.members[leader];
        if let Some(mut child) = member.process.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        member.start();
        leader
    }

    /// The ids of the etcd leases the cluster has now, as etcdctl lists
    /// them (hexadecimal).
    pub(crate) fn leases(&self) -> Vec<String> {
        let endpoints: Vec<&str> = self.members.iter().map(|m| m.client.as_str()).collect();
        let output = Command::new(binary("DISTLOCK_ETCDCTL_BIN"))
            .env("ETCDCTL_API", "3")
            .args([
                "--endpoints",
                &endpoints.join(","),
                "--command-timeout",
                "5s",
            ])
            .args(["lease", "list"])
            .output()
            .expect("run etcdctl");
        assert!(
            output.status.success(),
            "etcdctl lease list: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        // "found N leases", then one id a line.
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .skip(1)
            .map(|line| line.trim().to_owned())
            .filter(|line| !line.is_empty())
            .collect()
    }
}

impl Member {
    fn start(&self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("member log");
        let child = Command::new(&self.command[0])
            .args(&self.command[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start an etcd member");
        *self.process.lock().unwrap() = Some(child);
    }

    /// Whether this member answers, and says it leads.
    fn leads(&self) -> bool {
        let output = Command::new(binary("DISTLOCK_ETCDCTL_BIN"))
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.client, "--command-timeout", "1s"])
            .args(["--dial-timeout", "1s", "endpoint", "status", "-w", "json"])
            .output();
        let Ok(output) = output else {
            return false;
        };
        let Ok(status) = serde_json::from_slice::<serde_json::Value>(&output.stdout) else {
            return false;
        };
        let status = &status[0]["Status"];
        let (member, leader) = (&status["header"]["member_id"], &status["leader"]);
        member.as_u64().is_some() && member.as_u64() == leader.as_u64()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &self.members {
            if let Some(mut child) = member.process.lock().unwrap().take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

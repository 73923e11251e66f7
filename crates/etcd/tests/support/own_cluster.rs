//! A 3-member etcd cluster of a test's own, with its third member inside a
//! network namespace, for the partition test. Dropping it stops the
//! members and removes their data.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use distlock_etcd::raw::{Client, ConnectOptions};

use super::netns::Netns;

pub(crate) struct OwnCluster {
    members: Vec<Child>,
    dir: PathBuf,
    /// Each member's client address, `host:port`.
    pub(crate) clients: [String; 3],
}

fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .and_then(|listener| listener.local_addr())
        .unwrap_or_else(|e| panic!("no free port on {ip}: {e}"))
        .port()
}

fn etcd_bin() -> String {
    std::env::var("DISTLOCK_ETCD_BIN")
        .unwrap_or_else(|_| panic!("DISTLOCK_ETCD_BIN is not set: run the tests with scripts/test"))
}

impl OwnCluster {
    /// Starts members 1 and 2 on this side of `netns`'s link and member 3
    /// inside it.
    pub(crate) fn start(netns: &Netns) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "distlock-etcd-partition-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).expect("data dir");
        let ips = [&netns.host_ip, &netns.host_ip, &netns.inside_ip];
        let ports: Vec<(u16, u16)> = ips
            .iter()
            .enumerate()
            .map(|(i, ip)| match i {
                // Nothing else listens inside the namespace.
                2 => (2379, 2380),
                _ => (free_port(ip), free_port(ip)),
            })
            .collect();
        let initial: Vec<String> = (0..3)
            .map(|i| format!("m{}=http://{}:{}", i + 1, ips[i], ports[i].1))
            .collect();
        let initial = initial.join(",");
        let token = format!("distlock-partition-{}", std::process::id());
        let mut members = Vec::new();
        for i in 0..3 {
            let mut command = if i == 2 {
                netns.command(&etcd_bin())
            } else {
                Command::new(etcd_bin())
            };
            let (client, peer) = (
                format!("http://{}:{}", ips[i], ports[i].0),
                format!("http://{}:{}", ips[i], ports[i].1),
            );
            let log = std::fs::File::create(dir.join(format!("m{}.log", i + 1))).expect("log");
            command
                .args(["--name", &format!("m{}", i + 1)])
                .arg("--data-dir")
                .arg(dir.join(format!("m{}", i + 1)))
                .args(["--listen-client-urls", &client])
                .args(["--advertise-client-urls", &client])
                .args(["--listen-peer-urls", &peer])
                .args(["--initial-advertise-peer-urls", &peer])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", &token])
                .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
                .args(["--logger", "zap", "--log-level", "error"])
                .stdout(Stdio::null())
                .stderr(log);
            members.push(command.spawn().expect("start an etcd member"));
        }
        let clients = [0, 1, 2].map(|i| format!("{}:{}", ips[i], ports[i].0));
        Self {
            members,
            dir,
            clients,
        }
    }

    /// Waits until every member answers and one leads; panics after a
    /// minute.
    pub(crate) async fn wait_healthy(&self) {
        for _ in 0..600 {
            let mut led = 0;
            for client in &self.clients {
                let options = ConnectOptions::new([format!("http://{client}")])
                    .with_connect_timeout(Duration::from_millis(500));
                let status = tokio::time::timeout(Duration::from_secs(1), async {
                    let etcd = Client::connect(&options).await.ok()?;
                    etcd.status().await.ok()
                })
                .await
                .ok()
                .flatten();
                if status.is_some_and(|status| status.leader != 0) {
                    led += 1;
                }
            }
            if led == 3 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the partition test's cluster did not come up (logs in {})",
            self.dir.display()
        );
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            let _ = member.kill();
            let _ = member.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

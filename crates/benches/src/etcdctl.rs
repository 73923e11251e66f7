//! `etcdctl lock` as a peer: what a shell script gets from etcd, one
//! process per cycle (`etcdctl lock NAME true` takes the lock, runs `true`
//! while holding it, and releases it). Its cycles include starting the
//! process and its session, so they measure the tool as a script uses it,
//! not the server.

use std::process::Stdio;
use std::time::{Duration, Instant};

use distlock::LockName;
use tokio::process::Command;

use crate::outcome::Outcome;

/// How to run `etcdctl` against one cluster.
#[derive(Debug, Clone)]
pub(crate) struct Etcdctl {
    pub(crate) bin: String,
    /// `host:port,…` of the members.
    endpoints: String,
}

impl Etcdctl {
    /// `bin` against the members of the `etcd://` URL `url`.
    pub(crate) fn for_url(bin: &str, url: &str) -> Outcome<Self> {
        let config = distlock::etcd::EtcdConfig::parse(url).map_err(|e| e.to_string())?;
        Ok(Self {
            bin: bin.to_owned(),
            endpoints: config.endpoints.join(","),
        })
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        // etcdctl 3.4 speaks v3 by default; older ones need telling.
        command
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoints]);
        command
    }

    /// `etcdctl lock NAME true`, one process after another, as often as
    /// `seconds` allows.
    pub(crate) async fn cycles(&self, name: &LockName, seconds: Duration) -> Outcome<u64> {
        let started = Instant::now();
        let mut cycles = 0u64;
        while started.elapsed() < seconds {
            let output = self
                .command()
                .args(["lock", name.as_str(), "true"])
                .stdin(Stdio::null())
                .output()
                .await
                .map_err(|e| format!("cannot run {}: {e}", self.bin))?;
            if !output.status.success() {
                return Err(format!(
                    "etcdctl lock failed ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
            cycles += 1;
        }
        Ok(cycles)
    }

    /// `etcdctl version`'s first line, e.g. `etcdctl version: 3.4.23`.
    pub(crate) async fn version(&self) -> Option<String> {
        let output = self.command().arg("version").output().await.ok()?;
        let text = String::from_utf8(output.stdout).ok()?;
        text.lines().next().map(str::to_owned)
    }
}

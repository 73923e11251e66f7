//! etcd, on the campaign's own single member.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::LockName;
use distlock::etcd::{EtcdBackend, EtcdConfig};
use distlock_etcd::raw::etcdserverpb::DeleteRangeRequest;
use distlock_etcd::raw::{Client, ConnectOptions};

use super::{closed_port, warmed_up};
use crate::answers::{ClockStep, SecretCase};
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::servers::ServerCommand;

#[derive(Debug)]
pub(crate) struct Etcd;

pub(crate) const ETCD: Etcd = Etcd;

/// How often etcd's leader looks for expired leases: a session can outlive
/// its TTL by up to this.
const EXPIRY_CHECK: Duration = Duration::from_millis(500);

/// The member's peer port, chosen on its first start and kept in its data
/// directory, since the member records its peer URL there and must find
/// it again when restarted.
fn peer_port(data: &Path) -> u16 {
    let file = data.join("etcd-peer-port");
    if let Some(port) = std::fs::read_to_string(&file)
        .ok()
        .and_then(|text| text.trim().parse().ok())
    {
        return port;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_or(0, |address| address.port());
    // A port that cannot be recorded is chosen again on a restart, which
    // then fails to start: the campaign reports that.
    let _ = std::fs::write(&file, port.to_string());
    port
}

fn args(port: u16, data: &Path) -> Vec<OsString> {
    let client = format!("http://127.0.0.1:{port}");
    let peer = format!("http://127.0.0.1:{}", peer_port(data));
    let mut args: Vec<OsString> = Vec::new();
    args.push("--data-dir".into());
    args.push(data.join("etcd").into());
    for (flag, value) in [
        ("--name", "chaos".to_owned()),
        ("--listen-client-urls", client.clone()),
        ("--advertise-client-urls", client),
        ("--listen-peer-urls", peer.clone()),
        ("--initial-advertise-peer-urls", peer.clone()),
        ("--initial-cluster", format!("chaos={peer}")),
        ("--initial-cluster-state", "new".to_owned()),
        // A lone member elects itself after an election timeout, and R1's
        // short form restarts it every half second: elect in a quarter.
        ("--heartbeat-interval", "50".to_owned()),
        ("--election-timeout", "250".to_owned()),
        ("--logger", "zap".to_owned()),
        ("--log-level", "error".to_owned()),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    args
}

#[async_trait::async_trait]
impl CampaignBackend for Etcd {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn server(&self) -> Option<ServerCommand> {
        Some(ServerCommand::plain("DISTLOCK_ETCD_BIN", args))
    }

    fn url(&self, _scratch: &Path, address: &str, _companions: &[String]) -> String {
        format!("etcd://{address}")
    }

    /// etcd's leases are whole seconds.
    fn min_lease(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok(format!("{}?prefix={space}/", server.url()))
    }

    /// A dead client's keys go when etcd expires its session: the lease
    /// and a second, in whole seconds, once the leader next looks.
    fn regrant_bound(&self, lease: Duration) -> Duration {
        distlock::etcd::session_ttl(lease) + EXPIRY_CHECK
    }

    /// With the session made beforehand, by a lock taken and given back
    /// through the proxy: otherwise creating it (a `LeaseGrant`) would be
    /// the request that takes the proxy's one shot, not the acquisition.
    async fn open_quiet(
        &self,
        url: &str,
        lease: Duration,
    ) -> Outcome<Arc<dyn distlock::backend::Backend>> {
        warmed_up(Arc::new(EtcdBackend::open(url).await?), lease).await
    }

    async fn delete_record(&self, server: &Server, name: &LockName) -> Outcome<()> {
        let backend = EtcdBackend::open(&server.url()).await?;
        let (start, end) = backend.key_range(name);
        let member = format!("http://{}", server.address());
        let client = Client::connect(&ConnectOptions::new([member])).await?;
        client
            .delete_range(DeleteRangeRequest {
                key: start,
                range_end: end,
            })
            .await?;
        Ok(())
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        Ok(vec![
            SecretCase::new(
                "bad host (a closed port)",
                format!("etcd://alice:{canary}@127.0.0.1:{}", closed_port()?),
            ),
            SecretCase::new(
                "credentials on a member without authentication",
                format!("etcd://alice:{canary}@{}", server.address()),
            ),
            SecretCase::new(
                "a URL the backend refuses",
                format!("etcd://alice:{canary}@127.0.0.1:notaport"),
            ),
        ])
    }

    fn parse_url(&self, url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
        Some((
            "`EtcdConfig::parse`",
            EtcdConfig::parse(url).map(|config| format!("{config:?}")),
        ))
    }

    fn server_clock(&self) -> Result<ClockStep, &'static str> {
        Err(
            "etcd is written in Go, whose runtime reads the clock through the kernel's vDSO, \
             not libc, so libfaketime cannot move it; and its leases count down on the \
             leader's monotonic clock",
        )
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Err(
            "memcached only; etcd expires a client's session on its own clock, never evicts a \
             key, and keeps its keys across restarts (R6)",
        )
    }
}

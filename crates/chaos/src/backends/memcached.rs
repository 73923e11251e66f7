//! memcached, on the campaign's own server.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::LockName;

use crate::answers::{ClockStep, OnRestart, SecretCase};
use crate::campaign::CampaignBackend;
use crate::campaign::Server;
use crate::outcome::Outcome;
use crate::servers::ServerCommand;

#[derive(Debug)]
pub(crate) struct Memcached;

pub(crate) const MEMCACHED: Memcached = Memcached;

/// `-u root` matters only when running as root, where memcached insists on
/// being told which user to be.
fn args(port: u16, _data: &Path) -> Vec<OsString> {
    let port = port.to_string();
    ["-u", "root", "-l", "127.0.0.1", "-U", "0", "-p", &port]
        .map(OsString::from)
        .to_vec()
}

#[async_trait::async_trait]
impl CampaignBackend for Memcached {
    fn name(&self) -> &'static str {
        "memcached"
    }

    fn server(&self) -> Option<ServerCommand> {
        Some(ServerCommand::plain("MEMCACHED_BIN", args))
    }

    fn url(&self, _scratch: &Path, address: &str, _companions: &[String]) -> String {
        format!("memcache://{address}")
    }

    fn key_space_url(&self, server: &Server, space: &str) -> Outcome<String> {
        Ok(format!("{}?prefix={space}:", server.url()))
    }

    fn on_restart(&self) -> OnRestart {
        OnRestart::Forgotten
    }

    fn has_shared(&self) -> bool {
        false
    }

    /// memcached counts TTLs in whole seconds, rounded up, and its clock
    /// ticks once a second.
    fn regrant_bound(&self, lease: Duration) -> Duration {
        Duration::from_secs(lease.as_secs_f64().ceil() as u64 + 1)
    }

    /// One connection, opened (with its `stats`) as the backend connects,
    /// so that the acquisition is the next request on it. With more, the
    /// acquisition may open one of its own, and the proxy's one shot would
    /// hit that connection's `stats`.
    async fn open_quiet(
        &self,
        url: &str,
        _lease: Duration,
    ) -> Outcome<Arc<dyn distlock::backend::Backend>> {
        let separator = if url.contains('?') { '&' } else { '?' };
        Ok(distlock::open(&format!("{url}{separator}connections=1")).await?)
    }

    /// memcached cannot delete one lock's keys behind the backend's back
    /// without knowing its key layout: `flush_all` deletes them all.
    async fn delete_record(&self, server: &Server, _name: &LockName) -> Outcome<()> {
        let mut stream = std::net::TcpStream::connect(server.address())?;
        stream.write_all(b"flush_all\r\n")?;
        let mut reply = [0; 4];
        stream.read_exact(&mut reply)?;
        if &reply != b"OK\r\n" {
            return Err(format!("flush_all answered {:?}", String::from_utf8_lossy(&reply)).into());
        }
        Ok(())
    }

    fn secret_cases(&self, server: &Server, canary: &str) -> Outcome<Vec<SecretCase>> {
        Ok(vec![
            SecretCase::new(
                "user and password in the URL",
                format!("memcache://u:{canary}@{}", server.address()),
            )
            .with_note("memcached has no credentials; "),
        ])
    }

    fn parse_url(&self, url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
        Some((
            "`MemcachedConfig::parse`",
            distlock::memcached::MemcachedConfig::parse(url).map(|config| format!("{config:?}")),
        ))
    }

    /// memcached counts its seconds on the monotonic clock, which an NTP
    /// step leaves alone: `stats time` and every expiry run on from it.
    fn server_clock(&self) -> Result<ClockStep, &'static str> {
        Ok(ClockStep {
            clock_moves: false,
            leases_follow: false,
            why: "memcached counts expiry on its monotonic clock (its `stats time` is its start \
                  time plus monotonic seconds), which a wall-clock step does not move",
        })
    }

    fn expiry_edges(&self) -> Result<(), &'static str> {
        Ok(())
    }
}

//! Shared helpers for the redis backend's tests: the shared server's URL
//! from the environment, redis-server processes of the tests' own, and a
//! plain connection to look at keys behind the backend's back.

// Each test binary uses a part of this module, re-exports included.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod cluster;
pub mod tls;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Backend, HandOver, Lease};
use distlock_core::testing::{required_env, try_grant, until_serving};
use distlock_core::{Claim, Holder, LockClient, LockName, LockOptions};
use distlock_redis::RedisBackend;
use distlock_redis::redis;
use tokio::net::TcpStream;

pub use distlock_core::testing::{
    eventually, free_loopback_port as free_port, unique_name as unique,
};

/// The URL of the shared server, or a panic that says how to get one.
pub fn url() -> String {
    env("DISTLOCK_TEST_REDIS_URL")
}

/// The URL of the shared 3-master cluster, in cluster mode.
pub fn cluster_url() -> String {
    env("DISTLOCK_TEST_REDIS_CLUSTER_URL")
}

fn env(var: &str) -> String {
    required_env(var, "run the tests with scripts/test, which starts redis")
}

/// Options with a short lease, extended often, so that losses show soon.
pub fn options() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(2))
        .extend_every(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// A client of the backend at `url`.
pub async fn client(url: &str) -> LockClient {
    LockClient::new(Arc::new(backend(url).await), options())
}

/// The backend at `url`.
pub async fn backend(url: &str) -> RedisBackend {
    RedisBackend::open(url)
        .await
        .unwrap_or_else(|e| panic!("cannot open {url}: {e}"))
}

/// One grant through the backend alone, which nobody extends.
pub async fn grant(
    backend: &dyn Backend,
    name: &LockName,
    claim: Claim,
    lease: Duration,
) -> Option<Lease> {
    let request = AcquireRequest::new(
        name.clone(),
        claim,
        lease,
        Holder::this_process(Some("redis-tests")).into(),
    );
    try_grant(backend, &request).await.expect("try_acquire")
}

/// The next grant of `lease`'s lock for the same holder, through the
/// backend's hand-over.
pub async fn hand_over(backend: &RedisBackend, lease: &Lease) -> Lease {
    let next = AcquireRequest::new(
        lease.name.clone(),
        Claim::Exclusive,
        lease.lease,
        Holder::this_process(Some("redis-tests")).into(),
    );
    let hand_overs = backend.hand_overs().expect("one server hands over");
    match hand_overs.hand_over(lease, &next).await.expect("hand over") {
        HandOver::Granted {
            fencing_token,
            state,
            ..
        } => next.granted(fencing_token, state),
        HandOver::NotOurs => panic!("a live grant of ours is handed over"),
    }
}

/// Each of `texts` as a lock name.
pub fn lock_names(texts: &[String]) -> Vec<LockName> {
    texts
        .iter()
        .map(|text| LockName::new(text).expect("a valid name"))
        .collect()
}

/// One grant of each of `names` through the backend alone, for 30 s, of
/// an exclusive lock, a reader's share and a permit of two in turn; a
/// panic when a name is held, since no other name shares its keys.
pub async fn grant_each(backend: &dyn Backend, names: &[LockName]) -> Vec<Lease> {
    let mut leases = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let claim = match n % 3 {
            0 => Claim::Exclusive,
            1 => Claim::Shared,
            _ => Claim::Permit { limit: 2 },
        };
        let lease = grant(backend, name, claim, Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("{name:?} is free: no other name shares its keys"));
        leases.push(lease);
    }
    leases
}

/// The fencing tokens of `request` attempted twice, as an attempt that
/// runs again; a panic, saying `what`, when its own grant holds the name
/// against it.
pub async fn tokens_of_a_twice_run_attempt(
    backend: &dyn Backend,
    request: &AcquireRequest,
    what: &str,
) -> [u64; 2] {
    let mut tokens = [0; 2];
    for token in &mut tokens {
        let lease = try_grant(backend, request).await.expect("try_acquire");
        *token = lease
            .unwrap_or_else(|| panic!("{what}: held by its own grant"))
            .fencing_token;
    }
    tokens
}

/// Asserts that `backend` lists `name` with the fencing token `token`;
/// `what` says what that shows.
pub async fn assert_listed(backend: &dyn Backend, name: &LockName, token: u64, what: &str) {
    let listed = backend
        .list(distlock_core::testing::ADMIN_LIMIT)
        .await
        .expect("list");
    assert!(
        listed
            .iter()
            .any(|info| info.name == *name && info.fencing_token == Some(token)),
        "{what}: {listed:?}"
    );
}

/// A plain connection to `url`, beside the backend.
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("a redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// Every key of the database `connection` is on, by `SCAN`.
pub async fn all_keys(connection: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(connection)
            .await
            .expect("SCAN");
        keys.extend(found);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

/// A redis-server of the test's own on a free loopback port, with its data
/// in a directory of its own; killed when dropped.
pub struct OwnServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    args: Vec<String>,
    /// The CA that signed its certificate, when it serves TLS alone.
    ca: Option<PathBuf>,
}

impl OwnServer {
    /// Starts `$REDIS_BIN` without persistence, with `args` added (later
    /// arguments win, so `--appendonly yes` turns the log on).
    pub async fn start(args: &[&str]) -> Self {
        let args = args.iter().map(|arg| (*arg).to_owned()).collect();
        Self::start_on(free_port(), args, None).await
    }

    /// Starts `$REDIS_BIN` serving TLS alone (`port 0`) with
    /// `certificates`, on a free port, with `args` added.
    pub async fn start_tls(certificates: &tls::Certificates, args: &[&str]) -> Self {
        let port = free_port();
        let mut all = vec!["--port".to_owned(), "0".to_owned()];
        all.extend(["--tls-port".to_owned(), port.to_string()]);
        all.extend(certificates.server_args());
        all.extend(args.iter().map(|arg| (*arg).to_owned()));
        Self::start_on(port, all, Some(certificates.ca())).await
    }

    async fn start_on(port: u16, args: Vec<String>, ca: Option<PathBuf>) -> Self {
        let mut server = Self {
            child: None,
            port,
            dir: tempfile::tempdir().expect("a temp dir"),
            args,
            ca,
        };
        server.spawn().await;
        server
    }

    async fn spawn(&mut self) {
        let bin = env("REDIS_BIN");
        let child = Command::new(&bin)
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let (port, url, ca) = (self.port, self.url(), self.ca.clone());
        let what = format!("redis-server on port {port}");
        let child = self.child.insert(child);
        until_serving(child, &what, || answers(port, &url, ca.as_deref())).await;
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://` when it serves TLS.
    pub fn url(&self) -> String {
        let scheme = if self.ca.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// A plain connection to it, beside the backend (over TLS, trusting
    /// its CA, when it serves TLS).
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        connection_to(&self.url(), self.ca.as_deref()).await
    }

    /// Sends the server `signal` (`STOP`, `CONT`, …) with `kill(1)`.
    pub fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server runs");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill -{signal} failed: {status}");
    }

    /// SIGKILLs the server and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts it again on the same port and data
    /// directory: empty without persistence, from its log with it.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }
}

/// A plain connection to the server at `url`, over TLS trusting `ca`
/// when it has one.
async fn connection_to(url: &str, ca: Option<&Path>) -> redis::aio::MultiplexedConnection {
    let Some(ca) = ca else {
        return raw(url).await;
    };
    let root_cert = std::fs::read(ca).expect("the CA certificate");
    redis::Client::build_with_tls(
        url,
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root_cert),
        },
    )
    .expect("a rediss URL")
    .get_multiplexed_async_connection()
    .await
    .expect("connect over TLS")
}

/// Whether the server on `port` (at `url`, with `ca`) listens and answers,
/// its data loaded.
async fn answers(port: u16, url: &str, ca: Option<&Path>) -> bool {
    if TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        return false;
    }
    let mut connection = connection_to(url, ca).await;
    let ping: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut connection).await;
    // A server with a password answers NOAUTH: it is up too.
    match &ping {
        Ok(pong) => pong == "PONG",
        Err(error) => error.code() == Some("NOAUTH"),
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.kill();
    }
}

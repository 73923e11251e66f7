//! The connection to one server, or to a Redis Cluster. It is opened when
//! the backend opens; a server that did not answer then (quorum mode opens
//! without a minority) is connected to by a background task that keeps
//! trying, so that calls meanwhile fail at once instead of each waiting
//! for an attempt of its own. Once open, the driver's connection manager
//! (one server) or cluster connection (which follows `MOVED` and `ASK`,
//! and reads the slot map again when it changes) reconnects by itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use distlock_core::{Error, Result};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::config::{RedisConfig, RedisServer};
use crate::error::{from_redis, timed_out, unexpected};

/// How long opening a connection may take.
pub(crate) const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long sent data may go unacknowledged, and how long a connection
/// may idle before the kernel probes it: a server cut off silently (a
/// firewall dropping the flow) is then noticed in seconds rather than the
/// kernel's default quarter of an hour, and the connection manager
/// reconnects.
const DEAD_PEER: Duration = Duration::from_secs(10);

/// The first pause between background attempts to connect, and the
/// longest, between which it doubles.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// What a link connects to.
#[derive(Clone)]
pub(crate) enum Target {
    /// One server.
    Server(redis::Client),
    /// A Redis Cluster, through its seed nodes.
    Cluster(ClusterClient),
}

/// An open connection: to one server, or to every master of a cluster,
/// each command going to the master of its keys' slot.
#[derive(Clone)]
pub(crate) enum Connection {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Server(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Server(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Server(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}

/// One server's (or one cluster's) connection, shared by the clones of its
/// node.
#[derive(Clone)]
pub(crate) struct Link {
    target: Target,
    /// ` on host:port` in quorum mode; empty with one server or a cluster.
    on: String,
    state: Arc<State>,
}

struct State {
    connection: OnceLock<Connection>,
    connecting: AtomicBool,
    last_error: Mutex<String>,
}

impl Link {
    pub(crate) fn new(target: Target, on: String) -> Self {
        Self {
            target,
            on,
            state: Arc::new(State {
                connection: OnceLock::new(),
                connecting: AtomicBool::new(false),
                last_error: Mutex::new(String::from("not yet tried")),
            }),
        }
    }

    /// Opens the connection now, within [`OPEN_TIMEOUT`]. On failure the
    /// background task takes over, and the error says what went wrong.
    pub(crate) async fn open(&self) -> Result<()> {
        match tokio::time::timeout(OPEN_TIMEOUT, open(&self.target, &self.on)).await {
            Ok(Ok(connection)) => {
                let _ = self.state.connection.set(connection);
                Ok(())
            }
            Ok(Err(error)) => {
                self.state.failed(error.to_string());
                self.connect_in_background();
                Err(error)
            }
            Err(_) => {
                self.state
                    .failed(format!("no answer within {OPEN_TIMEOUT:?}"));
                self.connect_in_background();
                Err(timed_out("connect", OPEN_TIMEOUT))
            }
        }
    }

    /// The connection; while there is none yet, an error at once.
    pub(crate) fn get(&self) -> Result<Connection> {
        if let Some(connection) = self.state.connection.get() {
            return Ok(connection.clone());
        }
        self.connect_in_background();
        let why = self
            .state
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Err(Error::Backend {
            backend: "redis",
            message: format!(
                "redis{} is not connected yet, and is being connected in the background: {why}",
                self.on
            ),
            source: None,
        })
    }

    /// Starts the task that connects, unless it runs. It ends once
    /// connected, or once every clone of this link is gone.
    fn connect_in_background(&self) {
        if self.state.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let state = Arc::downgrade(&self.state);
        let (target, on) = (self.target.clone(), self.on.clone());
        tokio::spawn(async move {
            let mut pause = FIRST_RETRY;
            loop {
                let outcome = tokio::time::timeout(OPEN_TIMEOUT, open(&target, &on)).await;
                let Some(state) = state.upgrade() else {
                    return;
                };
                match outcome {
                    Ok(Ok(connection)) => {
                        let _ = state.connection.set(connection);
                        tracing::info!(server = %on, "connected to a redis server that was away");
                        return;
                    }
                    Ok(Err(error)) => state.failed(error.to_string()),
                    Err(_) => state.failed(format!("no answer within {OPEN_TIMEOUT:?}")),
                }
                drop(state);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_RETRY);
            }
        });
    }
}

impl State {
    fn failed(&self, why: String) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = why;
    }
}

impl Target {
    /// One server of `config`.
    pub(crate) fn server(config: &RedisConfig, server: &RedisServer) -> Result<redis::Client> {
        let info = config.connection_info(server);
        match &config.ca {
            None => redis::Client::open(info),
            Some(ca) => redis::Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(crate::config::read_ca(ca)?),
                },
            ),
        }
        .map_err(|e| from_redis(&format!("opening the redis backend for {server}"), e))
    }

    /// The cluster whose seed nodes `config` names.
    pub(crate) fn cluster(config: &RedisConfig) -> Result<Self> {
        let seeds = config
            .servers
            .iter()
            .map(|server| config.connection_info(server));
        let mut builder = redis::cluster::ClusterClientBuilder::new(seeds)
            .tcp_settings(tcp_settings())
            .connection_timeout(OPEN_TIMEOUT)
            // Each call has a timeout of its own; this only ends a request
            // to a node that never answers.
            .response_timeout(OPEN_TIMEOUT)
            // A command refused while its slot moves (TRYAGAIN), or sent to
            // a node that is away, is tried again after a jittered pause of
            // 20 to 200 ms, not the driver's 1.28 s at least: a lease is
            // seconds long, and the call's timeout ends the retries.
            .min_retry_wait(20)
            .max_retry_wait(200)
            .retry_wait_formula(10, 2);
        if let Some(ca) = &config.ca {
            builder = builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(crate::config::read_ca(ca)?),
            });
        }
        builder
            .build()
            .map(Self::Cluster)
            .map_err(|e| from_redis("opening the redis backend for a cluster", e))
    }
}

/// Connects, and checks that the server answers `PING` as Redis does.
async fn open(target: &Target, on: &str) -> Result<Connection> {
    let what = format!("connecting to redis{on}");
    let mut connection = match target {
        Target::Server(client) => {
            let manager = ConnectionManagerConfig::new()
                .set_tcp_settings(tcp_settings())
                .set_connection_timeout(OPEN_TIMEOUT)
                .set_number_of_retries(2)
                .set_max_delay(1000);
            ConnectionManager::new_with_config(client.clone(), manager)
                .await
                .map(Connection::Server)
                .map_err(|e| match refused_certificate(&what, e) {
                    Ok(error) => error,
                    Err(e) => from_redis(&what, e),
                })?
        }
        Target::Cluster(client) => client
            .get_async_connection()
            .await
            .map(Connection::Cluster)
            .map_err(|e| match refused_certificate(&what, e) {
                Ok(error) => error,
                Err(e) => opening_error(&what, e),
            })?,
    };
    // A server that is not Redis may accept the connection; it does not
    // answer PING with PONG.
    let pong = redis::cmd("PING")
        .query_async::<Value>(&mut connection)
        .await
        .map_err(|e| from_redis(&what, e))?;
    if !matches!(&pong, Value::SimpleString(text) if text == "PONG") {
        return Err(unexpected(&what, &pong));
    }
    Ok(connection)
}

/// The error for a cluster that cannot be opened, with what to check.
fn opening_error(what: &str, error: redis::RedisError) -> Error {
    match from_redis(what, error) {
        Error::Backend {
            backend,
            message,
            source,
        } => Error::Backend {
            backend,
            message: format!(
                "{message} (mode=cluster needs nodes of a Redis Cluster, with cluster-enabled \
                 yes and every slot served; for one server, drop mode=cluster)"
            ),
            source,
        },
        other => other,
    }
}

/// The error for a TLS handshake that refused the server's certificate,
/// with what to check; any other error is handed back. The driver keeps
/// only rustls's words ("invalid peer certificate: …"), and the cluster
/// client's error wraps them in its own text, so they are matched.
fn refused_certificate(what: &str, error: redis::RedisError) -> Result<Error, redis::RedisError> {
    if !error.to_string().contains("invalid peer certificate") {
        return Err(error);
    }
    Ok(Error::backend(
        "redis",
        format!(
            "{what}: the server's TLS certificate was refused ({error}): with a private CA, \
             give the PEM file of the CA that signed the servers' certificates as ?ca=PATH \
             (then that CA alone is trusted); without ?ca=, the system's roots must trust it; \
             either way it must be issued for the host the URL names"
        ),
        error,
    ))
}

/// The connection's TCP settings; see [`DEAD_PEER`].
pub(crate) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    let keepalive = redis::io::tcp::socket2::TcpKeepalive::new().with_time(DEAD_PEER);
    let settings = redis::io::tcp::TcpSettings::default().set_keepalive(keepalive);
    // Where the kernel has TCP_USER_TIMEOUT (elsewhere keepalive alone
    // notices a dead peer, more slowly).
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    let settings = settings.set_user_timeout(DEAD_PEER);
    settings
}

//! Shared helpers: the server under test, unique names, fail points, and a
//! server of a test's own for tests that restart it or set fail points.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_core::testing::free_loopback_port;
pub(crate) use distlock_core::testing::{Operation, TestBackend};
use distlock_core::{LockClient, LockGuard, LockName, LockOptions, Result};
use distlock_mongodb::mongodb::bson::{DateTime, Document, doc};
use distlock_mongodb::mongodb::event::EventHandler;
use distlock_mongodb::mongodb::event::command::CommandEvent;
use distlock_mongodb::mongodb::options::{ClientOptions, IndexOptions};
use distlock_mongodb::mongodb::{Client, Collection, IndexModel};
use distlock_mongodb::{MongoBackend, MongoConfig};
use futures::TryStreamExt;

/// The URL of the shared server that scripts/test starts.
pub(crate) fn shared_url() -> String {
    match std::env::var("DISTLOCK_TEST_MONGODB_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "DISTLOCK_TEST_MONGODB_URL is not set: run these tests through scripts/test, \
             which installs and starts a MongoDB-compatible server and sets it"
        ),
    }
}

/// A name no other test uses.
pub(crate) fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

/// A lock name no other test uses.
pub(crate) fn lock_name(prefix: &str) -> LockName {
    LockName::new(unique(prefix)).unwrap()
}

/// `url` with the driver option `appName` set, so fail points can target
/// one client.
pub(crate) fn with_app_name(url: &str, app_name: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}appName={app_name}")
}

/// A backend on `url`, in the test database and `collection`.
pub(crate) async fn backend_at(url: &str, collection: &str) -> Arc<MongoBackend> {
    Arc::new(
        MongoBackend::connect(
            MongoConfig::new(url)
                .database("distlock_test")
                .collection(collection),
        )
        .await
        .expect("the test server answers"),
    )
}

/// A plain driver client on `url`, to look at documents directly.
pub(crate) async fn inspector(url: &str) -> Client {
    Client::with_uri_str(url).await.expect("a driver client")
}

/// The lock collection `collection` of the test database, seen directly.
pub(crate) fn raw_collection(client: &Client, collection: &str) -> Collection<Document> {
    client.database("distlock_test").collection(collection)
}

/// The options of the one TTL index (on `expiresAt`) of `raw`, and every
/// index it has, for the messages.
pub(crate) async fn ttl_index(raw: &Collection<Document>) -> (IndexOptions, Vec<IndexModel>) {
    let indexes: Vec<IndexModel> = raw
        .list_indexes()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let ttl: Vec<_> = indexes
        .iter()
        .filter(|index| index.keys == doc! { "expiresAt": 1 })
        .collect();
    assert_eq!(ttl.len(), 1, "one TTL index: {indexes:?}");
    let options = ttl[0].options.clone().expect("index options");
    (options, indexes)
}

/// Lock options with a short lease, for tests of loss and extension.
pub(crate) fn short_lease(lease: Duration) -> LockOptions {
    LockOptions::builder()
        .lease(lease)
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .build()
        .unwrap()
}

/// A lock client on `backend`.
pub(crate) fn client(backend: Arc<MongoBackend>, options: LockOptions) -> LockClient {
    LockClient::new(backend, options)
}

/// How long a woken waiter may take to get a released lock: far below the
/// 30 s leases and 25 s waits of the wake-up tests, so that only a wake-up
/// (or polling) can meet it, never the lease's end or the waiter's last
/// attempt at its deadline.
pub(crate) const WOKEN_WITHIN: Duration = Duration::from_secs(5);

/// How long the waiters of the wake-up tests are willing to wait.
pub(crate) const PATIENCE: Duration = Duration::from_secs(25);

/// The lock a waiter got once the holder released it.
pub(crate) async fn woken(waiter: tokio::task::JoinHandle<Result<LockGuard>>) -> LockGuard {
    tokio::time::timeout(WOKEN_WITHIN, waiter)
        .await
        .expect("the waiter is woken by the release, long before the lease ends")
        .unwrap()
        .expect("the waiter gets the lock")
}

/// Counts the commands a client sends, by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Commands(Arc<Mutex<BTreeMap<String, u64>>>);

impl Commands {
    /// A driver client on the server at `url` whose commands are counted,
    /// and their count.
    pub(crate) async fn counted_client(url: &str) -> (Self, Client) {
        let commands = Self::default();
        let mut options = ClientOptions::parse(url).await.unwrap();
        let counts = commands.0.clone();
        options.command_event_handler = Some(EventHandler::callback(move |event| {
            if let CommandEvent::Started(started) = event {
                *counts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(started.command_name)
                    .or_default() += 1;
            }
        }));
        (commands, Client::with_options(options).unwrap())
    }

    /// The counts since the last call, by command name.
    pub(crate) fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The server's clock now, read with `$$NOW` through `raw`.
pub(crate) async fn server_now(raw: &Collection<Document>) -> DateTime {
    use futures::TryStreamExt;
    let rows: Vec<Document> = raw
        .aggregate([
            doc! { "$limit": 1 },
            doc! { "$project": { "now": "$$NOW" } },
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    *rows
        .first()
        .expect("a document to read the clock beside")
        .get_datetime("now")
        .unwrap()
}

/// Configures the server's `failCommand` fail point.
pub(crate) async fn fail_point(
    admin: &Client,
    mode: impl Into<distlock_mongodb::mongodb::bson::Bson>,
    data: Document,
) {
    admin
        .database("admin")
        .run_command(
            doc! { "configureFailPoint": "failCommand", "mode": mode.into(), "data": data },
        )
        .await
        .expect("configureFailPoint");
}

/// Turns the `failCommand` fail point off.
pub(crate) async fn fail_point_off(admin: &Client) {
    fail_point(admin, "off", doc! {}).await;
}

/// A server of this test's own, on a loopback port and a temp dir, killed
/// when dropped. The binary is `$SECANTUSD_BIN`, else `secantusd-rs` on
/// `PATH`.
pub(crate) struct OwnServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl OwnServer {
    /// Starts a server with test commands (fail points) enabled.
    pub(crate) fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra flags.
    pub(crate) fn start_with(extra: &[&str]) -> Self {
        let mut server = Self {
            child: None,
            port: free_loopback_port(),
            dir: tempfile::tempdir().expect("a temp dir"),
            extra: extra.iter().map(|flag| (*flag).to_owned()).collect(),
        };
        server.run();
        server
    }

    fn binary() -> PathBuf {
        match std::env::var_os("SECANTUSD_BIN") {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => PathBuf::from("secantusd-rs"),
        }
    }

    fn run(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .expect("a log file");
        let child = Command::new(Self::binary())
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--storage-path")
            .arg(self.dir.path().join("data"))
            .arg("--enable-test-commands")
            .args(["--cache-size", "256M", "--log-file-max", "16MB"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot start {}: {error}; run the tests through scripts/test, which installs it \
                     and sets SECANTUSD_BIN",
                    Self::binary().display()
                )
            });
        self.child = Some(child);
        for _ in 0..600 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the test server did not start listening on port {}",
            self.port
        );
    }

    /// The server's URL.
    pub(crate) fn url(&self) -> String {
        format!("mongodb://127.0.0.1:{}/", self.port)
    }

    /// Stops the server (SIGTERM, then waits), keeping its data.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            for _ in 0..200 {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data.
    pub(crate) fn start_again(&mut self) {
        assert!(self.child.is_none(), "stop the server first");
        self.run();
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

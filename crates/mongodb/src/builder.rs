//! Building a [`MongoBackend`]: from a URL, a `Client` or a `Database`.

use std::fmt;
use std::time::{Duration, Instant};

use distlock_core::{Error, Result};
use mongodb::bson::{Document, doc};
use mongodb::options::{
    ClientOptions, CollectionOptions, IndexOptions, ReadConcern, ReadPreference, SelectionCriteria,
    WriteConcern,
};
use mongodb::{Client, Collection, Database, IndexModel};

use crate::backend::MongoBackend;
use crate::clock::ServerClock;
use crate::document::EXPIRES_AT;
use crate::error::{BACKEND, driver};
use crate::fair::Places;
use crate::redact::{redact_url, scrub, secrets_of};
use crate::url_options::check_driver_options;
use crate::watch::{Subject, Watcher, change_streams_work};

/// The collection used when none is named.
pub const DEFAULT_COLLECTION: &str = "distributed_locks";
/// The database used when neither the builder nor the URL names one.
pub const DEFAULT_DATABASE: &str = "distlock";
/// The default bound on connecting and on selecting a server.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default server-side bound on one command (`maxTimeMS`, and
/// `wtimeout` of the default write concern).
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a [`MongoBackend`] finds its server.
///
/// Made with `From`: a URL (`&str` or `String`), a [`Client`] or a
/// [`Database`]. The `Debug` form of a URL hides its credentials.
#[derive(Clone)]
#[non_exhaustive]
pub enum Connection {
    /// A `mongodb://` or `mongodb+srv://` connection string.
    Url(String),
    /// A client already connected; its options are used as they are.
    Client(Client),
    /// A database of a client already connected.
    Database(Database),
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(url) => f.debug_tuple("Url").field(&redact_url(url)).finish(),
            Self::Client(_) => f.write_str("Client(..)"),
            Self::Database(database) => f.debug_tuple("Database").field(&database.name()).finish(),
        }
    }
}

impl From<&str> for Connection {
    fn from(url: &str) -> Self {
        Self::Url(url.to_owned())
    }
}

impl From<String> for Connection {
    fn from(url: String) -> Self {
        Self::Url(url)
    }
}

impl From<&String> for Connection {
    fn from(url: &String) -> Self {
        Self::Url(url.clone())
    }
}

impl From<Client> for Connection {
    fn from(client: Client) -> Self {
        Self::Client(client)
    }
}

impl From<Database> for Connection {
    fn from(database: Database) -> Self {
        Self::Database(database)
    }
}

/// Builds a [`MongoBackend`]; see [`MongoBackend::builder`].
///
/// Every option has a default: the database named in the URL (else
/// [`DEFAULT_DATABASE`]), the collection [`DEFAULT_COLLECTION`], write
/// concern `majority`, a 5 s connect and server-selection bound, a 10 s
/// server-side bound per command, the TTL index, release wake-ups where
/// change streams work, and fair mode off.
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct MongoBackendBuilder {
    connection: Connection,
    database: Option<String>,
    collection: String,
    write_concern: Option<WriteConcern>,
    connect_timeout: Duration,
    operation_timeout: Duration,
    ttl_index: bool,
    release_wakeups: bool,
    fair: bool,
}

impl MongoBackendBuilder {
    pub(crate) fn new(connection: Connection) -> Self {
        Self {
            connection,
            database: None,
            collection: DEFAULT_COLLECTION.to_owned(),
            write_concern: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            ttl_index: true,
            release_wakeups: true,
            fair: false,
        }
    }

    /// The database holding the lock collection. By default the one named
    /// in the URL's path, else [`DEFAULT_DATABASE`]. Not allowed when the
    /// backend is built from a [`Database`].
    pub fn database(mut self, name: impl Into<String>) -> Self {
        self.database = Some(name.into());
        self
    }

    /// The lock collection (default [`DEFAULT_COLLECTION`]).
    pub fn collection(mut self, name: impl Into<String>) -> Self {
        self.collection = name.into();
        self
    }

    /// The write concern of every write (default `majority` with a
    /// `wtimeout` of the operation timeout).
    ///
    /// With `w: 1` a grant acknowledged by a primary that then loses its
    /// place before the write replicates is rolled back, and another process
    /// may be granted the same lock: see the crate documentation.
    pub fn write_concern(mut self, write_concern: WriteConcern) -> Self {
        self.write_concern = Some(write_concern);
        self
    }

    /// How long connecting, and selecting a server for each command, may
    /// take before failing (default 5 s). Applies when the backend is built
    /// from a URL, unless the URL sets `connectTimeoutMS` or
    /// `serverSelectionTimeoutMS` itself; a given `Client` keeps its own
    /// settings. [`build`](Self::build) waits at most about this long for
    /// an unreachable server.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The server-side bound on the commands that no lock client times:
    /// `maxTimeMS` of `list`, `force_release` and setup, and `wtimeout` of
    /// the default write concern (default 10 s). A lock client's commands
    /// carry its own [`operation_timeout`](distlock_core::LockOptions::operation_timeout)
    /// as `maxTimeMS` instead, and the client ends them within it, so one
    /// number bounds every call on a lock.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Whether to create the TTL index on `expiresAt` (default true). The
    /// index only removes idle documents; correctness never depends on it.
    pub fn ttl_index(mut self, create: bool) -> Self {
        self.ttl_index = create;
        self
    }

    /// Whether to watch the collection for releases with a change stream
    /// (default true; it is used only where the server supports change
    /// streams). Without it, waiters poll with jittered backoff.
    pub fn release_wakeups(mut self, watch: bool) -> Self {
        self.release_wakeups = watch;
        self
    }

    /// Fair mode (default off; `fair=true` in a URL): whole locks go to
    /// waiters in the order they asked, across processes. Waiting writers
    /// keep places in line in the lock document, and a release grants the
    /// lock to the first live place in the same update; see the crate
    /// documentation. Readers and permits are served as without it, but
    /// readers wait while a writer is in line.
    pub fn fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// Connects, checks that the server answers, creates the TTL index and
    /// starts the release watcher.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed URL or name or a zero
    /// timeout; a backend error when the server cannot be reached within
    /// the connect timeout. Errors never show the URL's password. A failure
    /// to create the TTL index is logged, not returned.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is held until the backend is returned.
    pub async fn build(self) -> Result<MongoBackend> {
        check_collection_name(&self.collection)?;
        if self.connect_timeout.is_zero() {
            return Err(Error::config("connect_timeout", "must be above zero"));
        }
        if self.operation_timeout.is_zero() {
            return Err(Error::config("operation_timeout", "must be above zero"));
        }
        let (database, described) = match self.connection {
            Connection::Url(ref url) => {
                let client = connect(url, self.connect_timeout).await?;
                let name = match &self.database {
                    Some(name) => name.clone(),
                    None => client
                        .default_database()
                        .map_or_else(|| DEFAULT_DATABASE.to_owned(), |db| db.name().to_owned()),
                };
                check_database_name(&name)?;
                (client.database(&name), redact_url(url))
            }
            Connection::Client(ref client) => {
                let name = self
                    .database
                    .clone()
                    .unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
                check_database_name(&name)?;
                (client.database(&name), "the given client".to_owned())
            }
            Connection::Database(ref database) => {
                if self.database.is_some() {
                    return Err(Error::config(
                        "database",
                        "the backend was built from a Database; name the database there, not here",
                    ));
                }
                (database.clone(), "the given database".to_owned())
            }
        };
        let write_concern = self.write_concern.clone().unwrap_or_else(|| {
            WriteConcern::builder()
                .w(mongodb::options::Acknowledgment::Majority)
                .w_timeout(self.operation_timeout)
                .build()
        });
        // Reads see the primary's latest writes, ours included, whatever the
        // client's or database's defaults (change streams set their own).
        let options = CollectionOptions::builder()
            .write_concern(write_concern)
            .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
            .read_concern(ReadConcern::local())
            .build();
        let collection: Collection<Document> =
            database.collection_with_options(&self.collection, options);

        let clock = ServerClock::default();
        hello(&database, &clock, self.connect_timeout, &described).await?;
        if self.ttl_index {
            create_ttl_index(&collection, self.operation_timeout).await;
        }
        let hub = distlock_core::ReleaseHub::new();
        let places = self.fair.then(Places::new);
        let watcher = if self.release_wakeups
            && change_streams_work(&collection, self.operation_timeout).await
        {
            let subject = match &places {
                Some(places) => Subject::FairLocks(places.clone()),
                None => Subject::Locks,
            };
            Some(Watcher::start(collection.clone(), hub.clone(), subject))
        } else {
            None
        };
        tracing::debug!(
            database = database.name(),
            collection = %self.collection,
            release_wakeups = watcher.is_some(),
            fair = self.fair,
            "MongoDB lock backend ready"
        );
        Ok(MongoBackend::new(
            collection,
            hub,
            watcher,
            clock,
            self.operation_timeout,
            places,
        ))
    }
}

/// Parses `url` and makes a client whose connecting and server selection
/// are bounded by `timeout` unless the URL says otherwise.
async fn connect(url: &str, timeout: Duration) -> Result<Client> {
    check_driver_options(url)?;
    let secrets = secrets_of(url);
    let invalid = |reason: String| {
        Error::config(
            "MongoDB URL",
            format!("`{}`: {}", redact_url(url), scrub(&reason, &secrets)),
        )
    };
    // Parsing a mongodb+srv:// URL looks up DNS records: bound it too.
    let mut options = match tokio::time::timeout(timeout, ClientOptions::parse(url)).await {
        Ok(Ok(options)) => options,
        Ok(Err(error)) => return Err(invalid(error.kind.to_string())),
        Err(_) => {
            return Err(Error::Backend {
                backend: BACKEND,
                message: format!(
                    "resolving `{}` took longer than {timeout:?}",
                    redact_url(url)
                ),
                source: None,
            });
        }
    };
    options.connect_timeout.get_or_insert(timeout);
    options.server_selection_timeout.get_or_insert(timeout);
    options
        .app_name
        .get_or_insert_with(|| "distlock".to_owned());
    Client::with_options(options).map_err(|error| invalid(error.kind.to_string()))
}

/// Checks that the server answers, and takes a first reading of its clock.
async fn hello(
    database: &Database,
    clock: &ServerClock,
    timeout: Duration,
    described: &str,
) -> Result<()> {
    let sent = Instant::now();
    // The driver bounds server selection itself; this bounds a given client
    // whose own timeout is long, plus the round trip.
    let bound = timeout + Duration::from_secs(1);
    let reply = match tokio::time::timeout(bound, database.run_command(doc! { "hello": 1 })).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(error)) => {
            return Err(driver(
                &format!("cannot reach MongoDB at {described}"),
                error,
            ));
        }
        Err(_) => {
            return Err(Error::Backend {
                backend: BACKEND,
                message: format!("MongoDB at {described} did not answer within {bound:?}"),
                source: None,
            });
        }
    };
    if let Ok(local_time) = reply.get_datetime("localTime") {
        clock.observe(local_time.timestamp_millis(), sent, Instant::now());
    }
    Ok(())
}

/// Creates the TTL index on `expiresAt`, once per backend; logs a failure.
async fn create_ttl_index(collection: &Collection<Document>, timeout: Duration) {
    let index = IndexModel::builder()
        .keys(doc! { EXPIRES_AT: 1 })
        .options(IndexOptions::builder().expire_after(Duration::ZERO).build())
        .build();
    match tokio::time::timeout(timeout, collection.create_index(index)).await {
        Ok(Ok(_)) => tracing::debug!(collection = collection.name(), "TTL index in place"),
        Ok(Err(error)) => tracing::warn!(
            collection = collection.name(),
            error = %driver("creating the TTL index", error),
            "cannot create the TTL index on expiresAt; idle lock documents will stay until removed by hand"
        ),
        Err(_) => tracing::warn!(
            collection = collection.name(),
            "creating the TTL index on expiresAt timed out; idle lock documents may stay"
        ),
    }
}

fn check_collection_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.contains('$') || name.contains('\0') {
        "must not contain `$` or NUL"
    } else if name.starts_with("system.") {
        "must not start with `system.`"
    } else {
        return Ok(());
    };
    Err(Error::config("collection", format!("`{name}` {reason}")))
}

fn check_database_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.len() >= 64 {
        "must be shorter than 64 bytes"
    } else if name.contains(['/', '\\', '.', ' ', '"', '$', '\0']) {
        "must not contain any of / \\ . space \" $ NUL"
    } else {
        return Ok(());
    };
    Err(Error::config("database", format!("`{name}` {reason}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_collection_name("locks").is_ok());
        assert!(check_collection_name("").is_err());
        assert!(check_collection_name("a$b").is_err());
        assert!(check_collection_name("system.x").is_err());
        assert!(check_database_name("app").is_ok());
        assert!(check_database_name("a.b").is_err());
        assert!(check_database_name("").is_err());
    }

    #[test]
    fn the_debug_form_of_a_url_hides_credentials() {
        let connection = Connection::from("mongodb://bob:hunter2@h/");
        let shown = format!("{connection:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let builder = MongoBackendBuilder::new(connection);
        let shown = format!("{builder:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}

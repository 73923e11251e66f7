//! How a [`MongoBackend`](crate::MongoBackend) reaches its server and
//! keeps its locks there: [`MongoConfig`], parsed from a distlock URL or
//! made from a [`Client`] or a [`Database`], and checked before connecting.

use std::fmt;
use std::time::Duration;

use distlock_core::{Error, Result};
use mongodb::options::WriteConcern;
use mongodb::{Client, Database};

use crate::redact::redact_url;
use crate::url_options::split_options;

/// The collection used when none is named.
pub const DEFAULT_COLLECTION: &str = "distributed_locks";
/// The database used when neither the builder nor the URL names one.
pub const DEFAULT_DATABASE: &str = "distlock";
/// The default bound on connecting and on selecting a server.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default server-side bound on one command (`maxTimeMS`, and
/// `wtimeout` of the default write concern).
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a [`MongoBackend`](crate::MongoBackend) finds its server.
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

/// How a [`MongoBackend`](crate::MongoBackend) connects, and where and how
/// it keeps its locks; [`MongoBackend::connect`](crate::MongoBackend::connect)
/// opens it.
///
/// Made by [`parse`](Self::parse) from a distlock URL, or by
/// [`new`](Self::new) from a [`Client`], a [`Database`] or a driver URL;
/// every setting then has a method. Every option has a default: the
/// database named in the URL (else [`DEFAULT_DATABASE`]), the collection
/// [`DEFAULT_COLLECTION`], write concern `majority`, a 5 s connect and
/// server-selection bound, a 10 s server-side bound per command, the TTL
/// index, release wake-ups where change streams work, and fair mode off.
///
/// ```no_run
/// # async fn run() -> distlock_core::Result<()> {
/// use distlock_mongodb::{MongoBackend, MongoConfig};
///
/// let config = MongoConfig::parse("mongodb://db1,db2,db3/app?replicaSet=rs0")?
///     .collection("locks");
/// let backend = MongoBackend::connect(config).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MongoConfig {
    pub(crate) connection: Connection,
    pub(crate) database: Option<String>,
    pub(crate) collection: String,
    pub(crate) write_concern: Option<WriteConcern>,
    pub(crate) connect_timeout: Duration,
    pub(crate) operation_timeout: Duration,
    pub(crate) ttl_index: bool,
    pub(crate) release_wakeups: bool,
    pub(crate) fair: bool,
}

impl MongoConfig {
    /// A configuration with every setting at its default, reached through
    /// `connection`: a [`Client`] or a [`Database`] used as they are, or a
    /// `mongodb://` or `mongodb+srv://` URL handed to the driver whole (a
    /// distlock URL, with its own options, goes to [`parse`](Self::parse)).
    pub fn new(connection: impl Into<Connection>) -> Self {
        Self {
            connection: connection.into(),
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

    /// Parses a distlock URL: a MongoDB connection string whose path names
    /// the database (default `distlock`), whose distlock-only `collection`
    /// option names the collection (default `distributed_locks`) and whose
    /// `fair=true` turns fair mode on (see [`fair`](Self::fair)); every
    /// other option goes to the driver, which reads it when the backend
    /// connects.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the `collection` or `fair` option is
    /// malformed.
    pub fn parse(url: &str) -> Result<Self> {
        let (driver_url, options) = split_options(url)?;
        let mut config = Self::new(driver_url);
        if let Some(collection) = options.collection {
            config.collection = collection;
        }
        if let Some(fair) = options.fair {
            config.fair = fair;
        }
        Ok(config)
    }

    /// The database holding the lock collection. By default the one named
    /// in the URL's path, else [`DEFAULT_DATABASE`]. Not allowed when the
    /// configuration connects through a [`Database`].
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
    /// settings. [`MongoBackend::connect`](crate::MongoBackend::connect)
    /// waits at most about this long for an unreachable server.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The server-side bound on the commands that no lock client times:
    /// `maxTimeMS` of setup and of the release watcher's, and `wtimeout`
    /// of the default write concern (default 10 s). A lock client's
    /// commands, listing and forced releases included, carry its own
    /// [`operation_timeout`](distlock_core::LockOptions::operation_timeout)
    /// as `maxTimeMS` instead, and the client ends them within it, so one
    /// number bounds every call on a lock.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Whether to create the TTL index on `expiresAt` (default true). The
    /// index only removes idle documents, never one with a fair line;
    /// correctness never depends on it. In fair mode the backend replaces
    /// the index that earlier versions created, which covered lines too.
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

    /// Checks the settings that need no server.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed collection name or a zero
    /// timeout.
    pub(crate) fn check(&self) -> Result<()> {
        check_collection_name(&self.collection)?;
        if self.connect_timeout.is_zero() {
            return Err(Error::config("connect_timeout", "must be above zero"));
        }
        if self.operation_timeout.is_zero() {
            return Err(Error::config("operation_timeout", "must be above zero"));
        }
        Ok(())
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

pub(crate) fn check_database_name(name: &str) -> Result<()> {
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
        let config = MongoConfig::new(connection);
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}

//! Building a [`MongoBackend`]: from a URL, a `Client` or a `Database`.

use std::fmt;
use std::time::{Duration, Instant};

use distlock_core::{Error, Result};
use futures::TryStreamExt;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::{
    ClientOptions, CollectionOptions, IndexOptions, ReadConcern, ReadPreference, SelectionCriteria,
    WriteConcern,
};
use mongodb::{Client, Collection, Database, IndexModel};

use crate::backend::MongoBackend;
use crate::clock::ServerClock;
use crate::document::EXPIRES_AT;
use crate::error::{
    BACKEND, INDEX_KEY_SPECS_CONFLICT, INDEX_OPTIONS_CONFLICT, NAMESPACE_NOT_FOUND, code, driver,
};
use crate::fair::{Places, QUEUE};
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
            create_ttl_index(&collection, self.operation_timeout, self.fair).await;
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

/// The TTL index: `{expiresAt: 1}` with `expireAfterSeconds: 0`, over the
/// documents with no fair line (`queue: null` matches a missing field, and
/// never an array of places). A document with a line is outside the index,
/// so the TTL monitor never deletes it, even once the grant in it has
/// expired: the line, the fencing token and the record of terms stay until
/// a fair write serves the line or drops its dead places (the last write
/// that empties the line removes `queue`, and the document is back in the
/// index). TTL deletion needs a date in the indexed field of a document the
/// index covers; a partial filter of equality with null is within what
/// MongoDB documents for partial indexes (`field: value`), and TTL indexes
/// may be partial.
pub(crate) fn ttl_index_model() -> IndexModel {
    IndexModel::builder()
        .keys(doc! { EXPIRES_AT: 1 })
        .options(
            IndexOptions::builder()
                .expire_after(Duration::ZERO)
                .partial_filter_expression(ttl_index_filter())
                .build(),
        )
        .build()
}

/// The TTL index's partial filter: documents without a fair line.
pub(crate) fn ttl_index_filter() -> Document {
    doc! { QUEUE: null }
}

/// Whether `index` is the TTL index that versions before fair mode kept
/// safe created: `{expiresAt: 1}`, `expireAfterSeconds: 0`, over every
/// document, a fair one whose grant expired with its line alive included.
pub(crate) fn is_earlier_ttl_index(index: &IndexModel) -> bool {
    let on_expiry = index.keys.len() == 1
        && matches!(
            index.keys.get(EXPIRES_AT),
            Some(Bson::Int32(1) | Bson::Int64(1) | Bson::Double(1.0))
        );
    on_expiry
        && index.options.as_ref().is_some_and(|options| {
            options.expire_after == Some(Duration::ZERO)
                && options.partial_filter_expression.is_none()
        })
}

/// Creates the TTL index on `expiresAt`, once per backend; logs a failure.
/// A fair backend first drops the earlier TTL index (see
/// [`is_earlier_ttl_index`]), which could delete a live line; a backend
/// not in fair mode leaves it, since it deletes what the new one would
/// among documents without a line, and those are all such a backend
/// writes.
async fn create_ttl_index(collection: &Collection<Document>, timeout: Duration, fair: bool) {
    let work = async {
        if fair {
            replace_earlier_ttl_index(collection).await;
        }
        collection.create_index(ttl_index_model()).await
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(_)) => tracing::debug!(collection = collection.name(), "TTL index in place"),
        Ok(Err(error))
            if !fair
                && matches!(
                    code(&error),
                    Some(INDEX_OPTIONS_CONFLICT | INDEX_KEY_SPECS_CONFLICT)
                ) =>
        {
            tracing::debug!(
                collection = collection.name(),
                error = %driver("creating the TTL index", error),
                "an earlier TTL index on expiresAt is in place, and serves a backend not in fair mode"
            );
        }
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

/// Drops the earlier TTL index, if the collection has it; logs a failure
/// (the backend works on: fair lines are then at the TTL monitor's mercy
/// while a grant in front of them has expired, until someone drops it).
async fn replace_earlier_ttl_index(collection: &Collection<Document>) {
    let earlier = async {
        let indexes: Vec<IndexModel> = collection.list_indexes().await?.try_collect().await?;
        Ok::<_, mongodb::error::Error>(
            indexes
                .into_iter()
                .filter(is_earlier_ttl_index)
                .filter_map(|index| index.options.and_then(|options| options.name))
                .collect::<Vec<_>>(),
        )
    };
    let names = match earlier.await {
        Ok(names) => names,
        // No collection yet: no index either.
        Err(error) if code(&error) == Some(NAMESPACE_NOT_FOUND) => return,
        Err(error) => {
            tracing::warn!(
                collection = collection.name(),
                error = %driver("listing the collection's indexes", error),
                "cannot check for the earlier TTL index on expiresAt, which can delete a fair lock's line"
            );
            return;
        }
    };
    for name in names {
        match collection.drop_index(&name).await {
            Ok(()) => tracing::info!(
                collection = collection.name(),
                index = name,
                "dropped the earlier TTL index on expiresAt, which could delete a fair lock's line; \
                 its replacement leaves documents with a line alone"
            ),
            Err(error) => tracing::warn!(
                collection = collection.name(),
                index = name,
                error = %driver("dropping the earlier TTL index", error),
                "the earlier TTL index on expiresAt stays, and can delete a fair lock's line once \
                 the grant in front of it expires: drop it by hand (dropIndex) so the backend can \
                 replace it"
            ),
        }
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
    fn only_the_earlier_ttl_index_is_replaced() {
        let earlier = IndexModel::builder()
            .keys(doc! { EXPIRES_AT: 1 })
            .options(IndexOptions::builder().expire_after(Duration::ZERO).build())
            .build();
        assert!(is_earlier_ttl_index(&earlier));
        assert!(!is_earlier_ttl_index(&ttl_index_model()));
        let own = IndexModel::builder()
            .keys(doc! { EXPIRES_AT: 1 })
            .options(
                IndexOptions::builder()
                    .expire_after(Duration::from_secs(60))
                    .build(),
            )
            .build();
        assert!(!is_earlier_ttl_index(&own), "an index of the user's own");
        let plain = IndexModel::builder().keys(doc! { EXPIRES_AT: 1 }).build();
        assert!(!is_earlier_ttl_index(&plain));
    }

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

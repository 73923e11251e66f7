//! Connecting: the client, the database and the lock collection that a
//! [`MongoConfig`] names, and the first word with the server.

use std::time::{Duration, Instant};

use distlock_core::{Error, Result};
use mongodb::bson::{Document, doc};
use mongodb::options::{
    Acknowledgment, ClientOptions, CollectionOptions, ReadConcern, ReadPreference,
    SelectionCriteria, WriteConcern,
};
use mongodb::{Client, Collection, Database};

use crate::clock::ServerClock;
use crate::config::{Connection, DEFAULT_DATABASE, MongoConfig, check_database_name};
use crate::error::{BACKEND, driver};
use crate::redact::{redact_url, scrub, secrets_of};
use crate::url_options::check_driver_options;

/// The lock collection `config` names, with the write concern, read
/// preference and read concern every command of the backend uses, once
/// the server has answered; and the clock read from that answer.
///
/// # Errors
/// [`Error::InvalidConfig`] for a malformed URL or name or a zero
/// timeout; a backend error when the server cannot be reached within the
/// connect timeout. Errors never show the URL's password.
pub(crate) async fn lock_collection(
    config: &MongoConfig,
) -> Result<(Collection<Document>, ServerClock)> {
    config.check()?;
    let (database, described) = match &config.connection {
        Connection::Url(url) => {
            let client = client(url, config.connect_timeout).await?;
            let name = match &config.database {
                Some(name) => name.clone(),
                None => client
                    .default_database()
                    .map_or_else(|| DEFAULT_DATABASE.to_owned(), |db| db.name().to_owned()),
            };
            check_database_name(&name)?;
            (client.database(&name), redact_url(url))
        }
        Connection::Client(client) => {
            let name = config
                .database
                .clone()
                .unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
            check_database_name(&name)?;
            (client.database(&name), "the given client".to_owned())
        }
        Connection::Database(database) => {
            if config.database.is_some() {
                return Err(Error::config(
                    "database",
                    "the configuration connects through a Database; name the database there, \
                     not here",
                ));
            }
            (database.clone(), "the given database".to_owned())
        }
    };
    let write_concern = config.write_concern.clone().unwrap_or_else(|| {
        WriteConcern::builder()
            .w(Acknowledgment::Majority)
            .w_timeout(config.operation_timeout)
            .build()
    });
    // Reads see the primary's latest writes, ours included, whatever the
    // client's or database's defaults (change streams set their own).
    let options = CollectionOptions::builder()
        .write_concern(write_concern)
        .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
        .read_concern(ReadConcern::local())
        .build();
    let collection = database.collection_with_options(&config.collection, options);
    let clock = ServerClock::default();
    hello(&database, &clock, config.connect_timeout, &described).await?;
    Ok((collection, clock))
}

/// Parses `url` and makes a client whose connecting and server selection
/// are bounded by `timeout` unless the URL says otherwise.
async fn client(url: &str, timeout: Duration) -> Result<Client> {
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

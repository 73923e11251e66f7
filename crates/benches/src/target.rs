//! A backend under test, opened from its URL, with whatever the benchmarks
//! need to count the commands its server receives.

use std::sync::Arc;

use distlock::backend::Backend;
use distlock::memcached::MemcachedBackend;
use distlock::mongodb::mongodb::bson::{Document, doc};
use distlock::mongodb::mongodb::options::ClientOptions;
use distlock::mongodb::mongodb::{Client, Database};
use distlock::mongodb::{MongoBackend, MongoConfig};

use crate::commands::{Counts, MongoMonitor, memcached_counts, mongo_opcounters};
use crate::etcd_metrics::EtcdMetrics;
use crate::objectstore::{self, ObjectStoreServer, is_objectstore_url};
use crate::outcome::Outcome;
use crate::pg_statements::PgStatements;
use crate::pg_stats::PgStats;
use crate::redis_peers::RedisServer;
use crate::scale_out::{self, ScaleOut};
use crate::url_kind::{
    ADVISORY_MODE, is_advisory_mode, is_etcd_url, is_fair_mongo_url, is_postgres_url, is_redis_url,
    kind_of_url,
};

/// Which server a target talks to.
#[derive(Debug, Clone)]
pub(crate) enum Server {
    /// A backend whose server commands are not counted (file, memory).
    Uncounted,
    /// MongoDB, through a client that counts every command it sends.
    Mongo {
        monitor: MongoMonitor,
        database: Database,
        /// The lock collection.
        collection: String,
    },
    /// memcached, counted by its `stats`.
    Memcached(Arc<MemcachedBackend>),
    /// etcd, counted by the members' metrics where they can be read (not
    /// over TLS).
    Etcd(Option<EtcdMetrics>),
    /// PostgreSQL, counted in transactions by the database's statistics,
    /// which the server publishes late (see [`crate::pg_stats`]).
    Postgres(PgStats),
    /// PostgreSQL, counted in statements as they end (see
    /// [`crate::pg_statements`]): the waiters curve's.
    PostgresStatements(PgStatements),
    /// Redis, counted by its `INFO commandstats`.
    Redis(RedisServer),
    /// An object store, counted in HTTP requests by each process's own
    /// client (see [`crate::objectstore::requests`]).
    ObjectStore(ObjectStoreServer),
}

/// A backend opened for the benchmarks.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The URL as given.
    pub(crate) url: String,
    /// The URL without credentials, for the report.
    pub(crate) shown: String,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) server: Server,
    /// Its scale-out form, if it spreads over several servers.
    pub(crate) scale_out: Option<ScaleOut>,
}

impl Target {
    /// Opens `url`: MongoDB and memcached URLs with their own backend types
    /// (so that commands can be counted), anything else with
    /// [`distlock::open`], etcd's with its metrics endpoint beside.
    pub(crate) async fn open(url: &str) -> Outcome<Self> {
        let shown = distlock::redact(url);
        let fail = |e: &dyn std::fmt::Display| format!("{shown}: {e}");
        let (backend, server): (Arc<dyn Backend>, Server) = if url.starts_with("mongodb://")
            || url.starts_with("mongodb+srv://")
        {
            let (monitor, database, collection) = mongo_client(url).await.map_err(|e| fail(&e))?;
            let collection =
                collection.unwrap_or_else(|| distlock::mongodb::DEFAULT_COLLECTION.to_owned());
            let config = MongoConfig::new(database.clone())
                .collection(collection.clone())
                .fair(is_fair_mongo_url(url));
            let backend = MongoBackend::connect(config).await.map_err(|e| fail(&e))?;
            let server = Server::Mongo {
                monitor,
                database,
                collection,
            };
            (Arc::new(backend), server)
        } else if url.starts_with("memcache://") || url.starts_with("memcached://") {
            let backend = Arc::new(MemcachedBackend::open(url).await.map_err(|e| fail(&e))?);
            (backend.clone(), Server::Memcached(backend))
        } else if is_redis_url(url) {
            let server = RedisServer::open(url).await.map_err(|e| fail(&e))?;
            (server.backend.clone(), Server::Redis(server))
        } else if is_objectstore_url(url) {
            let (backend, server) = objectstore::open(url).await.map_err(|e| fail(&e))?;
            (backend, Server::ObjectStore(server))
        } else {
            let server = if is_etcd_url(url) {
                Server::Etcd(EtcdMetrics::for_url(url).map_err(|e| fail(&e))?)
            } else if is_postgres_url(url) {
                Server::Postgres(PgStats::for_url(url))
            } else {
                Server::Uncounted
            };
            (distlock::open(url).await.map_err(|e| fail(&e))?, server)
        };
        Ok(Self {
            url: url.to_owned(),
            shown,
            backend,
            server,
            scale_out: ScaleOut::of_url(url),
        })
    }

    /// What kind of backend this is, for the report.
    pub(crate) fn kind(&self) -> &'static str {
        kind_of_url(&self.url)
    }

    /// What the report calls it: its kind, and its scale-out form if any,
    /// or [`ADVISORY_MODE`] for PostgreSQL's advisory mode.
    pub(crate) fn label(&self) -> String {
        let label = if self.advisory_mode() {
            ADVISORY_MODE.to_owned()
        } else {
            scale_out::label(self.kind(), self.scale_out)
        };
        if self.fair() {
            format!("{label}, fair")
        } else {
            label
        }
    }

    /// Whether the backend is in fair mode (`fair=true`): a target of its
    /// own beside the ordinary form, measured without peers.
    pub(crate) fn fair(&self) -> bool {
        self.backend.capabilities().fair
    }

    /// Whether this is distlock's PostgreSQL advisory mode (see
    /// [`is_advisory_mode`]).
    pub(crate) fn advisory_mode(&self) -> bool {
        is_advisory_mode(&self.url)
    }

    /// The commands counted so far: this process's for MongoDB (and its
    /// HTTP requests for an object store), the
    /// server's for memcached and etcd (its requests); `None` where nothing
    /// counts them.
    pub(crate) async fn counts(&self) -> Outcome<Option<Counts>> {
        match &self.server {
            Server::Uncounted | Server::Etcd(None) => Ok(None),
            Server::Mongo { monitor, .. } => Ok(Some(monitor.snapshot())),
            Server::Memcached(backend) => memcached_counts(backend).await.map(Some),
            Server::Etcd(Some(metrics)) => Ok(Some(metrics.sample().await?.requests)),
            Server::Postgres(stats) => stats.sample().await.map(Some),
            Server::PostgresStatements(statements) => statements.sample().await.map(Some),
            Server::Redis(server) => server.counts().await.map(Some),
            Server::ObjectStore(server) => Ok(Some(server.requests.snapshot())),
        }
    }

    /// The time this process's requests have taken so far, by kind, in
    /// microseconds, where its client times them (an object store's).
    pub(crate) fn request_micros(&self) -> Option<Counts> {
        match &self.server {
            Server::ObjectStore(server) => Some(server.requests.micros()),
            _ => None,
        }
    }

    /// The commands between two readings of [`counts`](Self::counts), less
    /// what the earlier reading itself added (PostgreSQL's).
    pub(crate) fn counted_between(&self, before: &Counts, after: &Counts) -> Counts {
        match self.server {
            Server::Postgres(_) => PgStats::between(before, after),
            Server::PostgresStatements(_) => PgStatements::between(before, after),
            _ => after.since(before),
        }
    }

    /// Whether the server itself counts the commands (memcached, etcd,
    /// PostgreSQL, Redis), so that the parent reads them around a run,
    /// rather than each process counting its own (MongoDB).
    pub(crate) fn counted_by_server(&self) -> bool {
        matches!(
            self.server,
            Server::Memcached(_)
                | Server::Etcd(_)
                | Server::Postgres(_)
                | Server::PostgresStatements(_)
                | Server::Redis(_)
        )
    }

    /// This target, counted in statements as they end where it is
    /// PostgreSQL (see [`crate::pg_statements`]); as it is elsewhere.
    pub(crate) fn counting_statements(&self) -> Self {
        let mut target = self.clone();
        if matches!(self.server, Server::Postgres(_)) {
            target.server = Server::PostgresStatements(PgStatements::for_url(&self.url));
        }
        target
    }

    /// Whether the server publishes its counts only once the connections
    /// that made them have closed (PostgreSQL): they are then read only
    /// around worker processes, after they have exited, and not around
    /// work of the parent's own connections.
    pub(crate) fn counts_published_late(&self) -> bool {
        matches!(self.server, Server::Postgres(_))
    }

    /// Deletes the lock documents whose names start with `prefix` (MongoDB
    /// keeps a released lock's document, for its fencing token), so that
    /// the server's TTL monitor does not delete thousands of them in the
    /// middle of a later measurement. A failure is only reported.
    pub(crate) async fn forget(&self, prefix: &str) {
        if let Server::Mongo {
            database,
            collection,
            ..
        } = &self.server
        {
            let pattern = format!("^{}", regex_escape(prefix));
            let deleted = database
                .collection::<Document>(collection)
                .delete_many(doc! { "_id": { "$regex": pattern } })
                .await;
            if let Err(error) = deleted {
                eprintln!("   (could not delete the benchmark's lock documents: {error})");
            }
        }
    }

    /// The processor time the servers have used so far, where they report
    /// it, user and system, summed over every server: Redis's `INFO cpu`,
    /// etcd's `process_cpu_seconds_total`.
    pub(crate) async fn server_cpu(&self) -> Option<std::time::Duration> {
        match &self.server {
            Server::Redis(server) => server.cpu().await,
            Server::Etcd(Some(metrics)) => {
                let seconds = metrics.sample().await.ok()?.cpu_seconds;
                Some(std::time::Duration::from_secs_f64(seconds))
            }
            _ => None,
        }
    }

    /// The server's own operation counters, where it keeps them: MongoDB's
    /// opcounters, etcd's storage operations.
    pub(crate) async fn server_ops(&self) -> Option<Counts> {
        match &self.server {
            Server::Mongo { database, .. } => mongo_opcounters(database).await,
            Server::Etcd(Some(metrics)) => metrics.sample().await.ok()?.storage,
            _ => None,
        }
    }
}

/// `text` with every character a regular expression gives a meaning to
/// escaped.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if !c.is_ascii_alphanumeric() && c != '-' && c != '_' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A MongoDB client for `url` (a distlock URL: its path names the database,
/// default `distlock`, and its `collection` option the collection) that
/// counts its commands. Returns the monitor, the database, and the
/// collection if the URL named one.
pub(crate) async fn mongo_client(
    url: &str,
) -> Result<(MongoMonitor, Database, Option<String>), String> {
    let (driver_url, collection) =
        distlock::mongodb::split_collection_option(url).map_err(|e| e.to_string())?;
    let mut options = ClientOptions::parse(&driver_url)
        .await
        .map_err(|e| e.to_string())?;
    let monitor = MongoMonitor::default();
    options.command_event_handler = Some(monitor.handler());
    options
        .app_name
        .get_or_insert_with(|| "distlock-bench".to_owned());
    let client = Client::with_options(options).map_err(|e| e.to_string())?;
    let database = client
        .default_database()
        .unwrap_or_else(|| client.database(distlock::mongodb::DEFAULT_DATABASE));
    Ok((monitor, database, collection))
}

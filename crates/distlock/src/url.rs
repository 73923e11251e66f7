//! Opening a backend from a URL.

use std::sync::Arc;

use distlock_core::backend::Backend;
use distlock_core::backend::{Query, UrlParts, redact};
use distlock_core::{Error, MemoryBackend, Result};

/// The schemes this build understands, for error messages.
fn known() -> String {
    let schemes: &[&str] = &[
        #[cfg(feature = "file")]
        "file://",
        "memory://",
        #[cfg(feature = "mongodb")]
        "mongodb://",
        #[cfg(feature = "mongodb")]
        "mongodb+srv://",
        #[cfg(feature = "memcached")]
        "memcache://",
        #[cfg(feature = "memcached")]
        "memcached://",
        #[cfg(feature = "postgres")]
        "postgres://",
        #[cfg(feature = "postgres")]
        "postgresql://",
        #[cfg(feature = "etcd")]
        "etcd://",
        #[cfg(feature = "etcd")]
        "etcds://",
        #[cfg(feature = "redis")]
        "redis://",
        #[cfg(feature = "redis")]
        "rediss://",
        #[cfg(feature = "objectstore-s3")]
        "s3://",
        #[cfg(feature = "objectstore-gcs")]
        "gs://",
        #[cfg(feature = "objectstore-azure")]
        "az://",
    ];
    schemes.join(", ")
}

/// A parsed backend URL: the configuration of the backend it names, each
/// behind the feature of that backend's name. Its `Debug` never shows
/// credentials.
// Parsed once per connection and then taken apart: a box around the large
// configurations would cost every caller that matches on them, and save
// nothing that matters.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BackendUrl {
    /// `file://` (the default directory) or `file:///path/to/dir`; see
    /// [`FileConfig::parse`](distlock_file::FileConfig::parse).
    #[cfg(feature = "file")]
    File(distlock_file::FileConfig),
    /// `memory://`: locks in this process's memory only.
    Memory,
    /// `mongodb://…` or `mongodb+srv://…`: the database is the URL's path
    /// (default `distlock`), the collection its `collection` option (default
    /// `distributed_locks`); every other option goes to the driver; see
    /// [`MongoConfig::parse`](distlock_mongodb::MongoConfig::parse).
    #[cfg(feature = "mongodb")]
    MongoDb(distlock_mongodb::MongoConfig),
    /// `memcache://host:port[,host:port…][?prefix=…&mode=sharded|quorum…]`;
    /// see [`MemcachedConfig::parse`](distlock_memcached::MemcachedConfig::parse).
    #[cfg(feature = "memcached")]
    Memcached(distlock_memcached::MemcachedConfig),
    /// `etcd://[user:password@]host[:port][,host[:port]…][?prefix=…]`, or
    /// `etcds://` for TLS; see [`EtcdConfig::parse`](distlock_etcd::EtcdConfig::parse).
    #[cfg(feature = "etcd")]
    Etcd(distlock_etcd::EtcdConfig),
    /// `postgres://…` or `postgresql://…`, as libpq reads it (`sslmode`
    /// and `sslrootcert` included), with distlock's options `table`,
    /// `schema`, `mode`, `listen_url` and `advisory_class`; see
    /// [`PostgresConfig::parse`](distlock_postgres::PostgresConfig::parse).
    #[cfg(feature = "postgres")]
    Postgres(distlock_postgres::PostgresConfig),
    /// `redis://[user:password@]host[:port][,host[:port]…][/db][?prefix=…&mode=…]`,
    /// or `rediss://` for TLS; see [`RedisConfig::parse`](distlock_redis::RedisConfig::parse).
    #[cfg(feature = "redis")]
    Redis(distlock_redis::RedisConfig),
    /// `s3://bucket[/prefix]`, `gs://bucket[/prefix]` or
    /// `az://container[/prefix]`, with `endpoint`, `region`, `account`,
    /// `timeout` and `check`; credentials come from the cloud's
    /// environment; see
    /// [`ObjectStoreConfig::parse`](distlock_objectstore::ObjectStoreConfig::parse).
    #[cfg(any(
        feature = "objectstore-s3",
        feature = "objectstore-gcs",
        feature = "objectstore-azure"
    ))]
    ObjectStore(distlock_objectstore::ObjectStoreConfig),
}

impl BackendUrl {
    /// Parses `url` with the configuration parser of the backend its
    /// scheme names.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an unknown scheme or a malformed URL, as
    /// the backend's parser says; [`Error::Unsupported`] for a backend this
    /// build lacks, naming the feature that adds it. Messages show the URL
    /// with any credentials replaced by `***`.
    pub fn parse(url: &str) -> Result<Self> {
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(Error::config(
                "backend URL",
                format!("`{}` has no scheme; use one of {}", redact(url), known()),
            ));
        };
        match scheme.to_ascii_lowercase().as_str() {
            #[cfg(feature = "file")]
            "file" => Ok(Self::File(distlock_file::FileConfig::parse(url)?)),
            #[cfg(not(feature = "file"))]
            "file" => Err(unsupported(scheme, "file")),
            "memory" => parse_memory(url),
            #[cfg(feature = "mongodb")]
            "mongodb" | "mongodb+srv" => {
                Ok(Self::MongoDb(distlock_mongodb::MongoConfig::parse(url)?))
            }
            #[cfg(not(feature = "mongodb"))]
            "mongodb" | "mongodb+srv" => Err(unsupported(scheme, "mongodb")),
            #[cfg(feature = "memcached")]
            "memcache" | "memcached" => Ok(Self::Memcached(
                distlock_memcached::MemcachedConfig::parse(url)?,
            )),
            #[cfg(not(feature = "memcached"))]
            "memcache" | "memcached" => Err(unsupported(scheme, "memcached")),
            #[cfg(feature = "etcd")]
            "etcd" | "etcds" => Ok(Self::Etcd(distlock_etcd::EtcdConfig::parse(url)?)),
            #[cfg(not(feature = "etcd"))]
            "etcd" | "etcds" => Err(unsupported(scheme, "etcd")),
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => Ok(Self::Postgres(
                distlock_postgres::PostgresConfig::parse(url)?,
            )),
            #[cfg(not(feature = "postgres"))]
            "postgres" | "postgresql" => Err(unsupported(scheme, "postgres")),
            #[cfg(feature = "redis")]
            "redis" | "rediss" => Ok(Self::Redis(distlock_redis::RedisConfig::parse(url)?)),
            #[cfg(not(feature = "redis"))]
            "redis" | "rediss" => Err(unsupported(scheme, "redis")),
            "s3" | "gs" | "az" => parse_object_store(url, scheme),
            _ => Err(Error::config(
                "backend URL",
                format!(
                    "unknown scheme `{scheme}` in `{}`; use one of {}",
                    redact(url),
                    known()
                ),
            )),
        }
    }
}

/// `memory://`, which takes nothing but the client's options, and those
/// were taken out of its query by [`connect`](crate::connect).
fn parse_memory(url: &str) -> Result<BackendUrl> {
    let parts = UrlParts::split(url)?;
    let mut query = Query::parse(parts.query)?;
    if query.take_flag("fair")? == Some(true) {
        return Err(Error::Unsupported(
            "fair=true: fair mode needs a store that keeps a queue of waiters, and memory:// \
             has it only as MemoryBackend::fair(); use a mongodb://, postgres:// or etcd:// \
             URL with fair=true"
                .to_owned(),
        ));
    }
    query.refuse_rest("memory:// takes only the client options, through distlock::connect")?;
    let after_scheme = parts.user_info.is_some()
        || !parts.hosts.is_empty()
        || !parts.path.is_empty()
        || parts.fragment.is_some();
    if after_scheme {
        return Err(Error::config(
            "backend URL",
            "memory:// takes nothing after the scheme but client options",
        ));
    }
    Ok(BackendUrl::Memory)
}

/// An object-storage URL, whose cloud's feature this build may lack.
fn parse_object_store(url: &str, scheme: &str) -> Result<BackendUrl> {
    let (built, feature) = match scheme.to_ascii_lowercase().as_str() {
        "s3" => (cfg!(feature = "objectstore-s3"), "objectstore-s3"),
        "gs" => (cfg!(feature = "objectstore-gcs"), "objectstore-gcs"),
        _ => (cfg!(feature = "objectstore-azure"), "objectstore-azure"),
    };
    if !built {
        return Err(unsupported(scheme, feature));
    }
    #[cfg(any(
        feature = "objectstore-s3",
        feature = "objectstore-gcs",
        feature = "objectstore-azure"
    ))]
    return Ok(BackendUrl::ObjectStore(
        distlock_objectstore::ObjectStoreConfig::parse(url)?,
    ));
    #[cfg(not(any(
        feature = "objectstore-s3",
        feature = "objectstore-gcs",
        feature = "objectstore-azure"
    )))]
    unreachable!("{url}: no object-storage feature is built")
}

/// The error for a scheme whose backend this build lacks: `feature` adds it.
fn unsupported(scheme: &str, feature: &str) -> Error {
    Error::Unsupported(format!(
        "this build of distlock has no `{scheme}` backend; enable distlock's `{feature}` \
         feature (this build knows {})",
        known()
    ))
}

/// The URL of the embedded default backend: `file://` in the default
/// directory.
pub fn default_url() -> String {
    "file://".to_owned()
}

/// Opens the backend at `url`, connecting where the backend has a server.
/// It logs (at debug level) the URL it opens, without its credentials, and
/// how that ended.
///
/// # Errors
/// [`Error::InvalidConfig`] for a malformed URL, [`Error::Unsupported`] for a
/// backend this build lacks, and a backend error when the backend cannot be
/// opened or reached.
pub async fn open(url: &str) -> Result<Arc<dyn Backend>> {
    let shown = redact(url);
    tracing::debug!(url = %shown, "opening a backend");
    let opened = open_parsed(url).await;
    match &opened {
        Ok(backend) => {
            tracing::debug!(url = %shown, store = backend.store_name(), "opened a backend");
        }
        Err(error) => tracing::debug!(url = %shown, %error, "could not open a backend"),
    }
    opened
}

async fn open_parsed(url: &str) -> Result<Arc<dyn Backend>> {
    match BackendUrl::parse(url)? {
        #[cfg(feature = "file")]
        BackendUrl::File(config) => Ok(Arc::new(distlock_file::FileBackend::open(config.dir())?)),
        BackendUrl::Memory => Ok(Arc::new(MemoryBackend::new())),
        #[cfg(feature = "mongodb")]
        BackendUrl::MongoDb(config) => Ok(Arc::new(
            distlock_mongodb::MongoBackend::connect(config).await?,
        )),
        #[cfg(feature = "memcached")]
        BackendUrl::Memcached(config) => Ok(Arc::new(
            distlock_memcached::MemcachedBackend::connect(config).await?,
        )),
        #[cfg(feature = "postgres")]
        BackendUrl::Postgres(config) => Ok(Arc::new(
            distlock_postgres::PostgresBackend::connect(config).await?,
        )),
        #[cfg(feature = "etcd")]
        BackendUrl::Etcd(config) => {
            Ok(Arc::new(distlock_etcd::EtcdBackend::connect(config).await?))
        }
        #[cfg(feature = "redis")]
        BackendUrl::Redis(config) => Ok(Arc::new(
            distlock_redis::RedisBackend::connect(config).await?,
        )),
        #[cfg(any(
            feature = "objectstore-s3",
            feature = "objectstore-gcs",
            feature = "objectstore-azure"
        ))]
        BackendUrl::ObjectStore(config) => Ok(Arc::new(
            distlock_objectstore::ObjectStoreBackend::connect(config).await?,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "file")]
    #[test]
    fn file_urls_are_the_file_backends_to_parse() {
        match BackendUrl::parse("FILE://localhost/tmp/a%20b").unwrap() {
            BackendUrl::File(config) => assert_eq!(config.dir(), std::path::Path::new("/tmp/a b")),
            other => panic!("{other:?}"),
        }
        let error = BackendUrl::parse("file://u:secret@otherhost/tmp").unwrap_err();
        assert!(!error.to_string().contains("secret"), "{error}");
    }

    #[test]
    fn memory_urls_take_nothing_but_client_options() {
        assert!(matches!(
            BackendUrl::parse("memory://").unwrap(),
            BackendUrl::Memory
        ));
        for url in [
            "memory:///x",
            "memory://host",
            "memory://u:p@",
            "memory://#top",
            "memory://?leese=1",
        ] {
            let error = BackendUrl::parse(url).unwrap_err();
            assert!(
                matches!(error, Error::InvalidConfig { .. }),
                "{url}: {error}"
            );
        }
    }

    #[test]
    fn fair_mode_is_refused_where_no_queue_is_kept() {
        let urls: &[&str] = &[
            "memory://?fair=true",
            #[cfg(feature = "file")]
            "file:///tmp/locks?fair=true",
        ];
        for url in urls {
            match BackendUrl::parse(url) {
                Err(Error::Unsupported(why)) => {
                    assert!(why.starts_with("fair=true: "), "{url}: {why}");
                    assert!(why.contains("etcd://"), "{url}: {why}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
        assert!(BackendUrl::parse("memory://?fair=false").is_ok());
    }

    #[test]
    fn unknown_schemes_are_named_and_credentials_hidden() {
        let err = BackendUrl::parse("ftp://bob:secret@host/x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown scheme `ftp`"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        let err = BackendUrl::parse("no-scheme").unwrap_err().to_string();
        assert!(err.contains("no scheme"), "{err}");
    }

    /// A backend left out of the build is named, with the feature that
    /// adds it, and without the URL's credentials.
    #[test]
    fn a_scheme_whose_feature_is_off_names_the_feature() {
        let schemes = [
            ("file", cfg!(feature = "file")),
            ("mongodb", cfg!(feature = "mongodb")),
            ("memcached", cfg!(feature = "memcached")),
            ("postgres", cfg!(feature = "postgres")),
            ("etcd", cfg!(feature = "etcd")),
            ("redis", cfg!(feature = "redis")),
        ];
        for (feature, _) in schemes.iter().filter(|(_, built)| !built) {
            let url = format!("{feature}://u:hunter2@host/x");
            match BackendUrl::parse(&url) {
                Err(Error::Unsupported(why)) => {
                    assert!(why.contains(&format!("`{feature}` feature")), "{why}");
                    assert!(!why.contains("hunter2"), "{why}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[cfg(feature = "mongodb")]
    #[test]
    fn parses_mongodb_urls_and_hides_their_credentials() {
        let url = "mongodb://app:hunter2@db1,db2/locks?replicaSet=rs0&collection=l&tlsCertificateKeyFilePassword=hunter2";
        let parsed = BackendUrl::parse(url).unwrap();
        let shown = format!("{parsed:?}");
        assert!(matches!(parsed, BackendUrl::MongoDb(_)), "{shown}");
        assert!(shown.contains(r#"collection: "l""#), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(matches!(
            BackendUrl::parse("mongodb+srv://cluster.example/").unwrap(),
            BackendUrl::MongoDb(_)
        ));
        let err = BackendUrl::parse("mongodb://u:hunter2@h/db?collection=").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[cfg(feature = "memcached")]
    #[test]
    fn parses_memcached_urls() {
        match BackendUrl::parse("memcache://h1:11211,h2?mode=sharded&prefix=app:").unwrap() {
            BackendUrl::Memcached(config) => {
                assert_eq!(config.servers(), ["h1:11211", "h2:11211"]);
                assert_eq!(config.prefix(), "app:");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            BackendUrl::parse("memcached://h1").unwrap(),
            BackendUrl::Memcached(_)
        ));
        let err = BackendUrl::parse("memcache://a:1,b:1?mode=quorum").unwrap_err();
        assert!(err.to_string().contains("at least 3"), "{err}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn parses_postgres_urls_and_hides_their_credentials() {
        for url in [
            "postgres://app:hunter2@db/app?table=locks",
            "postgresql://app:hunter2@db:6432/app?sslmode=require",
            "postgres://db/app?password=hunter2",
        ] {
            let parsed = BackendUrl::parse(url).unwrap();
            let shown = format!("{parsed:?}");
            assert!(matches!(parsed, BackendUrl::Postgres(_)), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        match BackendUrl::parse("postgres://db/app?table=locks&mode=advisory").unwrap() {
            BackendUrl::Postgres(config) => {
                assert_eq!(config.table(), "locks");
                assert_eq!(config.mode, distlock_postgres::Mode::Advisory);
            }
            other => panic!("{other:?}"),
        }
        let err = BackendUrl::parse("postgres://u:hunter2@db/app?mode=bogus").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn parses_etcd_urls_and_hides_their_credentials() {
        let parsed = BackendUrl::parse("ETCD://root:hunter2@m1,m2:2380?prefix=app/").unwrap();
        match &parsed {
            BackendUrl::Etcd(config) => {
                assert_eq!(config.endpoints, ["m1:2379", "m2:2380"]);
                assert_eq!(config.prefix, "app/");
                assert!(!config.tls);
            }
            other => panic!("{other:?}"),
        }
        assert!(!format!("{parsed:?}").contains("hunter2"));
        assert!(matches!(
            BackendUrl::parse("etcds://m1").unwrap(),
            BackendUrl::Etcd(config) if config.tls
        ));
        let err = BackendUrl::parse("etcd://u:hunter2@m1?bogus=1").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    /// `a+b%2Bc` is `a+b+c` wherever it is read: a `+` is a plus sign on
    /// every backend, as every driver reads it.
    #[test]
    fn a_plus_in_an_option_reads_the_same_on_every_backend() {
        const WRITTEN: &str = "a+b%2Bc";
        const READ: &str = "a+b+c";
        #[cfg(feature = "file")]
        match BackendUrl::parse(&format!("file:///tmp/{WRITTEN}")).unwrap() {
            BackendUrl::File(config) => {
                assert_eq!(config.dir(), std::path::Path::new(&format!("/tmp/{READ}")));
            }
            other => panic!("{other:?}"),
        }
        #[cfg(feature = "etcd")]
        match BackendUrl::parse(&format!("etcd://h?prefix={WRITTEN}")).unwrap() {
            BackendUrl::Etcd(config) => assert_eq!(config.prefix, READ),
            other => panic!("{other:?}"),
        }
        #[cfg(feature = "memcached")]
        match BackendUrl::parse(&format!("memcache://h?prefix={WRITTEN}")).unwrap() {
            BackendUrl::Memcached(config) => assert_eq!(config.prefix(), READ),
            other => panic!("{other:?}"),
        }
        #[cfg(feature = "postgres")]
        match BackendUrl::parse(&format!("postgres://h/db?table={WRITTEN}")).unwrap() {
            BackendUrl::Postgres(config) => assert_eq!(config.table(), READ),
            other => panic!("{other:?}"),
        }
        #[cfg(feature = "redis")]
        match BackendUrl::parse(&format!("redis://h?prefix={WRITTEN}")).unwrap() {
            BackendUrl::Redis(config) => assert_eq!(config.prefix, READ),
            other => panic!("{other:?}"),
        }
        #[cfg(feature = "mongodb")]
        match BackendUrl::parse(&format!("mongodb://h/db?collection={WRITTEN}")).unwrap() {
            BackendUrl::MongoDb(config) => {
                let shown = format!("{config:?}");
                assert!(shown.contains(&format!("collection: {READ:?}")), "{shown}");
            }
            other => panic!("{other:?}"),
        }
    }
    #[cfg(feature = "redis")]
    #[test]
    fn parses_redis_urls_and_hides_their_credentials() {
        let parsed = BackendUrl::parse("REDIS://app:hunter2@cache:6380/2?prefix=app:").unwrap();
        match &parsed {
            BackendUrl::Redis(config) => {
                assert_eq!(config.servers[0].to_string(), "cache:6380");
                assert_eq!((config.db, config.prefix.as_str()), (2, "app:"));
                assert!(!config.tls);
            }
            other => panic!("{other:?}"),
        }
        assert!(!format!("{parsed:?}").contains("hunter2"));
        assert!(matches!(
            BackendUrl::parse("rediss://cache").unwrap(),
            BackendUrl::Redis(config) if config.tls
        ));
        let err = BackendUrl::parse("redis://u:hunter2@cache?bogus=1").unwrap_err();
        assert!(
            err.to_string().contains("bogus") && !err.to_string().contains("hunter2"),
            "{err}"
        );
        assert!(matches!(
            BackendUrl::parse("redis://a:1,b:2,c:3?mode=quorum").unwrap(),
            BackendUrl::Redis(config) if config.servers.len() == 3
        ));
        assert!(matches!(
            BackendUrl::parse("redis://a:1,b:2?mode=cluster").unwrap(),
            BackendUrl::Redis(config)
                if config.mode == distlock_redis::Mode::Cluster && config.servers.len() == 2
        ));
    }

    #[test]
    fn redaction_covers_user_and_password() {
        assert_eq!(redact("memcache://u:p@h:1,h2:2"), "memcache://***@h:1,h2:2");
        assert_eq!(redact("mongodb://h/db?x=a@b"), "mongodb://h/db?x=a@b");
        assert_eq!(redact("file:///tmp"), "file:///tmp");
    }
}

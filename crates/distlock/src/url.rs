//! Opening a backend from a URL.

use std::path::PathBuf;
use std::sync::Arc;

use distlock_core::backend::Backend;
use distlock_core::backend::{Query, UrlParts, percent_decode, redact};
use distlock_core::{Error, MemoryBackend, Result};

/// The schemes this build understands, for error messages.
fn known() -> String {
    let schemes: &[&str] = &[
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
    ];
    schemes.join(", ")
}

/// A parsed backend URL. Its `Display` never shows credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendUrl {
    /// `file://` (the default directory) or `file:///path/to/dir`.
    File(PathBuf),
    /// `memory://`: locks in this process's memory only.
    Memory,
    /// `mongodb://…` or `mongodb+srv://…`: the database is the URL's path
    /// (default `distlock`), the collection its `collection` option (default
    /// `distributed_locks`); every other option goes to the driver.
    MongoDb(SecretUrl),
    /// `memcache://host:port[,host:port…][?prefix=…&mode=sharded|quorum…]`;
    /// see [`MemcachedConfig::from_url`](distlock_memcached::MemcachedConfig::from_url).
    #[cfg(feature = "memcached")]
    Memcached(distlock_memcached::MemcachedConfig),
    /// `etcd://[user:password@]host[:port][,host[:port]…][?prefix=…]`, or
    /// `etcds://` for TLS; see [`EtcdConfig::parse`](distlock_etcd::EtcdConfig::parse).
    #[cfg(feature = "etcd")]
    Etcd(distlock_etcd::EtcdConfig),
    /// `postgres://…` or `postgresql://…`, as libpq reads it (`sslmode`
    /// and `sslrootcert` included), with distlock's options `table`,
    /// `schema`, `mode`, `listen_url` and `advisory_class`; see
    /// [`PostgresConfig`](distlock_postgres::PostgresConfig).
    #[cfg(feature = "postgres")]
    Postgres(SecretUrl),
    /// `redis://[user:password@]host[:port][,host[:port]…][/db][?prefix=…&mode=…]`,
    /// or `rediss://` for TLS; see [`RedisConfig::parse`](distlock_redis::RedisConfig::parse).
    #[cfg(feature = "redis")]
    Redis(distlock_redis::RedisConfig),
}

/// A URL that may hold credentials: its `Debug` and `Display` show it with
/// the user information replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// The URL itself, credentials included: pass it to the driver, never
    /// to a log.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&redact(&self.0), f)
    }
}

impl std::fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl BackendUrl {
    /// Parses `url`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an unknown scheme or a malformed URL; the
    /// message shows the URL with any credentials replaced by `***`.
    pub fn parse(url: &str) -> Result<Self> {
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(Error::config(
                "backend URL",
                format!("`{}` has no scheme; use one of {}", redact(url), known()),
            ));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => parse_file(&local_parts(url)?, url),
            "memory" => {
                let parts = local_parts(url)?;
                if parts.user_info.is_some() || !parts.hosts.is_empty() || !parts.path.is_empty() {
                    return Err(Error::config(
                        "backend URL",
                        "memory:// takes nothing after the scheme but client options",
                    ));
                }
                Ok(Self::Memory)
            }
            #[cfg(feature = "mongodb")]
            "mongodb" | "mongodb+srv" => Ok(Self::MongoDb(SecretUrl(url.to_owned()))),
            #[cfg(not(feature = "mongodb"))]
            "mongodb" | "mongodb+srv" => Err(unsupported(scheme)),
            #[cfg(feature = "memcached")]
            "memcache" | "memcached" => Ok(Self::Memcached(
                distlock_memcached::MemcachedConfig::from_url(url)?,
            )),
            #[cfg(not(feature = "memcached"))]
            "memcache" | "memcached" => Err(unsupported(scheme)),
            #[cfg(feature = "etcd")]
            "etcd" | "etcds" => Ok(Self::Etcd(distlock_etcd::EtcdConfig::parse(url)?)),
            #[cfg(not(feature = "etcd"))]
            "etcd" | "etcds" => Err(unsupported(scheme)),
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => Ok(Self::Postgres(SecretUrl(url.to_owned()))),
            #[cfg(not(feature = "postgres"))]
            "postgres" | "postgresql" => Err(unsupported(scheme)),
            #[cfg(feature = "redis")]
            "redis" | "rediss" => Ok(Self::Redis(distlock_redis::RedisConfig::parse(url)?)),
            #[cfg(not(feature = "redis"))]
            "redis" | "rediss" => Err(unsupported(scheme)),
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

/// The parts of a `file://` or `memory://` URL, a backend that has no
/// options of its own: whatever option is left in its query (the client's
/// were taken out by [`connect`](crate::connect)) is refused by name.
fn local_parts(url: &str) -> Result<UrlParts<'_>> {
    let parts = UrlParts::split(url)?;
    let mut query = Query::parse(parts.query)?;
    if query.take_flag("fair")? == Some(true) {
        return Err(Error::Unsupported(
            "fair=true: fair mode needs a store that keeps a queue of waiters: a file lock's \
             waiters are woken in no set order, and memory:// has it only as \
             MemoryBackend::fair(); use a mongodb://, postgres:// or etcd:// URL with fair=true"
                .to_owned(),
        ));
    }
    query.refuse_rest(
        "this backend takes only the client options (lease, extend_every, safety_margin, \
         operation_timeout, backoff_min, backoff_max, local_hand_overs, min_local_run, label), \
         through distlock::connect",
    )?;
    if parts.fragment.is_some() {
        return Err(Error::config(
            "backend URL",
            format!(
                "`{}` has a #fragment; write a `#` in a path as %23",
                redact(url)
            ),
        ));
    }
    Ok(parts)
}

#[cfg(not(all(
    feature = "mongodb",
    feature = "memcached",
    feature = "etcd",
    feature = "postgres",
    feature = "redis"
)))]
fn unsupported(scheme: &str) -> Error {
    Error::Unsupported(format!(
        "this build of distlock has no `{scheme}` backend; this build knows {}",
        known()
    ))
}

fn parse_file(parts: &UrlParts<'_>, url: &str) -> Result<BackendUrl> {
    let host = parts.hosts;
    if parts.user_info.is_some() || (!host.is_empty() && host != "localhost") {
        // Never the user information itself: it may hold a password.
        let named = match (parts.user_info, host) {
            (None, _) => format!("the host `{host}`"),
            (Some(_), "" | "localhost") => "user information".to_owned(),
            (Some(_), _) => format!("user information and the host `{host}`"),
        };
        return Err(Error::config(
            "backend URL",
            format!(
                "`{}` names {named}; a file URL is local and has no credentials: write \
                 file:///absolute/path",
                redact(url)
            ),
        ));
    }
    if parts.path.is_empty() {
        return Ok(BackendUrl::File(default_dir()));
    }
    let decoded = percent_decode(parts.path)
        .ok()
        .filter(|path| !path.contains('\0'))
        .ok_or_else(|| {
            Error::config(
                "backend URL",
                format!(
                    "`{}` has a malformed %-escape, or a NUL, in its path",
                    redact(url)
                ),
            )
        })?;
    Ok(BackendUrl::File(PathBuf::from(decoded)))
}

#[cfg(feature = "file")]
fn default_dir() -> PathBuf {
    distlock_file::FileBackend::default_dir()
}

#[cfg(not(feature = "file"))]
fn default_dir() -> PathBuf {
    std::env::temp_dir().join("distlock")
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
        BackendUrl::File(dir) => Ok(Arc::new(distlock_file::FileBackend::open(dir)?)),
        #[cfg(not(feature = "file"))]
        BackendUrl::File(_) => Err(Error::Unsupported(
            "this build of distlock has no file backend; enable the `file` feature".into(),
        )),
        BackendUrl::Memory => Ok(Arc::new(MemoryBackend::new())),
        #[cfg(feature = "mongodb")]
        BackendUrl::MongoDb(url) => Ok(Arc::new(
            distlock_mongodb::MongoBackend::open(url.expose()).await?,
        )),
        #[cfg(not(feature = "mongodb"))]
        BackendUrl::MongoDb(_) => Err(Error::Unsupported(
            "this build of distlock has no mongodb backend; enable the `mongodb` feature".into(),
        )),
        #[cfg(feature = "memcached")]
        BackendUrl::Memcached(config) => Ok(Arc::new(
            distlock_memcached::MemcachedBackend::connect(config).await?,
        )),
        #[cfg(feature = "postgres")]
        BackendUrl::Postgres(url) => Ok(Arc::new(
            distlock_postgres::PostgresBackend::open(url.expose()).await?,
        )),
        #[cfg(feature = "etcd")]
        BackendUrl::Etcd(config) => {
            Ok(Arc::new(distlock_etcd::EtcdBackend::connect(config).await?))
        }
        #[cfg(feature = "redis")]
        BackendUrl::Redis(config) => Ok(Arc::new(
            distlock_redis::RedisBackend::connect(config).await?,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_urls() {
        assert_eq!(
            BackendUrl::parse("file://").unwrap(),
            BackendUrl::File(default_dir())
        );
        assert_eq!(
            BackendUrl::parse("file:///var/lock/app").unwrap(),
            BackendUrl::File("/var/lock/app".into())
        );
        assert_eq!(
            BackendUrl::parse("file://localhost/tmp/a%20b").unwrap(),
            BackendUrl::File("/tmp/a b".into())
        );
        assert!(BackendUrl::parse("file://otherhost/tmp").is_err());
        assert_eq!(
            BackendUrl::parse("file:///tmp/a+b%2Bc").unwrap(),
            BackendUrl::File("/tmp/a+b+c".into())
        );
        for url in [
            "file:///tmp/%zz",
            "file:///tmp/a%00",
            "file:///tmp/a#b",
            "memory:///x",
        ] {
            assert!(BackendUrl::parse(url).is_err(), "{url}");
        }
    }

    #[test]
    fn fair_mode_is_refused_where_no_queue_is_kept() {
        for url in ["file:///tmp/locks?fair=true", "memory://?fair=true"] {
            match BackendUrl::parse(url) {
                Err(Error::Unsupported(why)) => {
                    assert!(why.starts_with("fair=true: "), "{url}: {why}");
                    assert!(why.contains("etcd://"), "{url}: {why}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
        assert!(BackendUrl::parse("file:///tmp/locks?fair=false").is_ok());
    }

    #[test]
    fn file_urls_with_user_information_are_refused_without_showing_it() {
        for url in [
            "file://u:secret@localhost/tmp",
            "file://u:secret@/tmp",
            "file://u:secret@otherhost/tmp",
        ] {
            let err = BackendUrl::parse(url).unwrap_err().to_string();
            assert!(!err.contains("secret"), "{err}");
            assert!(err.contains("user information"), "{err}");
        }
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

    #[cfg(feature = "mongodb")]
    #[test]
    fn parses_mongodb_urls_and_hides_their_credentials() {
        let url = "mongodb://app:hunter2@db1,db2/locks?replicaSet=rs0&collection=l";
        let parsed = BackendUrl::parse(url).unwrap();
        match &parsed {
            BackendUrl::MongoDb(secret) => assert_eq!(secret.expose(), url),
            other => panic!("{other:?}"),
        }
        assert!(!format!("{parsed:?}").contains("hunter2"));
        assert!(matches!(
            BackendUrl::parse("mongodb+srv://cluster.example/").unwrap(),
            BackendUrl::MongoDb(_)
        ));
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
            "POSTGRESQL://app:hunter2@db:6432/app",
        ] {
            let parsed = BackendUrl::parse(url).unwrap();
            match &parsed {
                BackendUrl::Postgres(secret) => assert_eq!(secret.expose(), url),
                other => panic!("{other:?}"),
            }
            assert!(!format!("{parsed:?}").contains("hunter2"));
        }
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
        assert_eq!(
            BackendUrl::parse(&format!("file:///tmp/{WRITTEN}")).unwrap(),
            BackendUrl::File(format!("/tmp/{READ}").into())
        );
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
            BackendUrl::Postgres(url) => {
                let config = distlock_postgres::PostgresConfig::parse(url.expose()).unwrap();
                assert_eq!(config.table(), READ);
            }
            other => panic!("{other:?}"),
        }
        #[cfg(feature = "redis")]
        match BackendUrl::parse(&format!("redis://h?prefix={WRITTEN}")).unwrap() {
            BackendUrl::Redis(config) => assert_eq!(config.prefix, READ),
            other => panic!("{other:?}"),
        }
        #[cfg(feature = "mongodb")]
        match BackendUrl::parse(&format!("mongodb://h/db?collection={WRITTEN}")).unwrap() {
            BackendUrl::MongoDb(url) => {
                let (_, collection) =
                    distlock_mongodb::split_collection_option(url.expose()).unwrap();
                assert_eq!(collection.as_deref(), Some(READ));
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

//! The backend's URL:
//! `redis://[user:password@]host[:port][,host[:port]…][/db][?prefix=…&mode=…]`,
//! and `rediss://` for TLS.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use distlock_core::backend::{Query, UrlParts, parse_hosts, percent_decode, redact};
use distlock_core::{Error, Result};

/// Redis's port, when the URL names none.
pub const DEFAULT_PORT: u16 = 6379;

/// The key prefix, when the URL names none.
pub const DEFAULT_PREFIX: &str = "distlock:";

/// How long a name's token counter and record of terms outlive its last
/// grant, when the URL names no `token_keep`: 30 days.
pub const DEFAULT_TOKEN_KEEP: Duration = Duration::from_secs(30 * 86_400);

/// The shortest `token_keep`: one minute. Tokens are `max(previous + 1,
/// server time in µs)`, so once the counter is gone they come from the
/// server's clock alone; the counter only guards against that clock
/// stepping backwards by more than the time since the name's last grant,
/// and against tokens taken ahead of it (a hand-over's block of 64 µs,
/// a quorum grant's token from a server whose clock runs ahead). A minute
/// leaves those ahead tokens behind with room to spare.
pub const MIN_TOKEN_KEEP: Duration = Duration::from_secs(60);

/// The fewest servers quorum mode takes: with fewer, losing one would stop
/// every grant, which is no better than one server.
pub const MIN_QUORUM_SERVERS: usize = 3;

/// How the backend uses the servers of its URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// One server (`mode=single`, the default).
    #[default]
    Single,
    /// Three or more independent servers (`mode=quorum`), each holding its
    /// own copy of every lock: a lock is held while a majority granted it.
    Quorum,
    /// A Redis Cluster (`mode=cluster`), reached through one or more of its
    /// nodes (seeds): each name lives on the master of its slot, as it
    /// would on one server.
    Cluster,
}

/// One Redis server of the URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisServer {
    /// The host name or address (an IPv6 address without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
}

impl std::fmt::Display for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Where the backend connects, and under which prefix it keeps its keys.
///
/// `Debug` never shows the user or the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// The servers, in the URL's order: one in [`Mode::Single`], three or
    /// more distinct ones in [`Mode::Quorum`], one or more distinct seed
    /// nodes in [`Mode::Cluster`].
    pub servers: Vec<RedisServer>,
    /// How the servers are used (`?mode=`).
    pub mode: Mode,
    /// Whether to connect with TLS (`rediss://`), checking the server's
    /// certificate against the system's roots, or [`ca`](Self::ca).
    pub tls: bool,
    /// A PEM file with the CA that signed the servers' certificates, for a
    /// private CA (`?ca=PATH`, with `rediss://` only): then it alone is
    /// trusted.
    pub ca: Option<PathBuf>,
    /// How many replicas must have each grant and extension before it
    /// counts (`?wait_replicas=N`, Redis's `WAIT`); none by default. Only
    /// with one server (`mode=single`).
    pub wait_replicas: Option<u32>,
    /// How long a name's token counter, and an election's record of
    /// terms, outlive the name's last grant (`?token_keep=`, default
    /// [`DEFAULT_TOKEN_KEEP`], at least [`MIN_TOKEN_KEEP`]). Shorter, per-entity
    /// names cost the server less; past it, a name's next token comes from
    /// the server's clock alone, which is safe unless that clock steps
    /// backwards by more than the time since the name's last grant.
    pub token_keep: Duration,
    /// The logical database (`/db`, default 0; a cluster has only 0).
    pub db: i64,
    /// Every key and channel of this backend starts with it (`?prefix=`,
    /// default [`DEFAULT_PREFIX`]). It may not hold `{` or `}`, which would
    /// take the place of each name's hash tag.
    pub prefix: String,
    /// The user (ACL) and password to authenticate with, from the URL.
    pub(crate) credentials: Option<(Option<String>, String)>,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("servers", &self.servers)
            .field("mode", &self.mode)
            .field("tls", &self.tls)
            .field("ca", &self.ca)
            .field("wait_replicas", &self.wait_replicas)
            .field("token_keep", &self.token_keep)
            .field("db", &self.db)
            .field("prefix", &self.prefix)
            .field("credentials", &self.credentials.as_ref().map(|_| "***"))
            .finish()
    }
}

impl RedisConfig {
    /// Parses a `redis://` or `rediss://` URL. Several hosts, separated by
    /// commas, are for `mode=quorum` or `mode=cluster`; every server takes
    /// the same credentials, database and TLS setting.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the part at fault: another scheme, no
    /// host, a bad port or database, an unknown option, a malformed escape,
    /// a bad prefix, a `token_keep` that is not a duration or is under
    /// [`MIN_TOKEN_KEEP`], several hosts in `mode=single`, fewer than three
    /// hosts in `mode=quorum`, a host named twice, a database other than 0
    /// or `wait_replicas` in `mode=cluster`. Messages never include the user
    /// or the password.
    pub fn parse(url: &str) -> Result<Self> {
        let parts = UrlParts::split(url)?;
        let tls = match parts.scheme.to_ascii_lowercase().as_str() {
            "redis" => false,
            "rediss" => true,
            _ => {
                return Err(Error::config(
                    "url",
                    format!(
                        "`{}` is not a Redis URL: it starts with redis:// (or rediss:// for TLS)",
                        redact(url)
                    ),
                ));
            }
        };
        if parts.fragment.is_some() {
            return Err(Error::config("url", "a Redis URL takes no #fragment"));
        }
        // The options first: a mode this version lacks is named as such,
        // whatever the hosts look like.
        let Options {
            mode,
            prefix,
            ca,
            wait_replicas,
            token_keep,
        } = parse_query(parts.query)?;
        if ca.is_some() && !tls {
            return Err(Error::config(
                "ca",
                "a CA checks a TLS server's certificate: use rediss:// with ?ca=",
            ));
        }
        let credentials = parts.user_info.map(parse_credentials).transpose()?;
        let db = parse_db(parts.path.strip_prefix('/').unwrap_or(parts.path))?;
        let servers: Vec<RedisServer> = parse_hosts(parts.hosts)
            .map_err(|bad| Error::config(bad.part(), bad.to_string()))?
            .into_iter()
            .map(|host| RedisServer {
                port: host.port.unwrap_or(DEFAULT_PORT),
                host: host.host,
            })
            .collect();
        check_servers(mode, &servers)?;
        check_cluster_db(mode, db)?;
        Ok(Self {
            servers,
            mode,
            tls,
            ca,
            wait_replicas,
            token_keep,
            db,
            prefix,
            credentials,
        })
    }

    /// How many servers must agree: all of one in single mode, a majority
    /// in quorum mode, and one in cluster mode, where each name lives on one
    /// master.
    pub fn quorum(&self) -> usize {
        match self.mode {
            Mode::Single => self.servers.len(),
            Mode::Quorum => self.servers.len() / 2 + 1,
            Mode::Cluster => 1,
        }
    }

    /// The driver's connection information for `server`.
    pub(crate) fn connection_info(&self, server: &RedisServer) -> redis::ConnectionInfo {
        let addr = if self.tls {
            redis::ConnectionAddr::TcpTls {
                host: server.host.clone(),
                port: server.port,
                insecure: false,
                tls_params: None,
            }
        } else {
            redis::ConnectionAddr::Tcp(server.host.clone(), server.port)
        };
        let (username, password) = match &self.credentials {
            Some((user, password)) => (user.clone(), Some(password.clone())),
            None => (None, None),
        };
        redis::ConnectionInfo {
            addr,
            redis: redis::RedisConnectionInfo {
                db: self.db,
                username,
                password,
                protocol: redis::ProtocolVersion::RESP2,
            },
        }
    }
}

/// What a URL's query sets.
struct Options {
    mode: Mode,
    prefix: String,
    ca: Option<PathBuf>,
    wait_replicas: Option<u32>,
    token_keep: Duration,
}

/// Reads the URL's query. Every option is named here, and anything else
/// is refused by name.
fn parse_query(query: &str) -> Result<Options> {
    let mut query = Query::parse(query)?;
    let mode = match query.take("mode")?.as_deref() {
        None | Some("single") => Mode::Single,
        Some("quorum") => Mode::Quorum,
        Some("cluster") => Mode::Cluster,
        Some(other) => {
            return Err(Error::config(
                "mode",
                format!(
                    "unknown mode `{other}`; the redis backend has mode=single (the default), \
                     mode=quorum and mode=cluster"
                ),
            ));
        }
    };
    let prefix = query
        .take("prefix")?
        .unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
    check_prefix(&prefix)?;
    let ca = query
        .take("ca")?
        .filter(|ca| !ca.is_empty())
        .map(PathBuf::from);
    let wait_replicas = query
        .take("wait_replicas")?
        .map(|replicas| parse_wait_replicas(&replicas, mode))
        .transpose()?;
    let token_keep = query
        .take("token_keep")?
        .map(|keep| parse_token_keep(&keep))
        .transpose()?
        .unwrap_or(DEFAULT_TOKEN_KEEP);
    if query.take_flag("fair")? == Some(true) {
        return Err(Error::Unsupported(
            "fair=true: the redis backend has no fair mode yet; use a mongodb://, postgres:// \
             or etcd:// URL with fair=true for waiters served in the order they asked"
                .to_owned(),
        ));
    }
    query.refuse_rest(
        "a redis URL takes prefix, mode (single, quorum or cluster), ca, wait_replicas and \
         token_keep",
    )?;
    Ok(Options {
        mode,
        prefix,
        ca,
        wait_replicas,
        token_keep,
    })
}

/// `?wait_replicas=N`: a whole number from 1, with one server.
fn parse_wait_replicas(replicas: &str, mode: Mode) -> Result<u32> {
    check_wait_replicas(mode)?;
    match replicas.parse::<u32>() {
        Ok(replicas) if replicas > 0 => Ok(replicas),
        _ => Err(Error::config(
            "wait_replicas",
            format!("`{replicas}` is not a number of replicas: give a whole number from 1"),
        )),
    }
}

/// `?token_keep=`: a whole number of seconds, minutes, hours or days
/// (`600s`, `90m`, `12h`, `7d`), at least [`MIN_TOKEN_KEEP`].
fn parse_token_keep(text: &str) -> Result<Duration> {
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(0);
    let (number, unit) = text.split_at(digits);
    let seconds = match unit {
        "s" => Some(1),
        "m" => Some(60),
        "h" => Some(3_600),
        "d" => Some(86_400),
        _ => None,
    };
    let keep = number
        .parse::<u64>()
        .ok()
        .zip(seconds)
        .and_then(|(number, seconds)| number.checked_mul(seconds))
        .map(Duration::from_secs)
        .ok_or_else(|| {
            Error::config(
                "token_keep",
                format!(
                    "`{text}` is not a duration: write a whole number of s, m, h or d, such \
                     as 7d or 12h"
                ),
            )
        })?;
    check_token_keep(keep)?;
    Ok(keep)
}

/// Refuses a `token_keep` under [`MIN_TOKEN_KEEP`].
///
/// # Errors
/// [`Error::InvalidConfig`] naming `token_keep`.
pub(crate) fn check_token_keep(keep: Duration) -> Result<()> {
    if keep < MIN_TOKEN_KEEP {
        return Err(Error::config(
            "token_keep",
            format!(
                "{} s is under the floor of {} s: a name's token counter must outlive the \
                 tokens taken ahead of the server's clock; give 1m or more (the default is \
                 30d), or leave token_keep out",
                keep.as_secs_f64(),
                MIN_TOKEN_KEEP.as_secs()
            ),
        ));
    }
    Ok(())
}

/// Refuses `wait_replicas` outside single mode.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `wait_replicas`.
pub(crate) fn check_wait_replicas(mode: Mode) -> Result<()> {
    match mode {
        Mode::Single => {}
        Mode::Quorum => {
            return Err(Error::config(
                "wait_replicas",
                "is for mode=single: in quorum mode each server is a primary of its own, and a \
                 majority of them already holds every grant",
            ));
        }
        Mode::Cluster => {
            return Err(Error::config(
                "wait_replicas",
                "is for mode=single: in mode=cluster this version does not wait for the \
                 replicas of each name's master, so a failover inside the cluster can lose a \
                 lock; drop wait_replicas, or use one primary with replicas in mode=single",
            ));
        }
    }
    Ok(())
}

/// Refuses a database other than 0 in cluster mode: a Redis Cluster has
/// database 0 alone.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `db`.
pub(crate) fn check_cluster_db(mode: Mode, db: i64) -> Result<()> {
    if mode == Mode::Cluster && db != 0 {
        return Err(Error::config(
            "db",
            format!(
                "a Redis Cluster has database 0 alone, and the URL names /{db}: drop the path, \
                 or set ?prefix= to keep locks apart"
            ),
        ));
    }
    Ok(())
}

/// Refuses a server list that does not fit `mode`.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `host`: no server, several in single
/// mode, fewer than three in quorum mode, or one named twice (it would
/// count twice towards a majority, or is a seed given twice).
pub(crate) fn check_servers(mode: Mode, servers: &[RedisServer]) -> Result<()> {
    match mode {
        Mode::Single if servers.len() != 1 => Err(Error::config(
            "host",
            format!(
                "mode=single takes one server, and the URL names {}; several independent \
                 servers are for mode=quorum (add ?mode=quorum)",
                servers.len()
            ),
        )),
        Mode::Quorum if servers.len() < MIN_QUORUM_SERVERS => Err(Error::config(
            "host",
            format!(
                "mode=quorum needs at least {MIN_QUORUM_SERVERS} independent servers, and the \
                 URL names {}: list them as redis://h1:p1,h2:p2,h3:p3?mode=quorum",
                servers.len()
            ),
        )),
        Mode::Cluster if servers.is_empty() => Err(Error::config(
            "host",
            "mode=cluster needs at least one node of the cluster: list one or more as \
             redis://h1:p1,h2:p2?mode=cluster",
        )),
        _ => {
            for (at, server) in servers.iter().enumerate() {
                if servers[..at].contains(server) {
                    return Err(Error::config(
                        "host",
                        format!("the server {server} is named twice: name each one once"),
                    ));
                }
            }
            Ok(())
        }
    }
}

/// Refuses a key prefix that is empty or holds a brace.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `prefix`.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(Error::config("prefix", "the key prefix must not be empty"));
    }
    if prefix.contains(['{', '}']) {
        return Err(Error::config(
            "prefix",
            "the key prefix must not hold `{` or `}`: each name's keys carry a hash tag of \
             their own, which a brace in the prefix would replace",
        ));
    }
    Ok(())
}

fn parse_credentials(info: &str) -> Result<(Option<String>, String)> {
    let (user, password) = info.split_once(':').unwrap_or(("", info));
    let decode = |part: &str, field: &str| {
        percent_decode(part).map_err(|bad| {
            Error::config(
                field,
                format!("the URL's user information does not decode: {bad}"),
            )
        })
    };
    let user = decode(user, "user")?;
    let password = decode(password, "password")?;
    if password.is_empty() {
        return Err(Error::config(
            "password",
            "the URL has user information but no password: write redis://[user]:password@host",
        ));
    }
    Ok(((!user.is_empty()).then_some(user), password))
}

fn parse_db(path: &str) -> Result<i64> {
    if path.is_empty() {
        return Ok(0);
    }
    path.parse::<i64>()
        .ok()
        .filter(|db| *db >= 0)
        .ok_or_else(|| {
            Error::config(
                "db",
                format!("`{path}` is not a database number: the path is /0, /1, …"),
            )
        })
}

/// The PEM certificates in `path`, for `?ca=`.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `ca` when the file cannot be read or
/// holds no certificate.
pub(crate) fn read_ca(path: &std::path::Path) -> Result<Vec<u8>> {
    let pem = std::fs::read(path)
        .map_err(|error| Error::config("ca", format!("cannot read {}: {error}", path.display())))?;
    if !pem
        .windows(27)
        .any(|window| window == b"-----BEGIN CERTIFICATE-----")
    {
        return Err(Error::config(
            "ca",
            format!("{} holds no PEM certificate", path.display()),
        ));
    }
    Ok(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let config = RedisConfig::parse("redis://cache").unwrap();
        assert_eq!(
            config.servers,
            [RedisServer {
                host: "cache".into(),
                port: DEFAULT_PORT
            }]
        );
        assert_eq!((config.mode, config.quorum()), (Mode::Single, 1));
        assert_eq!((config.db, config.tls), (0, false));
        assert_eq!(config.prefix, DEFAULT_PREFIX);
        assert_eq!(config.credentials, None);
    }

    #[test]
    fn token_keep_is_a_duration_of_a_minute_or_more() {
        let keep = |url: &str| RedisConfig::parse(url).map(|config| config.token_keep);
        assert_eq!(keep("redis://h").unwrap(), DEFAULT_TOKEN_KEEP);
        assert_eq!(
            keep("redis://h?token_keep=7d").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        assert_eq!(keep("redis://h?token_keep=12h").unwrap().as_secs(), 43_200);
        assert_eq!(keep("redis://h?token_keep=1m").unwrap(), MIN_TOKEN_KEEP);
        assert_eq!(
            keep("redis://a,b,c?mode=quorum&token_keep=600s")
                .unwrap()
                .as_secs(),
            600
        );
        for (bad, says) in [
            ("59s", "1m or more"),
            ("0d", "1m or more"),
            ("7", "not a duration"),
            ("d", "not a duration"),
            ("1.5h", "not a duration"),
            ("7 d", "not a duration"),
            ("-1d", "not a duration"),
            ("99999999999999999999d", "not a duration"),
        ] {
            let error = keep(&format!("redis://h?token_keep={bad}")).unwrap_err();
            assert!(
                matches!(&error, Error::InvalidConfig { field, .. } if field == "token_keep"),
                "{bad}: {error}"
            );
            assert!(error.to_string().contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn fair_mode_is_refused_with_where_to_find_it() {
        match RedisConfig::parse("redis://cache?fair=true") {
            Err(Error::Unsupported(why)) => assert!(why.contains("postgres://"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(RedisConfig::parse("redis://cache?fair=false").is_ok());
    }

    #[test]
    fn every_part() {
        let config = RedisConfig::parse(
            "REDISS://app:s%40cr@t@[::1]:6380/3?prefix=locks%3Aa%2Fb:&mode=single",
        )
        .unwrap();
        assert_eq!(config.servers[0].to_string(), "[::1]:6380");
        assert_eq!((config.db, config.tls), (3, true));
        assert_eq!(config.prefix, "locks:a/b:");
        assert_eq!(
            config.credentials,
            Some((Some("app".to_owned()), "s@cr@t".to_owned()))
        );
        let shown = format!("{config:?}");
        assert!(!shown.contains("cr@t") && !shown.contains("app"), "{shown}");
        let password_only = RedisConfig::parse("redis://:hunter2@h/").unwrap();
        assert_eq!(
            password_only.credentials,
            Some((None, "hunter2".to_owned()))
        );
        assert_eq!(password_only.db, 0);
    }

    #[test]
    fn bad_urls_are_refused_by_name_without_credentials() {
        for (url, field) in [
            ("redis://u:hunter2@h?bogus=1", "bogus"),
            ("redis://u:hunter2@h:0", "port"),
            ("redis://u:hunter2@h:x", "port"),
            ("redis://u:hunter2@h/x", "db"),
            ("redis://u:hunter2@h/-1", "db"),
            ("redis://u:hunter2@", "host"),
            ("redis://h?prefix=", "prefix"),
            ("redis://h?prefix=a{b}", "prefix"),
            ("redis://h?mode=sharded", "mode"),
            ("redis://h?prefix=a&prefix=b", "prefix"),
            ("redis://h?prefix=%zz", "prefix"),
            ("redis://u:hunter2@a:1,b:2", "host"),
            ("redis://u:hunter2@a:1,b:2?mode=quorum", "host"),
            ("redis://a:1,b:2,a:1?mode=quorum", "host"),
            ("redis://a,a:6379,c?mode=quorum", "host"),
            ("redis://h#top", "url"),
            ("http://u:hunter2@h", "url"),
        ] {
            let error = RedisConfig::parse(url).unwrap_err();
            assert!(
                matches!(&error, Error::InvalidConfig { field: f, .. } if f == field),
                "{url}: {error}"
            );
            assert!(!error.to_string().contains("hunter2"), "{error}");
        }
    }

    #[test]
    fn a_plus_in_an_option_is_a_plus() {
        let config = RedisConfig::parse("redis://h?prefix=a+b%2Bc%20d:").unwrap();
        assert_eq!(config.prefix, "a+b+c d:");
    }

    #[test]
    fn quorum_mode_takes_three_or_more_distinct_servers() {
        let config =
            RedisConfig::parse("redis://:pw@a:1,b,[::1]:3,d:4/2?mode=quorum&prefix=q:").unwrap();
        let shown: Vec<String> = config.servers.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["a:1", "b:6379", "[::1]:3", "d:4"]);
        assert_eq!((config.mode, config.quorum()), (Mode::Quorum, 3));
        assert_eq!((config.db, config.prefix.as_str()), (2, "q:"));
        let three = RedisConfig::parse("redis://a,b,c?mode=quorum").unwrap();
        assert_eq!(three.quorum(), 2);
    }

    #[test]
    fn cluster_mode_takes_one_or_more_distinct_seeds() {
        let config = RedisConfig::parse("redis://:pw@a:1,b:2,c:3?mode=cluster").unwrap();
        let shown: Vec<String> = config.servers.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["a:1", "b:2", "c:3"]);
        assert_eq!((config.mode, config.quorum()), (Mode::Cluster, 1));
        let one = RedisConfig::parse("redis://a:7000?mode=cluster").unwrap();
        assert_eq!((one.servers.len(), one.db), (1, 0));
        assert_eq!(
            RedisConfig::parse("redis://a/0?mode=cluster").unwrap().db,
            0
        );
    }

    #[test]
    fn cluster_mode_refuses_what_a_cluster_lacks() {
        for (url, field, says) in [
            ("redis://a,b/3?mode=cluster", "db", "database 0 alone"),
            (
                "redis://a,b?mode=cluster&wait_replicas=1",
                "wait_replicas",
                "mode=single",
            ),
            ("redis://a:1,a:1?mode=cluster", "host", "named twice"),
        ] {
            let error = RedisConfig::parse(url).unwrap_err();
            assert!(
                matches!(&error, Error::InvalidConfig { field: f, .. } if f == field),
                "{url}: {error}"
            );
            assert!(error.to_string().contains(says), "{url}: {error}");
        }
    }
}

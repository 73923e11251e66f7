//! The backend's URL: `redis://[user:password@]host[:port][/db][?prefix=…]`,
//! and `rediss://` for TLS.

use std::fmt;

use distlock_core::urls::{Query, UrlParts, parse_hosts, percent_decode, redact};
use distlock_core::{Error, Result};

/// Redis's port, when the URL names none.
pub const DEFAULT_PORT: u16 = 6379;

/// The key prefix, when the URL names none.
pub const DEFAULT_PREFIX: &str = "distlock:";

/// Where the backend connects, and under which prefix it keeps its keys.
///
/// `Debug` never shows the user or the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// The server's host name or address (an IPv6 address without brackets).
    pub host: String,
    /// The server's port.
    pub port: u16,
    /// Whether to connect with TLS (`rediss://`), checking the server's
    /// certificate against the system's roots.
    pub tls: bool,
    /// The logical database (`/db`, default 0).
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
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("db", &self.db)
            .field("prefix", &self.prefix)
            .field("credentials", &self.credentials.as_ref().map(|_| "***"))
            .finish()
    }
}

impl RedisConfig {
    /// Parses a `redis://` or `rediss://` URL.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the part at fault: another scheme, no
    /// host, a bad port or database, an unknown option, a malformed escape
    /// or a bad prefix; [`Error::Unsupported`] for `mode=cluster` and
    /// `mode=quorum`, which are not there yet. Messages never include the
    /// user or the password.
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
        let prefix = parse_query(parts.query)?;
        let credentials = parts.user_info.map(parse_credentials).transpose()?;
        let db = parse_db(parts.path.strip_prefix('/').unwrap_or(parts.path))?;
        let mut hosts =
            parse_hosts(parts.hosts).map_err(|bad| Error::config(bad.part(), bad.to_string()))?;
        if hosts.len() > 1 {
            return Err(Error::config(
                "host",
                "one server per URL in mode=single; several hosts are for mode=cluster or \
                 mode=quorum, which this version lacks",
            ));
        }
        let host = hosts.remove(0);
        Ok(Self {
            port: host.port.unwrap_or(DEFAULT_PORT),
            host: host.host,
            tls,
            db,
            prefix,
            credentials,
        })
    }

    /// The driver's connection information.
    pub(crate) fn connection_info(&self) -> redis::ConnectionInfo {
        let addr = if self.tls {
            redis::ConnectionAddr::TcpTls {
                host: self.host.clone(),
                port: self.port,
                insecure: false,
                tls_params: None,
            }
        } else {
            redis::ConnectionAddr::Tcp(self.host.clone(), self.port)
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

/// Reads the URL's query, and gives the key prefix it sets. Every option
/// is named here, and anything else is refused by name.
fn parse_query(query: &str) -> Result<String> {
    let mut query = Query::parse(query)?;
    match query.take("mode")?.as_deref() {
        None | Some("single") => {}
        Some(mode @ ("cluster" | "quorum")) => {
            return Err(Error::Unsupported(format!(
                "the redis backend's mode={mode} is not yet supported; this version talks to \
                 one server (mode=single, the default)"
            )));
        }
        Some(other) => {
            return Err(Error::config(
                "mode",
                format!("unknown mode `{other}`; the redis backend has mode=single"),
            ));
        }
    }
    let prefix = query
        .take("prefix")?
        .unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
    check_prefix(&prefix)?;
    query.refuse_rest("a redis URL takes prefix (and mode=single)")?;
    Ok(prefix)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let config = RedisConfig::parse("redis://cache").unwrap();
        assert_eq!((config.host.as_str(), config.port), ("cache", DEFAULT_PORT));
        assert_eq!((config.db, config.tls), (0, false));
        assert_eq!(config.prefix, DEFAULT_PREFIX);
        assert_eq!(config.credentials, None);
    }

    #[test]
    fn every_part() {
        let config = RedisConfig::parse(
            "REDISS://app:s%40cr@t@[::1]:6380/3?prefix=locks%3Aa%2Fb:&mode=single",
        )
        .unwrap();
        assert_eq!((config.host.as_str(), config.port), ("::1", 6380));
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
    fn cluster_and_quorum_modes_are_not_yet_supported() {
        for mode in ["cluster", "quorum"] {
            let error =
                RedisConfig::parse(&format!("redis://a:1,b:2,c:3?mode={mode}")).unwrap_err();
            assert!(
                matches!(&error, Error::Unsupported(why) if why.contains("not yet supported")),
                "{error}"
            );
        }
    }
}

//! The backend's URL: `etcd://[user:password@]host[:port][,host[:port]…][?prefix=…][&fair=true]`,
//! and `etcds://` for TLS, with `?ca=PATH` for a private CA.

use std::fmt;
use std::path::PathBuf;

use distlock_core::backend::{Query, UrlParts, parse_hosts, percent_decode};
use distlock_core::{Error, Result};

/// etcd's client port, when a host names none.
pub const DEFAULT_PORT: u16 = 2379;

/// The key prefix, when the URL names none.
pub const DEFAULT_PREFIX: &str = "distlock/";

/// Where the backend connects, and under which prefix it keeps its keys.
///
/// `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// The members, as `host:port` (IPv6 hosts in brackets).
    pub endpoints: Vec<String>,
    /// Whether to connect with TLS (`etcds://`).
    pub tls: bool,
    /// A PEM file with the CA that signed the members' certificates, for a
    /// private CA (`?ca=PATH`), then trusted alone; Mozilla's roots
    /// (webpki-roots) otherwise.
    pub ca: Option<PathBuf>,
    /// Every key of this backend starts with it (`?prefix=`, default
    /// [`DEFAULT_PREFIX`]).
    pub prefix: String,
    /// Fair mode (`?fair=true`, default off): whole locks go to waiters in
    /// the order they asked, across processes and within one; see the
    /// [crate docs](crate#fair-mode).
    pub fair: bool,
    /// The user and password to authenticate with, from the URL.
    pub(crate) credentials: Option<(String, String)>,
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.tls)
            .field("ca", &self.ca)
            .field("prefix", &self.prefix)
            .field("fair", &self.fair)
            .field("credentials", &self.credentials.as_ref().map(|_| "***"))
            .finish()
    }
}

impl EtcdConfig {
    /// Parses an `etcd://` or `etcds://` URL.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the part at fault: another scheme, no
    /// host, a bad port, a path, an unknown option, a malformed escape, or
    /// `ca` without TLS. Messages never include the password.
    pub fn parse(url: &str) -> Result<Self> {
        let parts = UrlParts::split(url)?;
        let tls = match parts.scheme.to_ascii_lowercase().as_str() {
            "etcd" => false,
            "etcds" => true,
            _ => {
                return Err(Error::config(
                    "url",
                    "an etcd URL starts with etcd:// (or etcds:// for TLS)",
                ));
            }
        };
        if !matches!(parts.path, "" | "/") {
            return Err(Error::config(
                "url",
                "an etcd URL has no path: put the key prefix in ?prefix=",
            ));
        }
        if parts.fragment.is_some() {
            return Err(Error::config("url", "an etcd URL takes no #fragment"));
        }
        let credentials = parts.user_info.map(parse_credentials).transpose()?;
        let endpoints = parse_hosts(parts.hosts)
            .map_err(|bad| Error::config(bad.part(), bad.to_string()))?
            .iter()
            .map(|host| host.address(DEFAULT_PORT))
            .collect();
        let mut query = Query::parse(parts.query)?;
        let prefix = match query.take("prefix")? {
            Some(prefix) if prefix.is_empty() => {
                return Err(Error::config("prefix", "the key prefix must not be empty"));
            }
            Some(prefix) => prefix,
            None => DEFAULT_PREFIX.to_owned(),
        };
        let ca = match query.take("ca")? {
            None => None,
            Some(_) if !tls => {
                return Err(Error::config(
                    "ca",
                    "a CA applies to TLS only: use etcds://",
                ));
            }
            Some(ca) if ca.is_empty() => {
                return Err(Error::config("ca", "give the path of a PEM file"));
            }
            Some(ca) => Some(PathBuf::from(ca)),
        };
        let fair = query.take_flag("fair")?.unwrap_or(false);
        query.refuse_rest("an etcd URL takes prefix and fair (and ca with etcds://)")?;
        Ok(Self {
            endpoints,
            tls,
            ca,
            prefix,
            fair,
            credentials,
        })
    }

    /// This configuration in fair mode, or not (as `?fair=true|false`).
    #[must_use]
    pub fn fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// The endpoints as the client takes them, with their scheme.
    pub(crate) fn endpoint_urls(&self) -> Vec<String> {
        let scheme = if self.tls { "https" } else { "http" };
        self.endpoints
            .iter()
            .map(|endpoint| format!("{scheme}://{endpoint}"))
            .collect()
    }
}

fn parse_credentials(info: &str) -> Result<(String, String)> {
    let (user, password) = info.split_once(':').unwrap_or((info, ""));
    let decode = |part: &str, field: &str| {
        percent_decode(part).map_err(|bad| {
            Error::config(
                field,
                format!("the URL's user information does not decode: {bad}"),
            )
        })
    };
    let user = decode(user, "user")?;
    if user.is_empty() {
        return Err(Error::config("user", "the user name must not be empty"));
    }
    Ok((user, decode(password, "password")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_clusters() {
        let one = EtcdConfig::parse("etcd://db").unwrap();
        assert_eq!(one.endpoints, ["db:2379"]);
        assert_eq!(one.prefix, DEFAULT_PREFIX);
        assert!(!one.tls);
        let three = EtcdConfig::parse("etcd://a:1,b,[::1]:3/?prefix=x%2Fy/").unwrap();
        assert_eq!(three.endpoints, ["a:1", "b:2379", "[::1]:3"]);
        assert_eq!(three.prefix, "x/y/");
        assert_eq!(
            three.endpoint_urls(),
            ["http://a:1", "http://b:2379", "http://[::1]:3"]
        );
    }

    #[test]
    fn options_read_plus_as_a_plus_and_refuse_the_unknown_by_name() {
        let config = EtcdConfig::parse("etcd://db?prefix=a+b%2Bc%20d/").unwrap();
        assert_eq!(config.prefix, "a+b+c d/");
        for (url, field) in [
            ("etcd://db?bogus=1", "bogus"),
            ("etcd://db?prefix=a&prefix=b", "prefix"),
            ("etcd://db?prefix=%zz", "prefix"),
            ("etcd://db?ca=/x.pem", "ca"),
            ("etcd://db,,db2", "host"),
            ("etcd://db:0", "port"),
            ("etcd://::1", "host"),
            ("etcd://db/app", "url"),
        ] {
            match EtcdConfig::parse(url) {
                Err(Error::InvalidConfig { field: got, .. }) => assert_eq!(got, field, "{url}"),
                other => panic!("{url}: {other:?}"),
            }
        }
        assert!(EtcdConfig::parse("ETCDS://db").unwrap().tls);
    }

    #[test]
    fn fair_mode_is_off_unless_asked_for() {
        assert!(!EtcdConfig::parse("etcd://db").unwrap().fair);
        assert!(EtcdConfig::parse("etcd://db?fair=true").unwrap().fair);
        assert!(!EtcdConfig::parse("etcd://db?fair=false").unwrap().fair);
        assert!(EtcdConfig::parse("etcd://db").unwrap().fair(true).fair);
        match EtcdConfig::parse("etcd://db?fair=yes") {
            Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "fair"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn credentials_are_parsed_and_never_shown() {
        let config = EtcdConfig::parse("etcds://root:s%40cr@t@h?ca=/ca.pem").unwrap();
        assert_eq!(
            config.credentials,
            Some(("root".to_owned(), "s@cr@t".to_owned()))
        );
        assert_eq!(config.endpoints, ["h:2379"]);
        assert_eq!(config.ca, Some(PathBuf::from("/ca.pem")));
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("cr@t") && !shown.contains("root"),
            "{shown}"
        );
    }
}

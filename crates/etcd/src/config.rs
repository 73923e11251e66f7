//! The backend's URL: `etcd://[user:password@]host[:port][,host[:port]…][?prefix=…]`,
//! and `etcds://` for TLS, with `?ca=PATH` for a private CA.

use std::fmt;
use std::path::PathBuf;

use distlock_core::urls::percent_decode;
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
    /// private CA (`?ca=PATH`); the system's roots otherwise.
    pub ca: Option<PathBuf>,
    /// Every key of this backend starts with it (`?prefix=`, default
    /// [`DEFAULT_PREFIX`]).
    pub prefix: String,
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
        let (tls, rest) = if let Some(rest) = url.strip_prefix("etcd://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("etcds://") {
            (true, rest)
        } else {
            return Err(Error::config(
                "url",
                "an etcd URL starts with etcd:// (or etcds:// for TLS)",
            ));
        };
        let (before_query, query) = match rest.split_once('?') {
            Some((head, query)) => (head, Some(query)),
            None => (rest, None),
        };
        // The last `@` ends the user information: a password may hold `@`.
        let (credentials, hosts) = match before_query.rsplit_once('@') {
            Some((info, hosts)) => (Some(parse_credentials(info)?), hosts),
            None => (None, before_query),
        };
        let hosts = match hosts.split_once('/') {
            Some((hosts, "")) => hosts,
            Some(_) => {
                return Err(Error::config(
                    "url",
                    "an etcd URL has no path: put the key prefix in ?prefix=",
                ));
            }
            None => hosts,
        };
        let endpoints = hosts
            .split(',')
            .map(parse_host)
            .collect::<Result<Vec<_>>>()?;
        let mut config = Self {
            endpoints,
            tls,
            ca: None,
            prefix: DEFAULT_PREFIX.to_owned(),
            credentials,
        };
        for pair in query.unwrap_or_default().split('&') {
            if pair.is_empty() {
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(&value.replace('+', " ")).ok_or_else(|| {
                Error::config(key, "the value has a malformed %-escape or is not UTF-8")
            })?;
            match key {
                "prefix" => {
                    if value.is_empty() {
                        return Err(Error::config("prefix", "the key prefix must not be empty"));
                    }
                    config.prefix = value;
                }
                "ca" => {
                    if !tls {
                        return Err(Error::config(
                            "ca",
                            "a CA applies to TLS only: use etcds://",
                        ));
                    }
                    if value.is_empty() {
                        return Err(Error::config("ca", "give the path of a PEM file"));
                    }
                    config.ca = Some(PathBuf::from(value));
                }
                other => {
                    return Err(Error::config(
                        other,
                        "unknown option; an etcd URL takes prefix (and ca with etcds://)",
                    ));
                }
            }
        }
        Ok(config)
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
        percent_decode(part)
            .ok_or_else(|| Error::config(field, "malformed %-escape in the URL's user information"))
    };
    let user = decode(user, "user")?;
    if user.is_empty() {
        return Err(Error::config("user", "the user name must not be empty"));
    }
    Ok((user, decode(password, "password")?))
}

fn parse_host(host: &str) -> Result<String> {
    if host.is_empty() {
        return Err(Error::config(
            "host",
            "an empty host: list members as host[:port],host[:port]",
        ));
    }
    // `[v6]` or `[v6]:port`; otherwise at most one `:`.
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest
            .split_once(']')
            .ok_or_else(|| Error::config("host", format!("unclosed `[` in {host:?}")))?;
        match after {
            "" => (format!("[{name}]"), None),
            _ => match after.strip_prefix(':') {
                Some(port) => (format!("[{name}]"), Some(port)),
                None => return Err(Error::config("host", format!("bad host {host:?}"))),
            },
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        }
    };
    if name.is_empty() || name == "[]" {
        return Err(Error::config("host", format!("no host name in {host:?}")));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| Error::config("port", format!("{port:?} is not a port (1 to 65535)")))?,
    };
    Ok(format!("{name}:{port}"))
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

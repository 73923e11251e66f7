//! The backend's configuration, built once and validated, or parsed from a
//! `memcache://` URL.

use std::collections::HashSet;
use std::time::Duration;

use distlock_core::backend::{HostPort, Query, UrlParts, parse_hosts};
use distlock_core::{Error, Result};

use crate::keys::{DEFAULT_PREFIX, check_prefix};

/// memcached's default port.
pub const DEFAULT_PORT: u16 = 11211;

/// The longest `timeout` accepted.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// How locks are spread over the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// Each lock lives on one server, chosen by consistent hashing of its
    /// name (`?mode=sharded`, the default). Losing that server loses its
    /// locks; they are never moved to another server while clients may
    /// still hold them.
    #[default]
    Sharded,
    /// Each lock is taken on every server and held while a majority grants
    /// it (`?mode=quorum`, at least 3 servers). It survives the loss of a
    /// minority of servers.
    Quorum,
}

impl Mode {
    fn parse(text: &str) -> Result<Self> {
        match text {
            "sharded" => Ok(Self::Sharded),
            "quorum" => Ok(Self::Quorum),
            other => Err(Error::config(
                "mode",
                format!("unknown mode `{other}`; use `sharded` (the default) or `quorum`"),
            )),
        }
    }
}

/// Where the servers are and how to use them.
///
/// ```
/// use std::time::Duration;
/// use distlock_memcached::{MemcachedConfig, Mode};
///
/// let config = MemcachedConfig::parse(
///     "memcache://10.0.0.1:11211,10.0.0.2,10.0.0.3:11300?mode=quorum&prefix=app:&timeout=500ms",
/// )?;
/// assert_eq!(config.servers(), ["10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11300"]);
/// assert_eq!(config.mode(), Mode::Quorum);
/// assert_eq!(config.prefix(), "app:");
/// assert_eq!(config.timeout(), Duration::from_millis(500));
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemcachedConfig {
    servers: Vec<String>,
    prefix: String,
    mode: Mode,
    timeout: Duration,
    connections: usize,
}

impl MemcachedConfig {
    /// The default time one call (connecting, or one round trip) may take.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
    /// The default number of connections per server.
    pub const DEFAULT_CONNECTIONS: usize = 2;

    /// A builder for the given servers (`host:port`, `host` for port 11211,
    /// `[v6addr]:port`).
    pub fn builder<S: Into<String>>(
        servers: impl IntoIterator<Item = S>,
    ) -> MemcachedConfigBuilder {
        MemcachedConfigBuilder {
            servers: servers.into_iter().map(Into::into).collect(),
            prefix: None,
            mode: None,
            timeout: None,
            connections: None,
        }
    }

    /// Parses `memcache://host:port[,host:port…][/][?prefix=…&mode=sharded|quorum&timeout=…&connections=…]`
    /// (`memcached://` works too).
    ///
    /// - `prefix`: the start of every key, percent-decoded (default `lock:`);
    /// - `mode`: `sharded` (default) or `quorum`;
    /// - `timeout`: the longest one call may take, as `500ms` or `2s` (default 1 s, at most 1 h);
    /// - `connections`: pipelined connections per server (default 2).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the part at fault.
    pub fn parse(url: &str) -> Result<Self> {
        let parts = UrlParts::split(url)?;
        if !matches!(
            parts.scheme.to_ascii_lowercase().as_str(),
            "memcache" | "memcached"
        ) {
            return Err(Error::config(
                "backend URL",
                format!("the scheme `{}` is not memcache://", parts.scheme),
            ));
        }
        if parts.fragment.is_some_and(|fragment| !fragment.is_empty()) {
            return Err(Error::config(
                "backend URL",
                "a memcached URL takes no #fragment",
            ));
        }
        if !matches!(parts.path, "" | "/") {
            return Err(Error::config(
                "backend URL",
                "a memcached URL takes no path; put options in the query, like ?prefix=app:",
            ));
        }
        if parts.user_info.is_some() {
            // Never echo the user information: it may hold a password.
            return Err(Error::config(
                "backend URL",
                "memcached's text protocol has no authentication; remove the user and password",
            ));
        }
        let servers = if parts.hosts.is_empty() {
            Vec::new()
        } else {
            parse_hosts(parts.hosts).map_err(|bad| Error::config("servers", bad.to_string()))?
        };
        let mut builder = Self::builder(servers.iter().map(ToString::to_string));
        let mut query = Query::parse(parts.query)?;
        if let Some(prefix) = query.take("prefix")? {
            builder = builder.prefix(prefix);
        }
        if let Some(mode) = query.take("mode")? {
            builder = builder.mode(Mode::parse(&mode)?);
        }
        if let Some(timeout) = query.take("timeout")? {
            builder = builder.timeout(parse_duration(&timeout)?);
        }
        if let Some(connections) = query.take("connections")? {
            builder = builder.connections(connections.parse().map_err(|_| {
                Error::config("connections", format!("`{connections}` is not a number"))
            })?);
        }
        if query.take_flag("fair")? == Some(true) {
            return Err(Error::Unsupported(
                "fair=true: memcached keeps no queue of waiters, so it has no fair mode; use a \
                 mongodb://, postgres:// or etcd:// URL with fair=true"
                    .to_owned(),
            ));
        }
        query.refuse_rest("memcache:// takes prefix, mode, timeout and connections")?;
        builder.build()
    }

    /// The former name of [`parse`](Self::parse).
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    #[deprecated(note = "renamed `MemcachedConfig::parse`, as every backend's URL parser is")]
    pub fn from_url(url: &str) -> Result<Self> {
        Self::parse(url)
    }

    /// The servers, as `host:port`, in the order given.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    /// The start of every key.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How locks are spread over the servers.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The longest one call (connecting, or one round trip) may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Pipelined connections per server.
    pub fn connections(&self) -> usize {
        self.connections
    }

    /// How many servers must grant a lock: one in sharded mode, a majority
    /// in quorum mode.
    pub fn quorum(&self) -> usize {
        match self.mode {
            Mode::Sharded => 1,
            Mode::Quorum => self.servers.len() / 2 + 1,
        }
    }
}

/// Builds a [`MemcachedConfig`]; see there for the options.
#[derive(Debug, Clone)]
pub struct MemcachedConfigBuilder {
    servers: Vec<String>,
    prefix: Option<String>,
    mode: Option<Mode>,
    timeout: Option<Duration>,
    connections: Option<usize>,
}

impl MemcachedConfigBuilder {
    /// The key prefix (default `lock:`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The mode (default [`Mode::Sharded`]).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// The longest one call may take (default 1 s, at most 1 h).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Pipelined connections per server (default 2).
    pub fn connections(mut self, connections: usize) -> Self {
        self.connections = Some(connections);
        self
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first field at fault.
    pub fn build(self) -> Result<MemcachedConfig> {
        if self.servers.is_empty() {
            return Err(Error::config(
                "servers",
                "no server given; write memcache://host:port[,host:port…]",
            ));
        }
        let mut servers = Vec::with_capacity(self.servers.len());
        let mut seen = HashSet::new();
        for server in &self.servers {
            let server = normalize_server(server)?;
            if !seen.insert(server.clone()) {
                return Err(Error::config(
                    "servers",
                    format!("{server} is listed twice; list each server once"),
                ));
            }
            servers.push(server);
        }
        let mode = self.mode.unwrap_or_default();
        if mode == Mode::Quorum && servers.len() < 3 {
            return Err(Error::config(
                "mode",
                format!(
                    "quorum mode needs at least 3 independent servers, and {} {} given; \
                     with fewer, losing one server would lose the lock",
                    servers.len(),
                    if servers.len() == 1 { "was" } else { "were" }
                ),
            ));
        }
        let prefix = self.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        check_prefix(&prefix)?;
        let timeout = self.timeout.unwrap_or(MemcachedConfig::DEFAULT_TIMEOUT);
        if timeout < Duration::from_millis(1) {
            return Err(Error::config(
                "timeout",
                format!("{timeout:?} is too short; use at least 1ms"),
            ));
        }
        // Bounded so that deadlines computed from it cannot overflow, and
        // because a call to a server that is not answering should fail well
        // before any lease could run out.
        if timeout > MAX_TIMEOUT {
            return Err(Error::config(
                "timeout",
                format!("{timeout:?} is too long; use at most {MAX_TIMEOUT:?}"),
            ));
        }
        let connections = self
            .connections
            .unwrap_or(MemcachedConfig::DEFAULT_CONNECTIONS);
        if !(1..=64).contains(&connections) {
            return Err(Error::config(
                "connections",
                format!("{connections} connections per server; use 1 to 64"),
            ));
        }
        Ok(MemcachedConfig {
            servers,
            prefix,
            mode,
            timeout,
            connections,
        })
    }
}

/// `host[:port]` or `[v6]:port` as `host:port`, with the default port.
fn normalize_server(server: &str) -> Result<String> {
    HostPort::parse(server)
        .map(|host| host.address(DEFAULT_PORT))
        .map_err(|bad| Error::config("servers", bad.to_string()))
}

/// `500ms`, `2s` or `1m`.
fn parse_duration(text: &str) -> Result<Duration> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| {
        Error::config(
            "timeout",
            format!("`{text}` is not a duration like 500ms or 2s"),
        )
    })?;
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "s" => Ok(Duration::from_secs(number)),
        "m" => Ok(Duration::from_secs(number.saturating_mul(60))),
        _ => Err(Error::config(
            "timeout",
            format!("`{text}` is not a duration like 500ms or 2s"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(result: Result<MemcachedConfig>) -> String {
        match result {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn parses_the_documented_forms() {
        let config = MemcachedConfig::parse("memcache://127.0.0.1:11311").unwrap();
        assert_eq!(config.servers(), ["127.0.0.1:11311"]);
        assert_eq!(config.prefix(), "lock:");
        assert_eq!(config.mode(), Mode::Sharded);
        assert_eq!(config.quorum(), 1);
        assert_eq!(config.timeout(), Duration::from_secs(1));
        assert_eq!(config.connections(), 2);

        let config = MemcachedConfig::parse(
            "MEMCACHED://a,b:2,[::1]:3,[::1]/?mode=quorum&prefix=my%20app%3A&connections=4&timeout=2s",
        );
        // A space in the prefix is refused.
        assert_eq!(field_of(config), "prefix");
        let config = MemcachedConfig::parse(
            "memcached://a,b:2,[::1]:3,[::1]/?mode=quorum&prefix=my-app%3A&connections=4&timeout=2s",
        )
        .unwrap();
        assert_eq!(
            config.servers(),
            ["a:11211", "b:2", "[::1]:3", "[::1]:11211"]
        );
        assert_eq!(config.prefix(), "my-app:");
        assert_eq!(config.mode(), Mode::Quorum);
        assert_eq!(config.quorum(), 3);
        assert_eq!(config.connections(), 4);
        assert_eq!(config.timeout(), Duration::from_secs(2));
        let empty_prefix = MemcachedConfig::parse("memcache://h?prefix=").unwrap();
        assert_eq!(empty_prefix.prefix(), "");
    }

    #[test]
    fn fair_mode_is_refused_with_where_to_find_it() {
        match MemcachedConfig::parse("memcache://h?fair=true") {
            Err(Error::Unsupported(why)) => assert!(why.contains("postgres://"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(MemcachedConfig::parse("memcache://h?fair=false").is_ok());
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("memcache://", "servers"),
            ("memcache://a:1,a:1", "servers"),
            ("memcache://a:0", "servers"),
            ("memcache://a:x", "servers"),
            ("memcache://a b:1", "servers"),
            ("memcache://a,b?mode=quorum", "mode"),
            ("memcache://a?mode=ring", "mode"),
            ("memcache://a?timeout=5", "timeout"),
            ("memcache://a?timeout=0ms", "timeout"),
            ("memcache://a?timeout=61m", "timeout"),
            ("memcache://a?timeout=18446744073709551615s", "timeout"),
            ("memcache://a?connections=0", "connections"),
            ("memcache://a?prefix=%zz", "prefix"),
            ("memcache://a?prefix=a&prefix=b", "prefix"),
            ("memcache://a?colour=blue", "colour"),
            ("memcache://a?prefix", "prefix"),
            ("memcache://a,,b", "servers"),
            ("memcache://::1", "servers"),
            ("memcache://a/path", "backend URL"),
            ("redis://a", "backend URL"),
        ];
        for (url, field) in cases {
            assert_eq!(field_of(MemcachedConfig::parse(url)), field, "{url}");
        }
    }

    #[test]
    fn a_plus_in_an_option_is_a_plus() {
        let config = MemcachedConfig::parse("memcache://h?prefix=a+b%2Bc:").unwrap();
        assert_eq!(config.prefix(), "a+b+c:");
    }

    #[test]
    fn credentials_are_refused_without_being_echoed() {
        let error = MemcachedConfig::parse("memcache://admin:hunter2@h:1")
            .unwrap_err()
            .to_string();
        assert!(!error.contains("hunter2"), "{error}");
        assert!(error.contains("authentication"), "{error}");
    }

    #[test]
    fn quorum_needs_three_servers() {
        let error = MemcachedConfig::builder(["a:1", "b:1"])
            .mode(Mode::Quorum)
            .build()
            .unwrap_err()
            .to_string();
        assert!(error.contains("at least 3"), "{error}");
        let config = MemcachedConfig::builder(["a:1", "b:1", "c:1", "d:1"])
            .mode(Mode::Quorum)
            .build()
            .unwrap();
        assert_eq!(config.quorum(), 3);
    }
}

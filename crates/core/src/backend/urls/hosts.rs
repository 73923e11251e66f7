//! Host lists: `host[:port][,host[:port]…]`, with IPv6 addresses in
//! brackets, as etcd members, memcached servers and Redis nodes are
//! written.

use std::fmt;
use std::net::Ipv6Addr;

/// One host of a host list, and its port when one is written.
///
/// Its `Display` form is the host as it is written in a URL: an IPv6
/// address in brackets, then `:port` when there is a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// A host name, an IPv4 address, or an IPv6 address (without its
    /// brackets).
    pub host: String,
    /// The port, when the host names one.
    pub port: Option<u16>,
}

impl HostPort {
    /// Parses one host: `name`, `name:port`, `192.0.2.1:port`, `[::1]` or
    /// `[::1]:port`.
    ///
    /// ```
    /// use distlock_core::backend::HostPort;
    ///
    /// let host = HostPort::parse("[::1]:2379")?;
    /// assert_eq!((host.host.as_str(), host.port), ("::1", Some(2379)));
    /// assert_eq!(host.to_string(), "[::1]:2379");
    /// assert_eq!(HostPort::parse("db")?.address(11211), "db:11211");
    /// # Ok::<(), distlock_core::backend::BadHost>(())
    /// ```
    ///
    /// # Errors
    /// [`BadHost`] for an empty host, a name with characters a host name
    /// cannot have, an IPv6 address without brackets or a malformed one,
    /// and a port that is not a number from 1 to 65535.
    pub fn parse(text: &str) -> Result<Self, BadHost> {
        let bad = |reason| BadHost {
            host: text.to_owned(),
            reason,
        };
        let (host, port) = match text.strip_prefix('[') {
            Some(bracketed) => {
                let (address, after) = bracketed
                    .split_once(']')
                    .ok_or_else(|| bad(Reason::UnclosedBracket))?;
                let port = match after {
                    "" => None,
                    _ => Some(
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| bad(Reason::AfterBracket))?,
                    ),
                };
                address
                    .parse::<Ipv6Addr>()
                    .map_err(|_| bad(Reason::NotIpv6))?;
                (address, port)
            }
            None => {
                let (name, port) = match text.split_once(':') {
                    Some((name, port)) => (name, Some(port)),
                    None => (text, None),
                };
                if port.is_some_and(|port| port.contains(':')) {
                    return Err(bad(Reason::UnbracketedIpv6));
                }
                (name, port)
            }
        };
        if host.is_empty() {
            return Err(bad(Reason::Empty));
        }
        if !text.starts_with('[') && !host.bytes().all(is_name_byte) {
            return Err(bad(Reason::NotAName));
        }
        let port = match port {
            None => None,
            Some(port) => Some(
                port.parse::<u16>()
                    .ok()
                    .filter(|&port| port != 0)
                    .ok_or_else(|| bad(Reason::BadPort))?,
            ),
        };
        Ok(Self {
            host: host.to_owned(),
            port,
        })
    }

    /// `host:port`, with `default_port` when the host names none, and an
    /// IPv6 address in brackets: the form socket addresses and most
    /// clients take.
    pub fn address(&self, default_port: u16) -> String {
        let port = self.port.unwrap_or(default_port);
        if self.host.contains(':') {
            format!("[{}]:{port}", self.host)
        } else {
            format!("{}:{port}", self.host)
        }
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// Parses a host list, `host[:port][,host[:port]…]`, in the order written;
/// see [`HostPort::parse`] for each host. Repeated hosts are kept: whether
/// they are allowed is the backend's call.
///
/// ```
/// use distlock_core::backend::parse_hosts;
///
/// let hosts = parse_hosts("m1:2379,m2,[2001:db8::7]:2380")?;
/// let addresses: Vec<String> = hosts.iter().map(|host| host.address(2379)).collect();
/// assert_eq!(addresses, ["m1:2379", "m2:2379", "[2001:db8::7]:2380"]);
/// assert!(parse_hosts("m1,,m2").is_err());
/// # Ok::<(), distlock_core::backend::BadHost>(())
/// ```
///
/// # Errors
/// [`BadHost`] naming the first host at fault; an empty list, or an empty
/// entry in it (`a,,b`, a trailing comma), is an empty host.
pub fn parse_hosts(list: &str) -> Result<Vec<HostPort>, BadHost> {
    list.split(',').map(HostPort::parse).collect()
}

/// A host that does not parse, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadHost {
    host: String,
    reason: Reason,
}

impl BadHost {
    /// The host as written.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The part at fault, `port` or `host`, for naming it in an error.
    pub fn part(&self) -> &'static str {
        match self.reason {
            Reason::BadPort => "port",
            _ => "host",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Empty,
    UnclosedBracket,
    AfterBracket,
    NotIpv6,
    UnbracketedIpv6,
    NotAName,
    BadPort,
}

impl fmt::Display for BadHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reason = match self.reason {
            Reason::Empty => {
                "an empty host: list hosts as host[:port],host[:port] with nothing between commas"
            }
            Reason::UnclosedBracket => "an IPv6 address needs a closing `]`",
            Reason::AfterBracket => "expected `:port` after the `]`",
            Reason::NotIpv6 => "not an IPv6 address between the brackets",
            Reason::UnbracketedIpv6 => "an IPv6 address goes in brackets, as [::1]:port",
            Reason::NotAName => {
                "a host name has only ASCII letters, digits, `.`, `-` and `_` \
                 (write an international name in its xn-- form)"
            }
            Reason::BadPort => "the port must be a number from 1 to 65535",
        };
        write!(f, "`{}`: {reason}", self.host)
    }
}

impl std::error::Error for BadHost {}

fn is_name_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-' | b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> (String, Option<u16>) {
        let host = HostPort::parse(text).unwrap();
        (host.host, host.port)
    }

    #[test]
    fn names_addresses_and_ports() {
        assert_eq!(one("db"), ("db".to_owned(), None));
        assert_eq!(
            one("db.example-1_a:6379"),
            ("db.example-1_a".to_owned(), Some(6379))
        );
        assert_eq!(one("10.0.0.1:1"), ("10.0.0.1".to_owned(), Some(1)));
        assert_eq!(one("[::1]"), ("::1".to_owned(), None));
        assert_eq!(
            one("[2001:db8::1]:65535"),
            ("2001:db8::1".to_owned(), Some(65535))
        );
        assert_eq!(HostPort::parse("[::1]").unwrap().to_string(), "[::1]");
        assert_eq!(HostPort::parse("h:7").unwrap().to_string(), "h:7");
        assert_eq!(
            HostPort::parse("[::1]").unwrap().address(2379),
            "[::1]:2379"
        );
    }

    #[test]
    fn bad_hosts_are_named_with_the_reason() {
        for (text, reason) in [
            ("", Reason::Empty),
            (":80", Reason::Empty),
            ("h:", Reason::BadPort),
            ("h:0", Reason::BadPort),
            ("h:65536", Reason::BadPort),
            ("h:-1", Reason::BadPort),
            ("h:x", Reason::BadPort),
            ("[::1", Reason::UnclosedBracket),
            ("[::1]x", Reason::AfterBracket),
            ("[::1]:0", Reason::BadPort),
            ("[]", Reason::NotIpv6),
            ("[db]:1", Reason::NotIpv6),
            ("::1", Reason::UnbracketedIpv6),
            ("fe80::1:80", Reason::UnbracketedIpv6),
            ("a b", Reason::NotAName),
            ("bücher.example", Reason::NotAName),
            ("u@h", Reason::NotAName),
        ] {
            let error = HostPort::parse(text).unwrap_err();
            assert_eq!(error.reason, reason, "{text}");
            assert_eq!(error.host(), text);
            let part = if reason == Reason::BadPort {
                "port"
            } else {
                "host"
            };
            assert_eq!(error.part(), part, "{text}");
            assert!(
                error.to_string().starts_with(&format!("`{text}`: ")),
                "{error}"
            );
        }
    }

    #[test]
    fn lists_keep_their_order_and_refuse_empty_entries() {
        let hosts = parse_hosts("a:1,[::1]:3,b").unwrap();
        let shown: Vec<String> = hosts.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["a:1", "[::1]:3", "b"]);
        assert_eq!(parse_hosts("a,a").unwrap().len(), 2);
        for list in ["", ",", "a,", ",a", "a,,b"] {
            assert_eq!(
                parse_hosts(list).unwrap_err().reason,
                Reason::Empty,
                "{list}"
            );
        }
        assert_eq!(parse_hosts("a,b:0").unwrap_err().host(), "b:0");
    }
}

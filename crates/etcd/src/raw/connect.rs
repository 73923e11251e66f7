//! Where and how the client connects: the members, TLS, credentials and
//! HTTP/2 keep-alive, made into one channel balanced over the members.

use std::fmt;
use std::time::Duration;

use tonic::transport::channel::Change;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use super::Error;

/// How to reach one etcd cluster.
///
/// `Debug` never shows the password.
#[derive(Clone, Default)]
pub struct ConnectOptions {
    endpoints: Vec<String>,
    tls: Option<Tls>,
    pub(super) credentials: Option<(String, String)>,
    connect_timeout: Option<Duration>,
    keep_alive: Option<(Duration, Duration)>,
}

/// TLS for `https://` members: a private CA's PEM, or Mozilla's roots
/// (webpki-roots) when there is none.
#[derive(Clone)]
struct Tls {
    ca_pem: Option<Vec<u8>>,
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.tls.is_some())
            .field("user", &self.credentials.as_ref().map(|_| "***"))
            .field("connect_timeout", &self.connect_timeout)
            .field("keep_alive", &self.keep_alive)
            .finish()
    }
}

impl ConnectOptions {
    /// The members, as URLs: `http://host:port`, or `https://host:port`
    /// with [`with_tls`](Self::with_tls). Calls are spread over them, and
    /// go on to the others while one is down.
    pub fn new<E: Into<String>>(endpoints: impl IntoIterator<Item = E>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Connects with TLS, trusting the CA in `ca_pem` alone, or Mozilla's
    /// roots when `None`.
    #[must_use]
    pub fn with_tls(mut self, ca_pem: Option<Vec<u8>>) -> Self {
        self.tls = Some(Tls { ca_pem });
        self
    }

    /// Authenticates as `user` when connecting, and again whenever etcd
    /// refuses the token.
    #[must_use]
    pub fn with_credentials(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// How long making a connection to a member may take.
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Sends an HTTP/2 ping every `interval`, idle or not, and drops a
    /// connection whose ping is not answered within `timeout`, so that a
    /// member that went silent is noticed without waiting for a call.
    #[must_use]
    pub fn with_keep_alive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keep_alive = Some((interval, timeout));
        self
    }

    /// One channel over every member. It connects lazily: nothing is sent
    /// until the first call.
    pub(super) fn channel(&self) -> Result<Channel, Error> {
        if self.endpoints.is_empty() {
            return Err(Error::Setup {
                message: "no etcd endpoint given: name at least one member".into(),
                source: None,
            });
        }
        // `Channel::balance_list` panics past 1,024 endpoints: the list is
        // sent through a queue of its own length instead.
        let (channel, members) = Channel::balance_channel(self.endpoints.len());
        for url in &self.endpoints {
            let endpoint = self.endpoint(url)?;
            let change = Change::Insert(endpoint.uri().clone(), endpoint);
            members.try_send(change).map_err(|error| {
                Error::setup(format!("the etcd endpoint {url} could not be added"), error)
            })?;
        }
        Ok(channel)
    }

    fn endpoint(&self, url: &str) -> Result<Endpoint, Error> {
        let mut endpoint = Endpoint::from_shared(url.to_owned()).map_err(|error| {
            Error::setup(
                format!("the etcd endpoint {url:?} is not a URL such as http://host:2379"),
                error,
            )
        })?;
        if let Some(tls) = &self.tls {
            let config = match &tls.ca_pem {
                Some(pem) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
                None => ClientTlsConfig::new().with_webpki_roots(),
            };
            endpoint = endpoint.tls_config(config).map_err(|error| {
                Error::setup(format!("TLS settings for {url} were refused"), error)
            })?;
        }
        if let Some((interval, timeout)) = self.keep_alive {
            endpoint = endpoint
                .keep_alive_while_idle(true)
                .http2_keep_alive_interval(interval)
                .keep_alive_timeout(timeout);
        }
        if let Some(timeout) = self.connect_timeout {
            endpoint = endpoint.connect_timeout(timeout);
        }
        Ok(endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_endpoints_say_what_is_wrong() {
        let none = ConnectOptions::new(Vec::<String>::new()).channel();
        assert!(
            matches!(&none, Err(Error::Setup { message, .. }) if message.contains("no etcd endpoint")),
            "{none:?}"
        );
        let bad = ConnectOptions::new(["http://bad host:1"]).channel();
        assert!(
            matches!(&bad, Err(Error::Setup { message, .. }) if message.contains("\"http://bad host:1\"")),
            "{bad:?}"
        );
    }

    #[test]
    fn the_password_is_never_shown() {
        let options = ConnectOptions::new(["http://h:2379"]).with_credentials("alice", "s3cret");
        let shown = format!("{options:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("alice"),
            "{shown}"
        );
    }
}

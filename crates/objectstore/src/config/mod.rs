//! The backend's configuration: which cloud, which bucket and prefix, and
//! how to reach the store, read from a URL or set in code; the client it
//! builds is in [`client`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use object_store::client::{HttpClient, HttpConnector};

use distlock_core::backend::{Query, UrlParts, percent_decode, redact};
use distlock_core::{Error, Result};

use crate::keys::KeySpace;

mod client;

/// The longest `timeout` accepted.
const MAX_TIMEOUT: Duration = Duration::from_secs(3_600);

/// The cloud whose client a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cloud {
    /// Amazon S3 and S3-compatible stores: `s3://bucket/prefix`.
    S3,
    /// Google Cloud Storage: `gs://bucket/prefix`.
    Gcs,
    /// Azure Blob Storage: `az://container/prefix`.
    Azure,
}

impl Cloud {
    /// The URL scheme of this cloud.
    pub fn scheme(self) -> &'static str {
        match self {
            Self::S3 => "s3",
            Self::Gcs => "gs",
            Self::Azure => "az",
        }
    }

    /// The feature of `distlock-objectstore` that builds this cloud's
    /// client.
    fn feature(self) -> &'static str {
        match self {
            Self::S3 => "s3",
            Self::Gcs => "gcs",
            Self::Azure => "azure",
        }
    }

    fn from_scheme(scheme: &str) -> Option<Self> {
        match scheme.to_ascii_lowercase().as_str() {
            "s3" => Some(Self::S3),
            "gs" => Some(Self::Gcs),
            "az" => Some(Self::Azure),
            _ => None,
        }
    }
}

/// Where the locks are kept, and how the store is reached.
///
/// Credentials are never part of it: each cloud's client reads them from
/// its usual environment (`AWS_ACCESS_KEY_ID` and the rest,
/// `GOOGLE_APPLICATION_CREDENTIALS`, `AZURE_STORAGE_ACCOUNT_KEY`, …), as
/// `object_store` documents. Its `Debug` shows nothing secret.
#[derive(Clone)]
pub struct ObjectStoreConfig {
    cloud: Cloud,
    bucket: String,
    prefix: String,
    endpoint: Option<String>,
    region: Option<String>,
    account: Option<String>,
    check: bool,
    timeout: Duration,
    connector: Option<SharedConnector>,
}

/// A connector the caller gave, shared by the configuration's copies.
#[derive(Debug, Clone)]
struct SharedConnector(Arc<dyn HttpConnector>);

impl HttpConnector for SharedConnector {
    fn connect(&self, options: &object_store::ClientOptions) -> object_store::Result<HttpClient> {
        self.0.connect(options)
    }
}

impl fmt::Debug for ObjectStoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreConfig")
            .field("cloud", &self.cloud)
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("account", &self.account)
            .field("check", &self.check)
            .field("timeout", &self.timeout)
            .field("http_connector", &self.connector.as_ref().map(|_| "set"))
            .finish()
    }
}

impl ObjectStoreConfig {
    /// How long one request to the store may take by default, retries
    /// included.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// The locks of `bucket` (a container, on Azure) of `cloud`, at its
    /// root, with the defaults.
    pub fn new(cloud: Cloud, bucket: impl Into<String>) -> Self {
        Self {
            cloud,
            bucket: bucket.into(),
            prefix: String::new(),
            endpoint: None,
            region: None,
            account: None,
            check: true,
            timeout: Self::DEFAULT_TIMEOUT,
            connector: None,
        }
    }

    /// Parses `s3://bucket[/prefix][?options]`, `gs://bucket[/prefix]…`
    /// or `az://container[/prefix]…`. The options:
    /// - `endpoint`: the store's URL, for an S3-compatible store or an
    ///   Azure emulator (`http://127.0.0.1:9000`); `http://` allows plain
    ///   HTTP;
    /// - `region`: S3's region (otherwise the environment's, or `us-east-1`);
    /// - `account`: Azure's storage account (otherwise the environment's);
    /// - `timeout`: how long one request may take, retries included, as
    ///   `500ms` or `5s` (default 5 s, at most 1 h);
    /// - `check`: `false` to open without probing that the store honours
    ///   its preconditions (see the crate's documentation).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the part at fault: an unknown scheme
    /// or option, a missing bucket, a user or password in the URL (the
    /// message never shows them), a malformed prefix, endpoint or timeout.
    pub fn parse(url: &str) -> Result<Self> {
        let parts = UrlParts::split(url)?;
        let cloud = Cloud::from_scheme(parts.scheme).ok_or_else(|| {
            Error::config(
                "backend URL",
                format!(
                    "`{}` is not an object-storage URL; use s3://, gs:// or az://",
                    redact(url)
                ),
            )
        })?;
        if parts.user_info.is_some() {
            return Err(Error::config(
                "backend URL",
                "an object-storage URL takes no user or password: the cloud's client reads \
                 credentials from its environment (AWS_ACCESS_KEY_ID, \
                 AZURE_STORAGE_ACCOUNT_KEY, GOOGLE_APPLICATION_CREDENTIALS, …)",
            ));
        }
        if parts.hosts.is_empty() || parts.hosts.contains([':', ',', '[']) {
            return Err(Error::config(
                "bucket",
                format!(
                    "write the bucket as the URL's host, without a port: {}://bucket/prefix",
                    cloud.scheme()
                ),
            ));
        }
        if parts.fragment.is_some() {
            return Err(Error::config(
                "backend URL",
                "an object-storage URL takes no fragment",
            ));
        }
        let prefix = percent_decode(parts.path)
            .map_err(|error| Error::config("prefix", error.to_string()))?;
        let mut config = Self::new(cloud, parts.hosts).prefix(prefix);
        let mut query = Query::parse(parts.query)?;
        if let Some(endpoint) = query.take("endpoint")? {
            config = config.endpoint(endpoint);
        }
        if let Some(region) = query.take("region")? {
            config = config.region(region);
        }
        if let Some(account) = query.take("account")? {
            config = config.account(account);
        }
        if let Some(timeout) = query.take("timeout")? {
            let timeout = humantime::parse_duration(&timeout).map_err(|_| {
                Error::config(
                    "timeout",
                    format!("`{timeout}` is not a duration like 500ms or 5s"),
                )
            })?;
            config = config.timeout(timeout);
        }
        if let Some(check) = query.take_flag("check")? {
            config = config.check(check);
        }
        if query.take_flag("fair")? == Some(true) {
            return Err(Error::Unsupported(
                "fair=true: an object store keeps no queue of waiters, so this backend has no \
                 fair mode; use a mongodb://, postgres:// or etcd:// URL with fair=true"
                    .to_owned(),
            ));
        }
        query.refuse_rest(&format!(
            "{}:// takes endpoint, region, account, timeout and check",
            cloud.scheme()
        ))?;
        config.validate()?;
        Ok(config)
    }

    /// Keeps the locks under `prefix`, a path in the bucket such as
    /// `team/locks`.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Reaches the store at `endpoint`, for S3-compatible stores and
    /// emulators.
    #[must_use]
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// S3's region.
    #[must_use]
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Azure's storage account.
    #[must_use]
    pub fn account(mut self, account: impl Into<String>) -> Self {
        self.account = Some(account.into());
        self
    }

    /// How long one request may take, retries included.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether opening probes the store's preconditions (the default), and
    /// refuses a store that ignores them.
    #[must_use]
    pub fn check(mut self, check: bool) -> Self {
        self.check = check;
        self
    }

    /// Sends the client's HTTP requests through `connector` instead of
    /// `object_store`'s own: for a proxy, a TLS setting of your own, or
    /// requests a test counts, delays or fails.
    #[must_use]
    pub fn http_connector(mut self, connector: impl HttpConnector) -> Self {
        self.connector = Some(SharedConnector(Arc::new(connector)));
        self
    }

    /// The cloud.
    pub fn cloud(&self) -> Cloud {
        self.cloud
    }

    /// The bucket, or Azure's container.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The prefix, as given.
    pub(crate) fn prefix_str(&self) -> &str {
        &self.prefix
    }

    /// Whether opening probes the store.
    pub fn checks(&self) -> bool {
        self.check
    }

    /// The store, as errors name it: `s3://bucket/prefix`.
    pub fn display_name(&self) -> String {
        let prefix = self.prefix.trim_matches('/');
        if prefix.is_empty() {
            format!("{}://{}", self.cloud.scheme(), self.bucket)
        } else {
            format!("{}://{}/{prefix}", self.cloud.scheme(), self.bucket)
        }
    }

    /// The keys under the prefix.
    pub(crate) fn keys(&self) -> Result<KeySpace> {
        KeySpace::new(&self.prefix)
    }

    /// Checks what the setters could not.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the setting at fault.
    pub(crate) fn validate(&self) -> Result<()> {
        self.keys()?;
        if self.timeout < Duration::from_millis(1) || self.timeout > MAX_TIMEOUT {
            return Err(Error::config(
                "timeout",
                format!("{:?} is out of range; use 1ms to 1h", self.timeout),
            ));
        }
        if let Some(endpoint) = &self.endpoint {
            let rest = endpoint
                .strip_prefix("http://")
                .or_else(|| endpoint.strip_prefix("https://"));
            let Some(rest) = rest else {
                return Err(Error::config(
                    "endpoint",
                    "the endpoint is a URL starting with http:// or https://",
                ));
            };
            let authority = rest.split('/').next().unwrap_or_default();
            if authority.contains('@') {
                return Err(Error::config(
                    "endpoint",
                    "the endpoint takes no user or password: the cloud's client reads \
                     credentials from its environment",
                ));
            }
        }
        if self.account.is_some() && self.cloud != Cloud::Azure {
            return Err(Error::config(
                "account",
                "`account` is Azure's (az:// URLs)",
            ));
        }
        if self.region.is_some() && self.cloud != Cloud::S3 {
            return Err(Error::config("region", "`region` is S3's (s3:// URLs)"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(url: &str) -> String {
        match ObjectStoreConfig::parse(url) {
            Err(Error::InvalidConfig { field, reason }) => {
                assert!(!reason.contains("hunter2"), "{reason}");
                field
            }
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn each_cloud_reads_its_bucket_and_prefix() {
        for (url, cloud, bucket, shown) in [
            ("s3://locks", Cloud::S3, "locks", "s3://locks"),
            ("s3://locks/", Cloud::S3, "locks", "s3://locks"),
            ("gs://b/team/app", Cloud::Gcs, "b", "gs://b/team/app"),
            ("az://c/p%20q", Cloud::Azure, "c", "az://c/p q"),
            ("S3://upper/x", Cloud::S3, "upper", "s3://upper/x"),
        ] {
            let config = ObjectStoreConfig::parse(url).unwrap();
            assert_eq!(config.cloud(), cloud, "{url}");
            assert_eq!(config.bucket(), bucket, "{url}");
            assert_eq!(config.display_name(), shown, "{url}");
            assert!(config.checks());
        }
    }

    #[test]
    fn options_are_read_by_name() {
        let config = ObjectStoreConfig::parse(
            "s3://b/p?endpoint=http://127.0.0.1:9000&region=eu-west-1&timeout=500ms&check=false",
        )
        .unwrap();
        assert_eq!(config.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(config.region.as_deref(), Some("eu-west-1"));
        assert_eq!(config.timeout, Duration::from_millis(500));
        assert!(!config.checks());
        let azure = ObjectStoreConfig::parse("az://c?account=dev&endpoint=https://x/dev").unwrap();
        assert_eq!(azure.account.as_deref(), Some("dev"));
    }

    #[test]
    fn a_bad_url_is_refused_naming_the_part_at_fault() {
        for (url, field) in [
            ("http://b", "backend URL"),
            ("s3://user:hunter2@b", "backend URL"),
            ("s3://", "bucket"),
            ("s3://b:9000", "bucket"),
            ("s3://a,b", "bucket"),
            ("s3://b/a//c", "prefix"),
            ("s3://b?colour=red", "colour"),
            ("s3://b?region=a&region=b", "region"),
            ("s3://b?timeout=soon", "timeout"),
            ("s3://b?timeout=0s", "timeout"),
            ("s3://b?timeout=2h", "timeout"),
            ("s3://b?check=maybe", "check"),
            ("s3://b?endpoint=ftp://x", "endpoint"),
            // A user and password in the query read as the URL's own, which
            // is refused as such.
            ("s3://b?endpoint=http://u:hunter2@x", "backend URL"),
            ("s3://b?account=a", "account"),
            ("az://c?region=r", "region"),
            ("s3://b#frag", "backend URL"),
        ] {
            assert_eq!(field_of(url), field, "{url}");
        }
    }

    #[test]
    fn an_endpoint_set_in_code_takes_no_credentials() {
        let config = ObjectStoreConfig::new(Cloud::S3, "b").endpoint("http://u:hunter2@x");
        match config.validate() {
            Err(Error::InvalidConfig { field, reason }) => {
                assert_eq!(field, "endpoint");
                assert!(!reason.contains("hunter2"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fair_mode_is_refused_with_where_to_find_it() {
        match ObjectStoreConfig::parse("s3://b?fair=true") {
            Err(Error::Unsupported(why)) => {
                assert!(why.starts_with("fair=true: "), "{why}");
                assert!(why.contains("etcd://"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert!(ObjectStoreConfig::parse("s3://b?fair=false").is_ok());
    }

    #[test]
    fn debug_shows_no_secret() {
        let config = ObjectStoreConfig::parse("s3://b/p?endpoint=http://127.0.0.1:9000").unwrap();
        let shown = format!("{config:?}");
        assert!(shown.contains("127.0.0.1:9000"), "{shown}");
    }
}

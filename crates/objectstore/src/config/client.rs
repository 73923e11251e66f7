//! The cloud clients an [`ObjectStoreConfig`] builds, each behind its
//! cloud's feature, with the timeouts and retries the backend relies on.

use std::sync::Arc;

use object_store::ObjectStore;

use distlock_core::{Error, Result};

#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
use super::Cloud;
use super::ObjectStoreConfig;

impl ObjectStoreConfig {
    /// Builds the cloud's client, as the backend does: to share it with
    /// the rest of an application, or to open the backend with
    /// [`ObjectStoreBackend::builder`](crate::ObjectStoreBackend::builder).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when this build lacks the cloud's feature;
    /// [`Error::InvalidConfig`] when the client refuses the settings or
    /// finds no credentials it needs.
    pub fn build_client(&self) -> Result<Arc<dyn ObjectStore>> {
        self.validate()?;
        // reqwest's TLS takes the process's rustls provider: ring, the one
        // the rest of distlock uses, unless the application chose one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        match self.cloud {
            #[cfg(feature = "s3")]
            Cloud::S3 => self.build_s3(),
            #[cfg(feature = "gcs")]
            Cloud::Gcs => self.build_gcs(),
            #[cfg(feature = "azure")]
            Cloud::Azure => self.build_azure(),
            #[allow(unreachable_patterns)]
            cloud => Err(Error::Unsupported(format!(
                "this build of distlock-objectstore has no {}:// client; enable its `{}` \
                 feature (distlock's `objectstore-{}`)",
                cloud.scheme(),
                cloud.feature(),
                cloud.feature()
            ))),
        }
    }

    #[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
    fn client_options(&self) -> object_store::ClientOptions {
        let plain_http = self
            .endpoint
            .as_deref()
            .is_some_and(|endpoint| endpoint.starts_with("http://"));
        object_store::ClientOptions::new()
            .with_timeout(self.timeout)
            .with_connect_timeout(self.timeout)
            .with_allow_http(plain_http)
    }

    /// Retries within the request's time: a write retried after a lost
    /// answer meets its own precondition, which the backend recognises.
    #[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
    fn retry(&self) -> object_store::RetryConfig {
        object_store::RetryConfig {
            max_retries: 3,
            retry_timeout: self.timeout,
            ..object_store::RetryConfig::default()
        }
    }

    #[cfg(feature = "s3")]
    fn build_s3(&self) -> Result<Arc<dyn ObjectStore>> {
        use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&self.bucket)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_client_options(self.client_options())
            .with_retry(self.retry());
        if let Some(connector) = &self.connector {
            builder = builder.with_http_connector(connector.clone());
        }
        if let Some(endpoint) = &self.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &self.region {
            builder = builder.with_region(region);
        }
        let store = builder.build().map_err(|error| self.refused(error))?;
        Ok(Arc::new(store))
    }

    #[cfg(feature = "gcs")]
    fn build_gcs(&self) -> Result<Arc<dyn ObjectStore>> {
        use object_store::gcp::GoogleCloudStorageBuilder;
        let mut builder = GoogleCloudStorageBuilder::from_env()
            .with_bucket_name(&self.bucket)
            .with_client_options(self.client_options())
            .with_retry(self.retry());
        if let Some(connector) = &self.connector {
            builder = builder.with_http_connector(connector.clone());
        }
        if let Some(endpoint) = &self.endpoint {
            builder = builder.with_base_url(endpoint);
        }
        let store = builder.build().map_err(|error| self.refused(error))?;
        Ok(Arc::new(store))
    }

    #[cfg(feature = "azure")]
    fn build_azure(&self) -> Result<Arc<dyn ObjectStore>> {
        use object_store::azure::MicrosoftAzureBuilder;
        let mut builder = MicrosoftAzureBuilder::from_env()
            .with_container_name(&self.bucket)
            .with_client_options(self.client_options())
            .with_retry(self.retry());
        if let Some(connector) = &self.connector {
            builder = builder.with_http_connector(connector.clone());
        }
        if let Some(endpoint) = &self.endpoint {
            builder = builder.with_endpoint(endpoint.clone());
        }
        if let Some(account) = &self.account {
            builder = builder.with_account(account);
        }
        let store = builder.build().map_err(|error| self.refused(error))?;
        Ok(Arc::new(store))
    }

    /// The error of a client that refused these settings. object_store's
    /// builder errors name settings, never their secret values.
    #[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
    fn refused(&self, error: object_store::Error) -> Error {
        Error::config(
            "backend URL",
            format!(
                "{}: the {} client refused its settings: {error}",
                self.display_name(),
                self.cloud.scheme()
            ),
        )
    }
}

//! What the backends' fixtures share: the servers' URLs from the
//! environment, a fixture for a backend opened from a URL alone, and the
//! fresh-table and fresh-collection URLs of PostgreSQL and MongoDB.

#![allow(dead_code, unreachable_pub)]

pub mod mongodb;
pub mod postgres;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use distlock_conformance::Fixture;
use distlock_core::backend::Backend;
use distlock_core::testing::required_env;

/// The URL in the environment variable `var`, or a panic that says that
/// `scripts/test` starts `server` and sets it.
pub fn server_url(var: &str, server: &str) -> String {
    required_env(
        var,
        &format!("run the tests with scripts/test, which starts {server}"),
    )
}

/// A backend that opens from its URL, as the `distlock` command does.
#[async_trait::async_trait]
pub trait OpenUrl: Backend + Sized + 'static {
    /// The backend at `url`.
    async fn open_url(url: &str) -> distlock_core::Result<Self>;
}

/// A fixture of a backend `B` that the URL alone describes: each
/// connection opens it afresh, and the cross-process cases' `distlock`
/// opens the same URL.
pub struct UrlFixture<B> {
    url: String,
    expiry_slack: Duration,
    backend: PhantomData<fn() -> B>,
}

impl<B> UrlFixture<B> {
    /// The backend at the URL in `var`, which `scripts/test` sets when it
    /// starts `server`.
    pub fn from_env(var: &str, server: &str) -> Self {
        Self {
            url: server_url(var, server),
            expiry_slack: Duration::ZERO,
            backend: PhantomData,
        }
    }

    /// The same, for a store that keeps an abandoned lock up to `slack`
    /// longer than its lease (see [`Fixture::expiry_slack`]).
    pub fn with_expiry_slack(mut self, slack: Duration) -> Self {
        self.expiry_slack = slack;
        self
    }
}

#[async_trait::async_trait]
impl<B: OpenUrl> Fixture for UrlFixture<B> {
    async fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(
            B::open_url(&self.url)
                .await
                .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.url)),
        )
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }

    fn expiry_slack(&self) -> Duration {
        self.expiry_slack
    }
}

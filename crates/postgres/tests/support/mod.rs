//! Shared helpers for the PostgreSQL backend's tests: the servers' URLs
//! from the environment, fresh names, backends, and a plain connection to
//! look at the server behind the backend's back.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use distlock_core::{AcquireOptions, LockClient, LockGuard, LockName};
use distlock_postgres::PostgresBackend;
use distlock_postgres::tokio_postgres::{self, NoTls};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The server's URL. A missing one fails the test: a run without the
/// server must not pass as if it had one.
pub fn url() -> String {
    env("DISTLOCK_TEST_POSTGRES_URL")
}

/// The URL of PgBouncer in transaction mode, in front of the server.
pub fn pgbouncer_url() -> String {
    env("DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL")
}

/// The environment variable `var`, or a panic that says how to set it.
pub fn env(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with scripts/test, which starts PostgreSQL")
    })
}

/// `prefix` and a random suffix: a table or a lock no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{:016x}", rand::random::<u64>())
}

/// `base` with `options` added to its query string.
pub fn with_options(base: &str, options: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}{options}")
}

pub fn name(text: &str) -> LockName {
    LockName::new(text).expect("a valid name")
}

pub async fn open(url: &str) -> Arc<PostgresBackend> {
    Arc::new(PostgresBackend::open(url).await.expect("open"))
}

/// A plain connection to the server, outside any backend.
pub async fn admin() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&url(), NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

/// `client` waiting for `lock` in a task of its own, until the sender
/// returned sends (or is dropped), which cancels the wait.
pub fn acquire_until_cancelled(
    client: &LockClient,
    lock: &LockName,
) -> (
    oneshot::Sender<()>,
    JoinHandle<distlock_core::Result<LockGuard>>,
) {
    let (cancel, cancelled) = oneshot::channel::<()>();
    let (client, lock) = (client.clone(), lock.clone());
    let waiting = tokio::spawn(async move {
        client
            .acquire_with(
                &lock,
                AcquireOptions::new().cancel_on(async move {
                    let _ = cancelled.await;
                }),
            )
            .await
    });
    (cancel, waiting)
}

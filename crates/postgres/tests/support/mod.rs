//! Shared helpers for the PostgreSQL backend's tests: the servers' URLs
//! from the environment, fresh names, backends, and a plain connection to
//! look at the server behind the backend's back.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::Term;
use distlock_core::testing::required_env;
use distlock_core::{LockClient, LockName};
use distlock_postgres::PostgresBackend;
use distlock_postgres::tokio_postgres::types::{FromSqlOwned, ToSql, Type};
use distlock_postgres::tokio_postgres::{self, NoTls};

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
    required_env(
        var,
        "run the tests with scripts/test, which starts PostgreSQL",
    )
}

/// `prefix` and a random suffix: a table or a lock no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{:016x}", rand::random::<u64>())
}

/// The host and port of a `postgres://user:password@host:port/db` URL.
pub fn address_of(url: &str) -> std::net::SocketAddr {
    let rest = url.split_once("://").expect("a URL").1;
    let host_port = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    let host_port = host_port.split(['/', '?']).next().expect("a host");
    host_port.parse().expect("a numeric host and port")
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

/// Every client campaigns for `lock` `rounds` times, all at once, with the
/// value `"<campaigner>-<round>"`, resigning each term it wins: the terms
/// won with their values, in term order, and the clients back.
pub async fn race_campaigns(
    clients: Vec<LockClient>,
    lock: &LockName,
    rounds: usize,
    patience: Duration,
) -> (Vec<(u64, String)>, Vec<LockClient>) {
    let mut tasks = Vec::new();
    for (campaigner, client) in clients.into_iter().enumerate() {
        let election = client.election(lock.clone()).expect("a valid name");
        tasks.push(tokio::spawn(async move {
            let mut terms = Vec::new();
            for round in 0..rounds {
                let leading = election
                    .campaign(format!("{campaigner}-{round}"), patience)
                    .await
                    .expect("the campaign wins in time");
                terms.push((leading.term(), leading.value().to_owned()));
                assert!(leading.resign().await.expect("resign"));
            }
            (client, terms)
        }));
    }
    let mut won = Vec::new();
    let mut clients = Vec::new();
    for task in tasks {
        let (client, terms) = task.await.expect("a campaigner");
        won.extend(terms);
        clients.push(client);
    }
    won.sort_unstable();
    (won, clients)
}

/// Each of `kept` as its term and the value it was won with, to compare
/// with what [`race_campaigns`] saw won.
pub fn terms_and_values(kept: &[Term]) -> Vec<(u64, String)> {
    kept.iter()
        .map(|term| (term.term, term.holder.label.clone().unwrap_or_default()))
        .collect()
}

/// The URL options that make a session default to repeatable read, sent in
/// the startup packet, as a role's or a database's default would, without
/// changing the role that other tests use.
pub const REPEATABLE_READ: &str =
    "options=-c%20default_transaction_isolation%3Drepeatable%5C%20read";

/// Asserts that a session opened with `url` defaults to repeatable read.
pub async fn assert_sessions_repeatable_read(url: &str) {
    let (check, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    let level: String = check
        .query_one("SHOW default_transaction_isolation", &[])
        .await
        .expect("show")
        .get(0);
    assert_eq!(
        level, "repeatable read",
        "the URL sets the sessions' default"
    );
}

/// The first column of each row that `statement` with `params` returns,
/// read over `admin` (`what` names the read when it fails).
pub async fn first_column<T: FromSqlOwned>(
    admin: &tokio_postgres::Client,
    statement: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
    what: &str,
) -> Vec<T> {
    admin
        .query_typed(statement, params)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// The server processes holding (`granted`) or waiting for the
/// whole-lock advisory keys of `class` (intents, the odd keys, left out).
pub async fn on_keys(admin: &tokio_postgres::Client, class: i32, granted: bool) -> Vec<i32> {
    first_column(
        admin,
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
           AND classid = $1::oid AND granted = $2 AND objid::bigint % 2 = 0",
        &[(&class, Type::INT4), (&granted, Type::BOOL)],
        "read pg_locks",
    )
    .await
}

//! PostgreSQL, in each of the backend's modes, on the campaign's own
//! server ([`server`]): [`lease`] mode (rows, leases judged on the
//! server's clock) and [`advisory`] mode (session advisory locks on a
//! connection pinned to each grant). What both modes' clients do the same
//! way is here.

mod advisory;
mod lease;
mod server;

use std::time::{Duration, Instant};

use distlock::LockName;
use distlock::postgres::{PostgresBackend, PostgresConfig, WakeUps};

use super::closed_port;
use crate::answers::SecretCase;
use crate::campaign::Server;
use crate::outcome::Outcome;

pub(crate) use advisory::POSTGRES_ADVISORY;
pub(crate) use lease::POSTGRES;

/// The backend at `url`, once its listening connection has been checked:
/// its probe notification goes through the pool, and would otherwise be
/// what takes R5's proxy's one shot.
async fn open_listening(url: &str) -> Outcome<PostgresBackend> {
    let backend = PostgresBackend::open(url).await?;
    let started = Instant::now();
    while matches!(
        backend.wake_ups(),
        WakeUps::Starting | WakeUps::Reconnecting
    ) && started.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(backend)
}

/// Deletes `name`'s row from `table` (schema-qualified) behind the
/// backend's back.
async fn delete_row(server: &Server, table: &str, name: &LockName) -> Outcome<()> {
    use distlock::postgres::tokio_postgres::{NoTls, connect};
    let (client, connection) = connect(&server::url(&server.address()), NoTls).await?;
    let connection = tokio::spawn(connection);
    client
        .execute(
            &format!("DELETE FROM {table} WHERE name = $1"),
            &[&name.as_str().as_bytes()],
        )
        .await?;
    drop(client);
    let _ = connection.await;
    Ok(())
}

/// The URLs R12 tries, with `query` (`?mode=…`, or nothing) after each.
fn secret_cases(server: &Server, canary: &str, query: &str) -> Outcome<Vec<SecretCase>> {
    Ok(vec![
        SecretCase::new(
            "bad host (a closed port)",
            format!(
                "postgres://alice:{canary}@127.0.0.1:{}/postgres{query}",
                closed_port()?
            ),
        ),
        SecretCase::new(
            "bad credentials (no such user)",
            format!(
                "postgres://alice:{canary}@{}/postgres{query}",
                server.address()
            ),
        ),
        SecretCase::new(
            "a URL the driver refuses",
            format!("postgres://alice:{canary}@127.0.0.1:notaport/postgres{query}"),
        ),
    ])
}

/// The backend's own parse of `url`, for R12.
fn parse_url(url: &str) -> Option<(&'static str, Result<String, distlock::Error>)> {
    Some((
        "`PostgresConfig::parse`",
        PostgresConfig::parse(url).map(|config| format!("{config:?}")),
    ))
}

//! PostgreSQL: a lock that lives and dies with your own transaction, so
//! that the work it guards and its end commit together.
//! `cargo run -p distlock --features postgres --example postgres_xact -- postgres://user@host/db`

use std::time::Duration;

use distlock::postgres::tokio_postgres::{self, NoTls};
use distlock::postgres::xact::{XactLocks, XactOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1/postgres".into());
    // The same token table and keys as advisory mode's clients of this URL.
    let locks = XactLocks::open(&url).await?;
    let (mut db, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(connection);

    let tx = db.transaction().await?;
    let grant = locks
        .lock(
            &tx,
            "examples/invoice-run",
            XactOptions::new().wait(Duration::from_secs(10)),
        )
        .await?;
    // The transaction's own work, one holder at a time; the token goes
    // with anything written outside this database.
    let at: String = tx.query_one("SELECT now()::text", &[]).await?.get(0);
    tx.commit().await?; // the lock ends here, with the work
    println!("ran at {at} under token {}", grant.fencing_token());
    Ok(())
}

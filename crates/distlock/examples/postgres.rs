//! PostgreSQL: run a job under a lock, handing its fencing token to the
//! rows it writes.
//! `cargo run -p distlock --features postgres --example postgres -- postgres://user@host/db`

use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1/postgres?lease=10s".into());
    let client = distlock::connect(&url).await?;
    let token = client
        .with_lock(
            "examples/report",
            Duration::from_secs(30),
            |lock| async move {
                // UPDATE reports SET … WHERE fencing_token < $token, so a holder
                // that paused past its lease cannot write over a newer one.
                lock.fencing_token
            },
        )
        .await?;
    println!("the report was written under token {token}");
    Ok(())
}

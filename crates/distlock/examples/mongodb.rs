//! MongoDB: a reader-writer lock, many readers of a configuration and one
//! writer.
//! `cargo run -p distlock --features mongodb --example mongodb -- mongodb://host/app`

use std::time::Duration;

use distlock::AcquireOptions;

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mongodb://127.0.0.1:27017/app".into());
    let client = distlock::connect(&url).await?;
    let reading = AcquireOptions::new()
        .shared()
        .timeout(Duration::from_secs(10));
    let reader = client.acquire_with("examples/config", reading).await?;
    println!(
        "reading the configuration (token {})",
        reader.fencing_token()
    );
    reader.release().await?;
    let writer = client
        .acquire_with("examples/config", Duration::from_secs(10))
        .await?;
    println!("rewriting it alone (token {})", writer.fencing_token());
    writer.release().await?;
    Ok(())
}

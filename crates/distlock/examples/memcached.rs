//! memcached: skip work another instance is already doing (an efficiency
//! lock: a lost lock costs duplicated work, not corrupted data).
//! `cargo run -p distlock --features memcached --example memcached -- memcache://host:11211`

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memcache://127.0.0.1:11211".into());
    let client = distlock::connect(&url).await?;
    match client.try_acquire("examples/cache-warmup").await? {
        Some(guard) => {
            println!("warming the cache");
            guard.release().await?;
        }
        None => println!("another instance is warming the cache; skipping"),
    }
    Ok(())
}

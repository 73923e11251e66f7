//! etcd: a semaphore, at most three exports at once across every instance.
//! `cargo run -p distlock --features etcd --example etcd -- etcd://host:2379`

use std::time::Duration;

use distlock::AcquireOptions;

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "etcd://127.0.0.1:2379".into());
    let client = distlock::connect(&url).await?;
    let permit = client
        .acquire_with(
            "examples/exports",
            AcquireOptions::new()
                .permit(3)
                .timeout(Duration::from_secs(60)),
        )
        .await?;
    println!(
        "exporting with one of 3 permits (token {})",
        permit.fencing_token()
    );
    permit.release().await?;
    Ok(())
}

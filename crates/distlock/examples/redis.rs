//! Redis: one nightly job across every instance, fenced by its token, and
//! a semaphore of three permits for a rate-limited upstream.
//! `cargo run -p distlock --features redis --example redis -- redis://host:6379`

use std::time::Duration;

use distlock::AcquireOptions;

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let client = distlock::connect(&url).await?;

    let guard = client
        .acquire_with("examples/nightly-report", Duration::from_secs(10))
        .await?;
    println!(
        "writing the report with fencing token {}",
        guard.fencing_token()
    );
    guard.release().await?;

    let permit = client
        .acquire_with(
            "examples/upstream",
            AcquireOptions::new()
                .permit(3)
                .timeout(Duration::from_secs(10)),
        )
        .await?;
    println!("calling the upstream (one of at most 3 at once)");
    permit.release().await?;
    Ok(())
}

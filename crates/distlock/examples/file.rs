//! The embedded default: file locks shared by the processes of one machine.
//! Run two at once to see the second wait for the first:
//! `cargo run -p distlock --example file`.

use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let client = distlock::connect("file://").await?;
    let guard = client.acquire("examples/file").await?;
    println!("holding with fencing token {}", guard.fencing_token());
    tokio::select! {
        reason = guard.lost() => println!("lost the lock: {reason}"),
        () = tokio::time::sleep(Duration::from_secs(3)) => println!("done"),
    }
    guard.release().await?;
    Ok(())
}

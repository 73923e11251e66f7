//! Locks without an async runtime.
//! `cargo run -p distlock --example blocking`

use std::time::Duration;

fn main() -> Result<(), distlock::Error> {
    let client = distlock::blocking::connect("file://")?;
    let rows = client.with_lock("examples/blocking", Duration::from_secs(10), |lock| {
        println!("holding with fencing token {}", lock.fencing_token);
        42
    })?;
    println!("wrote {rows} rows");
    Ok(())
}

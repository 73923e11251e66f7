//! A process that takes locks through the blocking API and ends by
//! returning from `main`, releasing nothing by hand: the set, then the
//! guard, then the client go out of scope, in that order. Each drop
//! releases before the client's runtime goes, so another process can take
//! the names at once, though their leases (a minute here) would last long
//! after this process.
//! `cargo run -p distlock --example blocking_exit -- <url> <name> [<name>…]`
//!
//! The first name is taken alone, the rest as one set. The test
//! `tests/blocking_exit.rs` runs it on every backend.

use std::time::Duration;

fn main() -> Result<(), distlock::Error> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "file://".into());
    let first = args
        .next()
        .unwrap_or_else(|| "examples/blocking-exit".into());
    let rest: Vec<String> = args.collect();

    let builder = distlock::LockClient::builder().lease(Duration::from_secs(60));
    let client = distlock::blocking::connect_with(builder, &url)?;
    let guard = client.acquire_with(first.as_str(), Duration::from_secs(10))?;
    println!("{first}: fencing token {}", guard.fencing_token());
    let _set = if rest.is_empty() {
        None
    } else {
        let set = client.acquire_all(rest.iter().map(String::as_str), Duration::from_secs(10))?;
        for (name, token) in set.fencing_tokens() {
            println!("{name}: fencing token {token}");
        }
        Some(set)
    };
    println!("returning from main with the locks held");
    // `_set`, `guard` and `client` drop here, in that order.
    Ok(())
}

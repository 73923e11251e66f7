//! What the tests that run the crate's examples share.

use std::path::PathBuf;

/// The binary of example `name`, which cargo builds beside the tests.
pub(crate) fn example(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/<this test> → target/<profile>/examples/
    let profile = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps");
    let example = profile.join("examples").join(name);
    assert!(
        example.is_file(),
        "{} is missing: `cargo test` and `cargo nextest run` build it; \
         or run `cargo build -p distlock --example {name}`",
        example.display()
    );
    example
}

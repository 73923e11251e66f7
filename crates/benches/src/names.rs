//! The lock names the scenarios take.

use distlock::LockName;

use crate::clock::now_ns;

/// A fresh lock name for one scenario, distinct per run and process.
pub(crate) fn bench_name(scenario: &str) -> LockName {
    let unique = now_ns() ^ (u64::from(std::process::id()) << 40);
    LockName::new(format!("bench-{scenario}-{unique:016x}")).expect("valid name")
}

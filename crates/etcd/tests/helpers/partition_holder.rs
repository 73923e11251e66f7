//! The lock holder of `tests/partition.rs`, run inside a network
//! namespace with `DISTLOCK_ETCD_PARTITION_HOLDER` set to
//! `URL NAME REPORT-FILE`: it takes the lock, writes `granted TOKEN` to
//! the report, then `lost AT_NS` once its `lost()` fires. Built only for
//! the crate's own tests (the `test-helpers` feature), never for users.

// Shared with the test or its children; each uses what it needs.
#[allow(dead_code)]
#[path = "../support/child.rs"]
mod child;

use std::path::Path;
use std::time::Duration;

use child::{client, now_ns};
use distlock_core::LockName;

/// Set by the test: `URL NAME REPORT-FILE`.
const HOLDER_ENV: &str = "DISTLOCK_ETCD_PARTITION_HOLDER";

const LEASE: Duration = Duration::from_secs(2);

fn main() {
    let settings = std::env::var(HOLDER_ENV)
        .unwrap_or_else(|_| panic!("{HOLDER_ENV}: `URL NAME REPORT-FILE`"));
    let [url, name, report]: [&str; 3] = settings
        .splitn(3, ' ')
        .collect::<Vec<_>>()
        .try_into()
        .expect("URL NAME REPORT");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = client(url, LEASE).await;
        let name = LockName::new(name).expect("name");
        let guard = client
            .acquire_with(&name, Duration::from_secs(30))
            .await
            .expect("the holder acquires");
        append(
            Path::new(report),
            &format!("granted {}", guard.fencing_token()),
        );
        let lost = tokio::time::timeout(Duration::from_secs(60), guard.lost()).await;
        if lost.is_ok() {
            append(Path::new(report), &format!("lost {}", now_ns()));
        }
    });
}

fn append(path: &Path, line: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("report");
    writeln!(file, "{line}").expect("report");
}

//! A child process for `tests/postgres.rs`, which runs several at once:
//! opens the backend at the URL in `DISTLOCK_POSTGRES_CHILD_URL`, takes
//! one lock on a fresh name, and prints `acquired`. Built only for the
//! crate's own tests (the `test-helpers` feature), never for users.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::backend::{AcquireRequest, Attempt, Backend, WaitState};
use distlock_core::{Claim, Holder, LockName};
use distlock_postgres::PostgresBackend;

fn main() {
    let url = std::env::var("DISTLOCK_POSTGRES_CHILD_URL")
        .expect("DISTLOCK_POSTGRES_CHILD_URL: the URL to open");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let backend = PostgresBackend::open(&url).await.expect("open in a child");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after the epoch")
            .as_nanos();
        let name =
            LockName::new(format!("child_{}_{nanos}", std::process::id())).expect("a valid name");
        let request = AcquireRequest::new(
            name,
            Claim::Exclusive,
            Duration::from_secs(5),
            Holder::this_process(Some("postgres-tests")).into(),
        );
        match backend
            .try_acquire(&request, &mut WaitState::new())
            .await
            .expect("acquire")
        {
            Attempt::Acquired { .. } => println!("acquired"),
            other => panic!("a fresh name was not granted: {other:?}"),
        }
    });
}

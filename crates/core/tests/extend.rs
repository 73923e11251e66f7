//! The keeper and a backend that extends lease by lease.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::testing::{Call, Hook, TestBackend};
use distlock_core::{LockClient, LockName, LockOptions, Result};

/// Extensions that take 30 ms for each 32 leases, as the default bulk
/// extension makes them 32 at a time, so that a batch of all of them would
/// take longer than one operation timeout.
#[derive(Debug, Default)]
struct SlowExtensions;

#[async_trait]
impl Hook for SlowExtensions {
    async fn before(&self, call: Call<'_>) -> Result<()> {
        if let Call::Extend(leases) = call {
            let rounds = leases.len().div_ceil(32) as u32;
            tokio::time::sleep(Duration::from_millis(30) * rounds).await;
        }
        Ok(())
    }
}

/// Many leases fall due together, more than such a backend extends within
/// one operation timeout if given them all at once; the keeper hands them
/// over a few at a time, each call with its own timeout, so none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_a_backend_without_bulk_extension_are_all_kept() {
    const LOCKS: usize = 200;
    let options = LockOptions::builder()
        .lease(Duration::from_millis(900))
        .operation_timeout(Duration::from_millis(80))
        .build()
        .unwrap();
    let client = LockClient::new(
        TestBackend::new()
            .with_hook(Arc::new(SlowExtensions))
            .shared(),
        options,
    );
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        let name = LockName::new(format!("slow-{i}")).unwrap();
        guards.push(client.acquire_with(&name, Duration::ZERO).await.unwrap());
    }
    // Three leases' worth: every lease was extended several times.
    tokio::time::sleep(Duration::from_millis(2700)).await;
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    assert_eq!(lost, 0, "{lost} of {LOCKS} leases were lost");
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
}

//! Eviction, on a server of the test's own: under an `allkeys-lru` policy
//! a full server may drop a held lock. That is never silent: the holder's
//! next extension reports the loss, and the next grant's token is still
//! above the evicted one's.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{LockClient, LockOptions, LossReason};
use distlock_redis::redis;

use support::{OwnServer, backend, raw, unique};

/// The size of each filler value: the server holds a few hundred of them.
const FILLER: usize = 16 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_lock_is_reported_lost_and_tokens_still_increase() {
    let server =
        OwnServer::start(&["--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru"]).await;
    // A long lease, extended seldom: between extensions the lock's keys
    // are the least recently used, and go first.
    let options = LockOptions::builder()
        .lease(Duration::from_secs(30))
        .extend_every(Duration::from_secs(5))
        .build()
        .unwrap();
    let holder = LockClient::new(Arc::new(backend(&server.url()).await), options.clone());
    let name = unique("evicted");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("acquire");
    let first_token = guard.fencing_token();

    // Fill the server until the grant's key is gone. SCAN, unlike a read
    // of the key, leaves its access time alone.
    let mut connection = raw(&server.url()).await;
    let filler = vec![b'x'; FILLER];
    let mut written = 0u64;
    while grant_key_left(&mut connection).await {
        for _ in 0..100 {
            let _: () = redis::cmd("SET")
                .arg(format!("filler:{written}"))
                .arg(&filler)
                .query_async(&mut connection)
                .await
                .expect("an allkeys-lru server makes room");
            written += 1;
        }
        assert!(
            written < 1_000_000,
            "the grant's key outlived {written} filler values"
        );
    }

    // Another client is granted the evicted lock at once; the holder
    // learns of it at its next extension.
    let other = LockClient::new(Arc::new(backend(&server.url()).await), options);
    let again = other
        .try_acquire(&name)
        .await
        .expect("try_acquire")
        .expect("the evicted lock is free");
    assert!(
        again.fencing_token() > first_token,
        "{} after {first_token}: the evicted counter starts again from the server's clock",
        again.fencing_token()
    );
    let reason = tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("lost() fires at the holder's next extension");
    assert_eq!(reason, LossReason::Refused);
    assert!(!guard.release().await.expect("release"), "it was lost");
    assert!(again.release().await.expect("release"));
}

/// Whether the server still has an exclusive grant's key (`…:x`): the
/// test's lock is the only one on this server.
async fn grant_key_left(connection: &mut redis::aio::MultiplexedConnection) -> bool {
    support::all_keys(connection)
        .await
        .iter()
        .any(|key| !key.starts_with("filler:") && key.ends_with(":x"))
}

//! A failover inside a Redis Cluster of the test's own (three masters, one
//! replica each, `cluster-node-timeout` 1 s): a master whose replica has
//! every grant is SIGKILLed while its locks are held, and its replica takes
//! over. Holders lose nothing, nobody else is granted meanwhile, and the
//! promoted master releases and grants as the old one did.
//!
//! What a failover loses when the replica lacks a grant (asynchronous
//! replication) is stated in docs/redis.md; no test pretends otherwise.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock_core::{Error, LockClient, LockOptions, TryOptions};
use distlock_redis::redis;
use redis::aio::MultiplexedConnection;

use support::backend;
use support::cluster::{OwnCluster, names_on, query};

/// How many locks the killed master holds.
const LOCKS: usize = 3;

/// How long the test waits for the cluster to act (a failure noticed, a
/// replica promoted, the driver's slot map read again).
const PATIENCE: Duration = Duration::from_secs(60);

/// A lease long enough to outlast the failover on a busy machine: the
/// node timeout (1 s), the election, and the driver finding the new master
/// take seconds, during which extensions fail for now.
fn options() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(30))
        .extend_every(Duration::from_millis(500))
        .operation_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

async fn client(url: &str) -> LockClient {
    LockClient::new(Arc::new(backend(url).await), options())
}

/// Polls `check` on `connection` every 50 ms until it holds, failing after
/// [`PATIENCE`] with the last answer.
async fn until(
    connection: &mut MultiplexedConnection,
    what: &str,
    command: &[&str],
    check: impl Fn(&str) -> bool,
) {
    let started = Instant::now();
    loop {
        let answer: redis::RedisResult<String> = {
            let mut cmd = redis::cmd(command[0]);
            for arg in &command[1..] {
                cmd.arg(*arg);
            }
            cmd.query_async(connection).await
        };
        let answer = match answer {
            Ok(text) if check(&text) => return,
            Ok(text) => text,
            Err(error) => error.to_string(),
        };
        assert!(
            started.elapsed() < PATIENCE,
            "{what}: not within {PATIENCE:?}; the last answer:\n{answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_after_its_replica_has_the_grants_loses_no_lock() {
    let mut cluster = OwnCluster::start(
        3,
        true,
        None,
        &[
            "--cluster-node-timeout",
            "1000",
            // The replica takes over however long ago it last heard from
            // its master.
            "--cluster-replica-validity-factor",
            "0",
        ],
    )
    .await;
    let url = cluster.url();
    let names_backend = backend(&url).await;
    let mut survivor = cluster.masters[1].connection().await;
    let names = names_on(
        &cluster,
        &names_backend,
        &mut survivor,
        0,
        LOCKS,
        "failover",
    )
    .await;

    let holder = client(&url).await;
    let other = client(&url).await;
    let mut guards = Vec::new();
    for name in &names {
        guards.push(Arc::new(holder.acquire(name).await.expect("acquire")));
    }

    // The replica of the master to be killed has every grant: each name's
    // exclusive key is there, read with READONLY.
    let mut replica = cluster.replicas[0].connection().await;
    let () = query(&mut replica, &["READONLY"]).await;
    for name in &names {
        let key = names_backend.keys_of(name).remove(0);
        let started = Instant::now();
        loop {
            let exists: i64 = query(&mut replica, &["EXISTS", &key]).await;
            if exists == 1 {
                break;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "{key} never reached the replica"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // Another client tries every name all along; it must never be granted.
    let stop = Arc::new(AtomicBool::new(false));
    let (tries, granted) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let contender = {
        let (other, names, stop) = (other.clone(), names.clone(), stop.clone());
        let (tries, granted) = (tries.clone(), granted.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                for name in &names {
                    // An error (the master is away) is no grant.
                    if let Ok(Some(guard)) = other.try_acquire_with(name, TryOptions::new()).await {
                        granted.fetch_add(1, Ordering::AcqRel);
                        let _ = guard.release().await;
                    }
                }
                tries.fetch_add(1, Ordering::AcqRel);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    cluster.masters[0].kill();
    until(
        &mut replica,
        "the replica is promoted",
        &["INFO", "replication"],
        |info| info.contains("role:master"),
    )
    .await;
    for connection in [&mut replica, &mut survivor] {
        until(
            connection,
            "every slot is served again",
            &["CLUSTER", "INFO"],
            |info| info.contains("cluster_state:ok"),
        )
        .await;
    }

    // The holders' extensions carry on at the promoted master.
    for guard in &guards {
        let started = Instant::now();
        while let Err(error) = guard.extend().await {
            assert!(
                !matches!(error, Error::Lost { .. }),
                "the holder lost its lock: {error}"
            );
            assert!(
                started.elapsed() < PATIENCE,
                "no extension at the promoted master: {error}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The contender tries again against the promoted master, still in vain.
    let tried = tries.load(Ordering::Acquire);
    let started = Instant::now();
    while tries.load(Ordering::Acquire) < tried + 3 {
        assert!(started.elapsed() < PATIENCE, "the contender stopped trying");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Release);
    contender.await.expect("the contender");
    assert_eq!(granted.load(Ordering::Acquire), 0, "no double grant");
    for (name, guard) in names.iter().zip(&guards) {
        assert!(!guard.is_lost(), "{name}: the holder lost nothing");
        let attempt = other
            .try_acquire_with(name, TryOptions::new())
            .await
            .expect("the promoted master answers");
        assert!(attempt.is_none(), "{name} is held at the promoted master");
        let waited = other
            .acquire_with(name, Duration::from_millis(500))
            .await
            .expect_err("a held lock");
        assert!(matches!(waited, Error::Timeout { .. }), "{waited}");
    }

    // Releases work there, and the names go to the next client, with a
    // higher token.
    let tokens: Vec<u64> = guards.iter().map(|guard| guard.fencing_token()).collect();
    for (name, guard) in names.iter().zip(guards) {
        let guard = Arc::into_inner(guard).expect("the only holder of the guard");
        assert!(guard.release().await.expect("release"), "{name} was ours");
    }
    for (name, token) in names.iter().zip(tokens) {
        let next = other
            .try_acquire_with(name, TryOptions::new())
            .await
            .expect("try")
            .unwrap_or_else(|| panic!("{name} is free once released"));
        assert!(next.fencing_token() > token, "tokens go on increasing");
        assert!(next.release().await.expect("release"));
    }

    // New names of the killed master's slots are granted by the promoted
    // one, where their keys are.
    let fresh = names_on(
        &cluster,
        &names_backend,
        &mut survivor,
        0,
        LOCKS,
        "promoted",
    )
    .await;
    for name in &fresh {
        let guard = other.acquire(name).await.expect("acquire");
        let key = names_backend.keys_of(name).remove(0);
        let exists: i64 = query(&mut replica, &["EXISTS", &key]).await;
        assert_eq!(exists, 1, "{name} was granted by the promoted master");
        assert!(guard.release().await.expect("release"));
    }
}

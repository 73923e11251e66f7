//! Scripts the cluster driver sends again: redis-rs, in cluster mode, sends
//! a command again when its connection was reset before the answer came,
//! so a script can run twice for one call. Each call here is made once,
//! through a proxy that lets the script reach the master and then resets
//! the connection, and must answer what its first run did (issue 38,
//! finding 3). A one-master cluster of the test's own announces the
//! proxy's port, so that the driver's every connection passes through it.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Backend, HandOver, Lease};
use distlock_core::{Claim, Holder, LockName};
use distlock_faultproxy::{Fault, FaultProxy};
use distlock_redis::{RedisBackend, redis};
use redis::aio::MultiplexedConnection;

use distlock_core::testing::ADMIN_LIMIT;
use support::cluster::{OwnCluster, query};
use support::{backend, grant, unique};

const LEASE: Duration = Duration::from_secs(30);

/// A cluster of one master, reached only through a proxy.
struct Proxied {
    cluster: OwnCluster,
    proxy: FaultProxy,
}

impl Proxied {
    async fn start() -> Self {
        let cluster = OwnCluster::start(1, false, None, &[]).await;
        let master = format!("127.0.0.1:{}", cluster.masters[0].port());
        let proxy = FaultProxy::start(master.parse().expect("an address")).expect("a proxy");
        let port = proxy.addr().port().to_string();
        let mut connection = cluster.masters[0].connection().await;
        let _: String = query(
            &mut connection,
            &["CONFIG", "SET", "cluster-announce-port", &port],
        )
        .await;
        Self { cluster, proxy }
    }

    fn url(&self) -> String {
        format!("redis://{}?mode=cluster", self.proxy.addr())
    }

    /// A plain connection to the master itself, beside the proxy.
    async fn master(&self) -> MultiplexedConnection {
        self.cluster.masters[0].connection().await
    }
}

/// How many times the master ran `EVALSHA`.
async fn scripts_run(connection: &mut MultiplexedConnection) -> u64 {
    let info: String = query(connection, &["INFO", "commandstats"]).await;
    let calls: BTreeMap<&str, u64> = info
        .lines()
        .filter_map(|line| {
            let (command, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|s| s.strip_prefix("calls="))?;
            Some((command, calls.parse().ok()?))
        })
        .collect();
    calls.get("evalsha").copied().unwrap_or(0)
}

/// Runs `call` once with the next request's answer lost to a reset, and
/// checks that the driver sent its script again: the master ran it twice.
async fn with_answer_lost<T>(proxied: &Proxied, call: impl Future<Output = T>) -> T {
    let mut master = proxied.master().await;
    let before = scripts_run(&mut master).await;
    let resets = proxied.proxy.stats().resets;
    proxied.proxy.set_fault(Fault::ResetAfterRequest);
    let answer = call.await;
    assert!(
        proxied.proxy.stats().resets > resets,
        "the connection was reset after the request"
    );
    assert_eq!(
        scripts_run(&mut master).await - before,
        2,
        "the driver sent the script again"
    );
    answer
}

/// Grants, hands over, releases and force-releases once without a fault,
/// so that the master has every script before a call's answer is lost
/// (a `NOSCRIPT` first answer would make the script run once).
async fn load_scripts(backend: &RedisBackend) {
    let name = unique("warm");
    let lease = grant(backend, &name, Claim::Exclusive, LEASE)
        .await
        .expect("free");
    let next = support::hand_over(backend, &lease).await;
    assert!(backend.release(&next).await.expect("release"));
    grant(backend, &name, Claim::Exclusive, LEASE)
        .await
        .expect("free");
    assert!(
        backend
            .force_release(&name, ADMIN_LIMIT)
            .await
            .expect("force release")
    );
}

fn next_of(lease: &Lease) -> AcquireRequest {
    AcquireRequest::new(
        lease.name.clone(),
        Claim::Exclusive,
        lease.lease,
        Holder::this_process(Some("redis-tests")).into(),
    )
}

/// The exclusive key of `name`, as stored on the master.
async fn stored_grant(
    backend: &RedisBackend,
    master: &mut MultiplexedConnection,
    name: &LockName,
) -> Option<String> {
    let exclusive = backend.keys_of(name).remove(0);
    redis::cmd("GET")
        .arg(&exclusive)
        .query_async(master)
        .await
        .expect("GET")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_sent_again_answers_the_grant_it_made() {
    let proxied = Proxied::start().await;
    let backend = backend(&proxied.url()).await;
    load_scripts(&backend).await;
    let name = unique("resent-hand-over");
    let lease = grant(&backend, &name, Claim::Exclusive, LEASE)
        .await
        .expect("free");
    let next = next_of(&lease);
    let hand_overs = backend.hand_overs().expect("a cluster hands over");
    let answer = with_answer_lost(&proxied, hand_overs.hand_over(&lease, &next))
        .await
        .expect("hand over");
    let HandOver::Granted { fencing_token, .. } = answer else {
        panic!("the hand-over's second run took its own grant for another's: {answer:?}");
    };
    assert!(fencing_token > lease.fencing_token);
    let stored = stored_grant(&backend, &mut proxied.master().await, &name)
        .await
        .expect("the new grant holds the name");
    assert!(
        stored.starts_with(&format!("{}:{fencing_token}:", next.lease_id)),
        "the answer is the stored grant's token: {stored}"
    );
    let handed = next.granted(fencing_token, answer_state(answer));
    assert!(backend.release(&handed).await.expect("release"));
}

/// The state a granted hand-over carries, for the release after it.
fn answer_state(answer: HandOver) -> distlock_core::backend::GrantState {
    match answer {
        HandOver::Granted { state, .. } => state,
        HandOver::NotOurs => distlock_core::backend::GrantState::none(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_again_reports_no_loss() {
    let proxied = Proxied::start().await;
    let backend = backend(&proxied.url()).await;
    load_scripts(&backend).await;
    for claim in [Claim::Exclusive, Claim::Shared, Claim::Permit { limit: 2 }] {
        let name = unique("resent-release");
        let lease = grant(&backend, &name, claim, LEASE).await.expect("free");
        let released = with_answer_lost(&proxied, backend.release(&lease))
            .await
            .expect("release");
        assert!(released, "{claim:?}: a live grant released is no loss");
        assert!(
            grant(&backend, &name, Claim::Exclusive, LEASE)
                .await
                .is_some(),
            "{claim:?}: the name is free"
        );
        assert!(
            !backend.release(&lease).await.expect("a second release"),
            "{claim:?}: a release called again (not sent again) finds nothing"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_sent_again_reports_what_it_ended() {
    let proxied = Proxied::start().await;
    let backend = backend(&proxied.url()).await;
    load_scripts(&backend).await;
    let name = unique("resent-force");
    grant(&backend, &name, Claim::Exclusive, LEASE)
        .await
        .expect("free");
    let ended = with_answer_lost(&proxied, backend.force_release(&name, ADMIN_LIMIT))
        .await
        .expect("force release");
    assert!(ended, "a held name was released by force");
    assert!(
        !backend
            .force_release(&name, ADMIN_LIMIT)
            .await
            .expect("force release"),
        "a forced release called again finds nothing held"
    );
}

//! Waiters that wait cost the cluster no writes while nothing changes:
//! against an etcd member of the test's own, whose
//! `etcd_server_proposals_committed_total` nobody else moves, waiters
//! behind a held lock retry for a while, and no proposal is committed
//! until the lock is released; campaigns behind a leader likewise, until
//! it resigns; and in fair mode, where each task waits with a key of its
//! own, likewise. `scripts/test` sets `DISTLOCK_ETCD_BIN`.

// Shared with the cluster tests, which use the rest of it.
#[allow(dead_code)]
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::{LockClient, LockName, LockOptions};
use distlock_etcd::EtcdBackend;
use distlock_etcd::raw::etcdserverpb::RangeRequest;
use distlock_etcd::raw::{Client, ConnectOptions};

use distlock_core::testing::ADMIN_LIMIT;
use support::lone_member::LoneMember;

/// How many clients wait, each in a process of its own as far as etcd
/// can tell: a backend, and so a session and a key, each.
const WAITERS: usize = 4;

/// The member's count of committed raft proposals, from its metrics.
fn proposals_committed(member: &LoneMember) -> u64 {
    let mut stream = TcpStream::connect(member.host()).expect("reach the member's metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        member.host()
    )
    .expect("ask for the metrics");
    let mut body = String::new();
    stream.read_to_string(&mut body).expect("read the metrics");
    let line = body
        .lines()
        .find(|line| line.starts_with("etcd_server_proposals_committed_total "))
        .unwrap_or_else(|| panic!("no proposals counter in the metrics:\n{body}"));
    let value = line.split_whitespace().nth(1).expect("a value");
    // Prometheus's text format may write a whole count as a float.
    value.parse::<f64>().expect("a number") as u64
}

async fn client(member: &LoneMember) -> (LockClient, Arc<EtcdBackend>) {
    client_in(member, false).await
}

/// A client, in fair mode or not.
async fn client_in(member: &LoneMember, fair: bool) -> (LockClient, Arc<EtcdBackend>) {
    let backend = EtcdBackend::open(&format!("etcd://{}?fair={fair}", member.host()))
        .await
        .expect("open");
    let backend = Arc::new(backend);
    let options = LockOptions::builder()
        .lease(Duration::from_secs(6))
        .build()
        .expect("valid options");
    (LockClient::new(backend.clone(), options), backend)
}

/// Waits until `name` has `count` keys: the holder's and each waiter's.
async fn wait_for_keys(member: &LoneMember, backend: &EtcdBackend, name: &LockName, count: usize) {
    let raw = Client::connect(&ConnectOptions::new([format!("http://{}", member.host())]))
        .await
        .expect("a raw client");
    let (key, range_end) = backend.key_range(name);
    for _ in 0..600 {
        let keys = raw
            .range(RangeRequest {
                key: key.clone(),
                range_end: range_end.clone(),
                ..RangeRequest::default()
            })
            .await
            .expect("read the name's keys")
            .kvs
            .len();
        if keys == count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the name never had {count} keys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_waiters_write_nothing_until_the_lock_is_released() {
    let member = LoneMember::start();
    member.wait_healthy().await;
    let name = LockName::new("idle-waiters").expect("name");
    let (holder, backend) = client(&member).await;
    let guard = holder.acquire(&name).await.expect("the holder");

    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        let (client, _) = client(&member).await;
        let name = name.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client
                .acquire_with(&name, Duration::from_secs(60))
                .await
                .expect("a waiter is served");
            let token = guard.fencing_token();
            assert!(guard.release().await.expect("release"));
            token
        }));
    }
    // Each waiter's first attempt writes its key (after its session's
    // grant); from then on they only retry.
    wait_for_keys(&member, &backend, &name, 1 + WAITERS).await;
    let settled = proposals_committed(&member);
    // Several of the waiters' retry periods (at most 500 ms apart), and
    // one of the holder's extension periods.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = proposals_committed(&member);
    assert_eq!(
        idle - settled,
        0,
        "{WAITERS} idle waiters had {} proposals committed",
        idle - settled
    );

    let first = guard.fencing_token();
    assert!(guard.release().await.expect("release"));
    for waiter in waiters {
        let token = waiter.await.expect("the waiter's task");
        assert!(token > first, "each waiter's token follows the holder's");
    }
    assert!(
        proposals_committed(&member) > idle,
        "the release and the grants that followed were written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_fair_waiters_write_nothing_until_the_lock_is_released() {
    let member = LoneMember::start();
    member.wait_healthy().await;
    let name = LockName::new("idle-fair-waiters").expect("name");
    let (holder, backend) = client_in(&member, true).await;
    let guard = holder.acquire(&name).await.expect("the holder");

    // Two tasks in each of two clients, each with a key of its own, and
    // one more task of the holder's client.
    let (other, _) = client_in(&member, true).await;
    let mut waiters = Vec::new();
    for index in 0..=WAITERS {
        let client = if index % 2 == 0 {
            holder.clone()
        } else {
            other.clone()
        };
        let wanted = name.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client
                .acquire_with(&wanted, Duration::from_secs(60))
                .await
                .expect("a waiter is served");
            let token = guard.fencing_token();
            assert!(guard.release().await.expect("release"));
            token
        }));
        // It asked once its key is there.
        wait_for_keys(&member, &backend, &name, index + 2).await;
    }
    let settled = proposals_committed(&member);
    // Longer than half the lease, when each waiter reads again, and one of
    // the holder's extension periods.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let idle = proposals_committed(&member);
    assert_eq!(
        idle - settled,
        0,
        "{} idle fair waiters had {} proposals committed",
        WAITERS + 1,
        idle - settled
    );

    let first = guard.fencing_token();
    assert!(guard.release().await.expect("release"));
    let mut tokens = vec![first];
    for waiter in waiters {
        tokens.push(waiter.await.expect("the waiter's task"));
    }
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "served in the order they asked, tokens growing: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_campaigns_write_nothing_until_the_leader_resigns() {
    let member = LoneMember::start();
    member.wait_healthy().await;
    let name = LockName::new("idle-campaigns").expect("name");
    let (leader, backend) = client(&member).await;
    let leading = leader
        .election(&name)
        .expect("a valid name")
        .campaign("leader", Duration::from_secs(60))
        .await
        .expect("the leader");
    let before = proposals_committed(&member);

    let mut campaigns = Vec::new();
    for index in 0..WAITERS {
        let (client, _) = client(&member).await;
        let name = name.clone();
        campaigns.push(tokio::spawn(async move {
            let leading = client
                .election(&name)
                .expect("a valid name")
                .campaign(format!("campaign {index}"), Duration::from_secs(60))
                .await
                .expect("a campaign wins in turn");
            let term = leading.term();
            assert!(leading.resign().await.expect("resign"));
            term
        }));
    }
    // A campaign's first attempt grants its session (one proposal), then
    // only reads: a campaign writes nothing while the name is held.
    let mut settled = proposals_committed(&member);
    for _ in 0..600 {
        if settled >= before + WAITERS as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        settled = proposals_committed(&member);
    }
    assert_eq!(
        settled - before,
        WAITERS as u64,
        "one session granted per campaign"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = proposals_committed(&member);
    assert_eq!(
        idle - settled,
        0,
        "{WAITERS} idle campaigns had {} proposals committed",
        idle - settled
    );

    let first = leading.term();
    assert!(leading.resign().await.expect("resign"));
    let mut terms = vec![first];
    for campaign in campaigns {
        terms.push(campaign.await.expect("the campaign's task"));
    }
    terms.sort_unstable();
    let recorded = backend
        .term_log()
        .expect("a record of terms")
        .terms_after(&name, 0, ADMIN_LIMIT)
        .await
        .expect("read the terms");
    let recorded: Vec<u64> = recorded.iter().map(|term| term.term).collect();
    assert_eq!(recorded, terms, "each grant's term, once");
}

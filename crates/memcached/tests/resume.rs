//! Resuming a grant by its identity, where the conformance cases cannot
//! reach: quorum mode with a server down, a copy missing, or another
//! resume holding part of the servers (on three memcached processes of the
//! test's own); in sharded mode, holds made by a hand-over and permits of
//! another limit.

mod support;

use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Backend, GrantState, HandOver, Lease, Resumes};
use distlock_core::{Claim, Error, Holder, LockName, Result};
use distlock_memcached::MemcachedBackend;

use support::{OwnServer, Peek, grant, grant_as, unique, url};

/// A lease that nothing here outlives.
const LEASE: Duration = Duration::from_secs(5);

struct Cluster {
    servers: Vec<OwnServer>,
}

impl Cluster {
    async fn start() -> Self {
        let mut servers = Vec::new();
        for _ in 0..3 {
            servers.push(OwnServer::start(&[]).await);
        }
        Self { servers }
    }

    async fn backend(&self) -> MemcachedBackend {
        let addrs: Vec<String> = self.servers.iter().map(OwnServer::addr).collect();
        let url = format!("memcache://{}?mode=quorum&timeout=500ms", addrs.join(","));
        MemcachedBackend::open(&url).await.expect("open")
    }

    /// What server `index` holds at `name`'s lock key.
    async fn copy(
        &self,
        backend: &MemcachedBackend,
        index: usize,
        name: &LockName,
    ) -> Option<Vec<u8>> {
        let mut peek = Peek::connect(&self.servers[index].addr()).await;
        peek.get(&backend.lock_key(name))
            .await
            .map(|item| item.value)
    }

    async fn peek(&self, index: usize) -> Peek {
        Peek::connect(&self.servers[index].addr()).await
    }
}

/// Takes `old` up for a new grant of `lease`, as core's resume asks: the
/// old lease without its state. The new lease carries the old token.
async fn resume(backend: &MemcachedBackend, old: &Lease, lease: Duration) -> Result<Option<Lease>> {
    resume_as(backend, old, old.claim, lease).await
}

/// As [`resume`], by a handle that names `claim`.
async fn resume_as(
    backend: &MemcachedBackend,
    old: &Lease,
    claim: Claim,
    lease: Duration,
) -> Result<Option<Lease>> {
    let request = AcquireRequest::new(
        old.name.clone(),
        claim,
        lease,
        Holder::this_process(Some("resume-tests")).into(),
    );
    let named = Lease {
        claim,
        state: GrantState::none(),
        ..old.clone()
    };
    let resumed = backend.resume(&named, &request).await?;
    Ok(resumed.map(|state| request.granted(old.fencing_token, state)))
}

async fn extended(backend: &MemcachedBackend, lease: &Lease) -> Result<bool> {
    backend
        .extend_many(std::slice::from_ref(lease))
        .await
        .into_first()
}

fn carries(copy: Option<&[u8]>, lease: &Lease) -> bool {
    copy.is_some_and(|value| value.starts_with(format!("{}\n", lease.id).as_bytes()))
}

/// With one of three servers down, a resume holds on the other two, with
/// the old token; the old holder's next extension finds its identity gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_holds_with_one_of_three_servers_down() {
    let mut cluster = Cluster::start().await;
    let before = cluster.backend().await;
    let name = unique("resume-one-down");
    let old = grant(&before, &name, LEASE).await.expect("free");
    cluster.servers[2].kill();

    let after = cluster.backend().await;
    let new = resume(&after, &old, LEASE)
        .await
        .expect("resume")
        .expect("held on two of three");
    assert_eq!(new.fencing_token, old.fencing_token);
    assert!(
        !extended(&before, &old).await.expect("extend"),
        "the old holder lost it"
    );
    assert!(extended(&after, &new).await.expect("extend"));
    let other = cluster.backend().await;
    assert!(
        grant(&other, &name, LEASE).await.is_none(),
        "held by the resumed grant"
    );
    assert!(after.release(&new).await.expect("release"));
    assert!(
        grant(&other, &name, LEASE).await.is_some(),
        "free once released"
    );
}

/// A copy missing on one server (it restarted, say) is not counted: the
/// resume holds on the two copies that live, with the new lease's expiry,
/// and its first extension puts the missing copy back, under the new
/// identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_copy_is_not_counted_and_comes_back_on_extension() {
    let cluster = Cluster::start().await;
    let backend = cluster.backend().await;
    let name = unique("resume-missing");
    let old = grant(&backend, &name, Duration::from_secs(2))
        .await
        .expect("free");
    assert!(cluster.peek(0).await.delete(&backend.lock_key(&name)).await);

    let new = resume(&backend, &old, Duration::from_secs(30))
        .await
        .expect("resume")
        .expect("held on two of three");
    assert_eq!(
        cluster.copy(&backend, 0, &name).await,
        None,
        "not re-created by the resume"
    );
    for index in [1, 2] {
        let item = cluster
            .peek(index)
            .await
            .get(&backend.lock_key(&name))
            .await
            .expect("a copy");
        assert!(carries(Some(&item.value), &new), "server {index}");
        assert!(
            item.ttl > 10,
            "the new lease's expiry, not the old one's: {}",
            item.ttl
        );
    }
    assert!(extended(&backend, &new).await.expect("extend"));
    assert!(carries(
        cluster.copy(&backend, 0, &name).await.as_deref(),
        &new
    ));
    assert!(backend.release(&new).await.expect("release"));
}

/// Copies that are gone on a majority (run out, or lost in restarts) are
/// not resumed, even though one copy still lives: that copy is left as it
/// was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_gone_from_a_majority_is_not_resumed() {
    let cluster = Cluster::start().await;
    let backend = cluster.backend().await;
    let name = unique("resume-gone");
    let old = grant(&backend, &name, LEASE).await.expect("free");
    for index in [0, 1] {
        assert!(
            cluster
                .peek(index)
                .await
                .delete(&backend.lock_key(&name))
                .await
        );
    }
    assert!(
        resume(&backend, &old, LEASE)
            .await
            .expect("resume")
            .is_none()
    );
    assert!(carries(
        cluster.copy(&backend, 2, &name).await.as_deref(),
        &old
    ));
    assert!(cluster.copy(&backend, 0, &name).await.is_none());
}

/// Another resume won one server and a third is down: this resume wins
/// only the last one, a minority, so it does not hold, and it puts the old
/// grant back there, as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_that_wins_a_minority_puts_the_old_grant_back() {
    let mut cluster = Cluster::start().await;
    let backend = cluster.backend().await;
    let name = unique("resume-minority");
    let old = grant(&backend, &name, LEASE).await.expect("free");
    let key = backend.lock_key(&name);
    let rival = format!("{}\n{{}}", distlock_core::backend::LeaseId::random());
    cluster.peek(1).await.set(&key, rival.as_bytes(), 5).await;
    cluster.servers[2].kill();

    let outcome = resume(&backend, &old, LEASE).await;
    assert!(matches!(outcome, Ok(None)), "{outcome:?}");
    let item = cluster.peek(0).await.get(&key).await.expect("put back");
    assert!(carries(Some(&item.value), &old), "the old grant, as it was");
    assert!(item.ttl >= 1, "with an expiry: {}", item.ttl);
    assert_eq!(
        cluster.copy(&backend, 1, &name).await.as_deref(),
        Some(rival.as_bytes())
    );
}

/// Two resumes of one handle at once, with one server of three down: each
/// needs both others, so at most one holds; when each wins one, neither
/// holds, and both put the old grant back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_resumes_with_a_server_down_never_both_hold() {
    let mut cluster = Cluster::start().await;
    let holder = cluster.backend().await;
    cluster.servers[2].kill();
    let (one, two) = (cluster.backend().await, cluster.backend().await);
    for round in 0..20 {
        let name = unique("resume-split");
        let old = grant(&holder, &name, LEASE).await.expect("free");
        let (a, b) = tokio::join!(resume(&one, &old, LEASE), resume(&two, &old, LEASE));
        let (a, b) = (a.expect("resume"), b.expect("resume"));
        match (&a, &b) {
            (Some(_), Some(_)) => panic!("round {round}: both resumes hold"),
            (Some(won), None) | (None, Some(won)) => {
                for index in [0, 1] {
                    assert!(carries(
                        cluster.copy(&holder, index, &name).await.as_deref(),
                        won
                    ));
                }
            }
            (None, None) => {
                for index in [0, 1] {
                    assert!(
                        carries(cluster.copy(&holder, index, &name).await.as_deref(), &old),
                        "round {round}: server {index} has the old grant back"
                    );
                }
            }
        }
        for (backend, lease) in [(&one, a), (&two, b)] {
            if let Some(lease) = lease {
                assert!(backend.release(&lease).await.expect("release"));
            }
        }
    }
}

/// A hold made by a hand-over through the server may pass on within its
/// process without a server command, after which the key still names the
/// grant that handed it on: such a hold is never resumed, by the handle of
/// the grant that stored it nor by that of a grant it passed to, and the
/// grant that holds it keeps it.
#[tokio::test]
async fn a_hold_made_by_a_hand_over_is_not_resumed() {
    let backend = MemcachedBackend::open(&url()).await.expect("open");
    let name = unique("resume-handed");
    let first = grant(&backend, &name, LEASE).await.expect("free");
    let stored = hand_over(&backend, &first).await;
    assert!(
        resume(&backend, &stored, LEASE)
            .await
            .expect("resume")
            .is_none()
    );
    // Passed on without a command: the key still names `stored`.
    let passed = hand_over(&backend, &stored).await;
    let mut peek = Peek::connect(backend.servers_of(&name)[0]).await;
    let item = peek.get(&backend.lock_key(&name)).await.expect("held");
    assert!(
        carries(Some(&item.value), &stored),
        "passed on without a command"
    );
    assert!(
        resume(&backend, &stored, LEASE)
            .await
            .expect("resume")
            .is_none()
    );
    assert!(
        resume(&backend, &passed, LEASE)
            .await
            .expect("resume")
            .is_none()
    );
    assert!(
        extended(&backend, &passed).await.expect("extend"),
        "still held"
    );
    assert!(backend.release(&passed).await.expect("release"));
}

async fn hand_over(backend: &MemcachedBackend, old: &Lease) -> Lease {
    let next = AcquireRequest::new(
        old.name.clone(),
        Claim::Exclusive,
        old.lease,
        Holder::this_process(Some("memcached-tests")).into(),
    );
    let abilities = backend.abilities();
    let hand_overs = abilities.hand_overs.expect("sharded mode hands over");
    match hand_overs.hand_over(old, &next).await.expect("hand over") {
        HandOver::Granted {
            fencing_token,
            state,
            ..
        } => next.granted(fencing_token, state),
        HandOver::NotOurs => panic!("not ours"),
    }
}

/// A permit is resumed by a handle of its own claim only: another limit,
/// or the whole lock, finds nothing; a reader is never held.
#[tokio::test]
async fn a_permit_is_resumed_by_its_own_claim_only() {
    let backend = MemcachedBackend::open(&url()).await.expect("open");
    let name = unique("resume-permit");
    let claim = Claim::Permit { limit: 2 };
    let old = grant_as(&backend, &name, claim, LEASE)
        .await
        .expect("try")
        .expect("free");
    for other in [Claim::Permit { limit: 3 }, Claim::Exclusive] {
        let outcome = resume_as(&backend, &old, other, LEASE).await;
        assert!(matches!(outcome, Ok(None)), "{other}: {outcome:?}");
    }
    let shared = resume_as(&backend, &old, Claim::Shared, LEASE).await;
    assert!(matches!(shared, Err(Error::Unsupported(_))), "{shared:?}");
    let new = resume(&backend, &old, LEASE)
        .await
        .expect("resume")
        .expect("the permit");
    assert_eq!(new.fencing_token, old.fencing_token);
    assert!(
        !extended(&backend, &old).await.expect("extend"),
        "the old holder lost it"
    );
    assert!(extended(&backend, &new).await.expect("extend"));
    assert!(backend.release(&new).await.expect("release"));
}

/// Quorum mode grants no permits, so it resumes none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_mode_resumes_no_permit() {
    let cluster = Cluster::start().await;
    let backend = cluster.backend().await;
    let name = unique("resume-quorum-permit");
    let old = grant(&backend, &name, LEASE).await.expect("free");
    let outcome = resume_as(&backend, &old, Claim::Permit { limit: 2 }, LEASE).await;
    assert!(matches!(outcome, Err(Error::Unsupported(_))), "{outcome:?}");
}

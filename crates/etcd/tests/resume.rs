//! Resuming a grant on etcd, beyond the conformance cases: the key keeps
//! its create revision and moves onto the resuming client's session, so
//! the old session's end no longer ends it; the old holder hears of the
//! loss from its key's watch alone (its session still renews) and cannot
//! release the resumed grant, also when both share one session; a fair
//! holder resumed keeps its place before its waiters; and a resume whose
//! answer was lost is released by its new identity. `scripts/test` starts
//! etcd and sets `DISTLOCK_TEST_ETCD_URL`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::backend::{AcquireRequest, Backend, GrantState, Lease, LeaseId, Resuming};
use distlock_core::testing::{Call, Hook, TestBackend};
use distlock_core::{
    Claim, Error, Holder, LockClient, LockGuard, LockName, LossReason, ResumeHandle,
};
use distlock_etcd::{EtcdBackend, EtcdConfig};

#[path = "support/member.rs"]
mod member;

use member::{PATIENCE, backend, client_of, range_of, unique, url};

const LEASE: Duration = Duration::from_secs(5);

async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {PATIENCE:?}"))
}

async fn acquired(client: &LockClient, name: &LockName) -> LockGuard {
    client.acquire_with(name, PATIENCE).await.expect("acquire")
}

/// `name`'s one key: its create revision and the etcd lease it is on.
async fn the_key(backend: &EtcdBackend, name: &LockName) -> (i64, i64) {
    let kvs = range_of(backend, name).await;
    assert_eq!(kvs.len(), 1, "one key");
    (kvs[0].create_revision, kvs[0].lease)
}

/// Asserts that `name` is held: another client's single try loses.
async fn assert_held(name: &LockName) {
    let other = client_of(&backend().await, LEASE);
    assert!(
        other.try_acquire(name).await.expect("try").is_none(),
        "{name} is held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_resumed_key_keeps_its_revision_on_the_resumers_session_and_outlives_the_old_one() {
    let name = unique("resume-session");
    let before = backend().await;
    let old = acquired(&client_of(&before, LEASE), &name).await;
    let (created, old_session) = the_key(&before, &name).await;
    assert_eq!(u64::try_from(created).ok(), Some(old.fencing_token()));

    let after = backend().await;
    let resumed = client_of(&after, LEASE)
        .resume(&old.handle())
        .await
        .expect("resume");
    let (still_created, new_session) = the_key(&after, &name).await;
    assert_eq!(still_created, created, "the token is the create revision");
    assert_ne!(new_session, old_session, "on the resumer's own session");

    // The old process goes, and its session with it: the grant stays.
    bounded("the old session revoked", before.close())
        .await
        .expect("close");
    assert_eq!(the_key(&after, &name).await, (created, new_session));
    resumed.extend().await.expect("the resumed grant extends");
    assert!(!resumed.is_lost());
    assert_held(&name).await;
    assert!(resumed.release().await.expect("release"));
    assert!(range_of(&after, &name).await.is_empty());
}

/// The old holder, still running, keeps renewing its own session: only
/// its key's watch can tell it. It hears without extending, and its
/// release then answers that the lock was not its own and leaves the
/// resumed grant alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_old_holder_hears_of_its_loss_unasked_and_cannot_release_the_resumed_grant() {
    let name = unique("resume-old-holder");
    let old = acquired(&client_of(&backend().await, LEASE), &name).await;
    let resumed = client_of(&backend().await, LEASE)
        .resume(&old.handle())
        .await
        .expect("resume");
    let reason = bounded("the old holder's lost()", old.lost()).await;
    assert_eq!(reason, LossReason::Detected);
    assert!(!old.release().await.expect("release"), "not ours any more");
    assert_held(&name).await;
    resumed.extend().await.expect("the resumed grant extends");
    assert!(!resumed.is_lost());
    assert!(resumed.release().await.expect("release"));
}

/// Two clients of one backend share its session, so the key's session
/// cannot tell the old holder from the resumed one: its revisions do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resume_on_the_same_session_still_takes_the_grant_from_its_old_guard() {
    let name = unique("resume-same-session");
    let shared = backend().await;
    let old = acquired(&client_of(&shared, LEASE), &name).await;
    let (created, session) = the_key(&shared, &name).await;
    let resumed = client_of(&shared, LEASE)
        .resume(&old.handle())
        .await
        .expect("resume");
    assert_eq!(the_key(&shared, &name).await, (created, session));
    bounded("the old holder's lost()", old.lost()).await;
    assert!(
        matches!(old.extend().await, Err(Error::Lost { .. })),
        "the old guard no longer extends"
    );
    assert!(!old.release().await.expect("release"), "not ours any more");
    assert_held(&name).await;
    resumed.extend().await.expect("the resumed grant extends");
    assert!(resumed.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fair_holder_resumed_keeps_its_place_before_its_waiters() {
    let name = unique("resume-fair");
    let fair = || async {
        let config = EtcdConfig::parse(&url()).expect("a valid URL").fair(true);
        Arc::new(EtcdBackend::connect(config).await.expect("open etcd"))
    };
    let holder = fair().await;
    let old = acquired(&client_of(&holder, LEASE), &name).await;
    let mut waiters = Vec::new();
    for count in 2..=3 {
        let waiter = client_of(&fair().await, LEASE);
        let wanted = name.clone();
        waiters.push(tokio::spawn(async move {
            let guard = waiter.acquire_with(&wanted, PATIENCE).await;
            guard.map(|guard| (guard.fencing_token(), guard))
        }));
        while range_of(&holder, &name).await.len() != count {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let resumed = client_of(&fair().await, LEASE)
        .resume(&old.handle())
        .await
        .expect("resume");
    let mut line = range_of(&holder, &name).await;
    line.sort_by_key(|kv| kv.create_revision);
    assert_eq!(
        u64::try_from(line[0].create_revision).ok(),
        Some(resumed.fencing_token()),
        "the resumed grant is still first in line"
    );
    bounded("the old holder's lost()", old.lost()).await;
    // Its loss let nobody in: the resumed grant holds the line up.
    assert!(waiters.iter().all(|waiter| !waiter.is_finished()));
    let mut last = resumed.fencing_token();
    assert!(resumed.release().await.expect("release"));
    for waiter in waiters {
        let (token, guard) = bounded("the next in line", waiter)
            .await
            .expect("the waiter's task")
            .expect("served");
        assert!(token > last, "served in the order they asked");
        last = token;
        assert!(guard.release().await.expect("release"));
    }
}

/// A resume whose answer never came (core then releases the new identity
/// with no state of the grant) is found by the identity its key records.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resume_whose_answer_was_lost_is_released_by_its_identity() {
    let name = unique("resume-lost-answer");
    let old = acquired(&client_of(&backend().await, LEASE), &name).await;
    let handle = old.handle();
    let resumer = backend().await;
    let Resuming::By(resumes) = resumer.abilities().resumes else {
        panic!("etcd resumes grants");
    };
    let holder = Arc::new(Holder::this_process(Some("resumer")));
    let request = AcquireRequest::new(name.clone(), Claim::Exclusive, LEASE, holder);
    // The identity, as a restarted process reads it from the handle's
    // text: `distlock-resume/1 <store> <claim> <identity> <token> <name>`.
    let text = handle.to_string();
    let identity = text.split(' ').nth(3).expect("the identity");
    let before = Lease {
        id: LeaseId::from_u128(u128::from_str_radix(identity, 16).expect("hex")),
        fencing_token: handle.fencing_token(),
        ..request.granted(0, GrantState::none())
    };
    let state = resumes
        .resume(&before, &request)
        .await
        .expect("resume")
        .expect("the grant is held");
    // The answer is lost: only the request is left.
    drop(state);
    let unanswered = request.granted(0, GrantState::none());
    assert!(resumer.release(&unanswered).await.expect("release"));
    assert!(range_of(&resumer, &name).await.is_empty(), "released");
    bounded("the old holder's lost()", old.lost()).await;
    assert!(
        resumes
            .resume(&before, &request)
            .await
            .expect("resume")
            .is_none(),
        "nothing left to resume"
    );
}

/// A handle whose identity is right but whose token or claim is not is
/// lost: each names a grant the store does not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handle_with_another_token_or_claim_is_lost() {
    let name = unique("resume-tampered");
    let old = acquired(&client_of(&backend().await, LEASE), &name).await;
    let text = old.handle().to_string();
    let fields: Vec<&str> = text.splitn(6, ' ').collect();
    let token = old.fencing_token();
    let tampered = [
        [
            fields[0],
            fields[1],
            fields[2],
            fields[3],
            &(token + 1).to_string(),
            fields[5],
        ],
        [
            fields[0], fields[1], "shared", fields[3], fields[4], fields[5],
        ],
    ];
    let resumer = client_of(&backend().await, LEASE);
    for fields in tampered {
        let handle: ResumeHandle = fields.join(" ").parse().expect("a handle");
        match resumer.resume(&handle).await {
            Err(Error::Lost { .. }) => {}
            other => panic!("{handle}: {other:?}"),
        }
    }
    old.extend().await.expect("the holder keeps its grant");
    assert!(!old.is_lost());
    assert!(old.release().await.expect("release"));
}

/// Fails every renewal once set, so that the holder's session runs out.
#[derive(Debug, Default)]
struct NoRenewals(AtomicBool);

#[async_trait::async_trait]
impl Hook for NoRenewals {
    async fn before(&self, call: Call<'_>) -> distlock_core::Result<()> {
        if matches!(call, Call::Extend(_) | Call::RenewSession) && self.0.load(Ordering::SeqCst) {
            return Err(Error::Backend {
                backend: "test",
                message: "no renewals".into(),
                source: None,
            });
        }
        Ok(())
    }
}

/// etcd's leader judges a session's end: one with under a second left
/// (etcd reports whole seconds, rounded down), or whose TTL ran out while
/// its keys are not deleted yet, is not resumed, though its key is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grant_whose_session_is_running_out_is_lost_though_its_key_is_there() {
    let name = unique("resume-running-out");
    let stop = Arc::new(NoRenewals::default());
    let wrapped = TestBackend::wrapping(backend().await).with_hook(stop.clone());
    let lease = Duration::from_secs(1);
    let holder = LockClient::new(wrapped.shared(), member::options(lease));
    let old = acquired(&holder, &name).await;
    let looker = backend().await;
    let (_, session) = the_key(&looker, &name).await;
    stop.0.store(true, Ordering::SeqCst);
    let members = member::etcd().await;
    let seen = bounded("the session's last second", async {
        loop {
            let left = members.lease_time_to_live(session).await.expect("ttl").ttl;
            let there = !range_of(&looker, &name).await.is_empty();
            if left <= 0 || !there {
                return there;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(seen, "the key outlived its session's last whole second");
    let resumer = client_of(&backend().await, LEASE);
    match resumer.resume(&old.handle()).await {
        Err(Error::Lost { .. }) => {}
        other => panic!("a session under a second from its end was resumed: {other:?}"),
    }
    drop(old);
}

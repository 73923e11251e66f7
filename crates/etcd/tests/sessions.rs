//! The etcd lease ("session") that a client's keys hang on, against a real
//! etcd member: each grant keeps the session it was made on, a renewal
//! says which session it renewed and which ended, a release that finds its
//! key gone reports the loss first, and closing a client revokes its
//! session. `scripts/test` starts etcd and sets `DISTLOCK_TEST_ETCD_URL`.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Backend, Lease, Renewal, SessionId};
use distlock_core::testing::try_grant;
use distlock_core::{Claim, Holder, LockClient, LockName, LossReason};
use distlock_etcd::EtcdBackend;

#[path = "support/member.rs"]
mod member;

use member::{PATIENCE, backend, etcd, options, range_of, unique};

/// The etcd leases of `name`'s keys, as etcd has them.
async fn leases_of(backend: &EtcdBackend, name: &LockName) -> Vec<i64> {
    range_of(backend, name)
        .await
        .into_iter()
        .map(|kv| kv.lease)
        .collect()
}

/// The one etcd lease `name`'s one key hangs on.
async fn session_of_key(backend: &EtcdBackend, name: &LockName) -> i64 {
    let leases = leases_of(backend, name).await;
    assert_eq!(leases.len(), 1, "one key for {name}");
    leases[0]
}

/// Revokes etcd's lease `id` by hand, as an expiry would end it.
async fn revoke(id: i64) {
    etcd().await.lease_revoke(id).await.expect("revoke");
}

/// Whether etcd still has the lease `id`.
async fn lives(id: i64) -> bool {
    let answer = etcd().await.lease_time_to_live(id).await.expect("ttl");
    answer.ttl > 0
}

fn as_core(id: i64) -> SessionId {
    SessionId(u64::try_from(id).expect("etcd's lease ids are positive"))
}

/// One single try for `name`, straight to the backend: the request and
/// the lease it granted.
async fn grant(backend: &EtcdBackend, name: &LockName) -> (AcquireRequest, Lease) {
    let holder = Arc::new(Holder::this_process(Some("etcd-session-tests")));
    let request = AcquireRequest::new(
        name.clone(),
        Claim::Exclusive,
        Duration::from_secs(10),
        holder,
    );
    let lease = try_grant(backend, &request)
        .await
        .expect("try")
        .expect("a fresh name is free");
    (request, lease)
}

/// Finding 11: the session is kept with each grant. A renewal with no
/// session confirms nothing; a renewal names the session it renewed; a
/// session that ended is reported once, and ends only its own grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewals_name_the_session_renewed_and_the_sessions_that_ended() {
    let backend = backend().await;
    let session = backend.session().expect("etcd keeps a session");
    assert_eq!(
        session.renew().await.expect("renew"),
        Renewal::nothing(),
        "no session yet: nothing is confirmed"
    );

    let first = unique("session-first");
    let (old_request, old) = grant(&backend, &first).await;
    let old_session = session_of_key(&backend, &first).await;
    assert_eq!(session.session_of(&old), Some(as_core(old_session)));
    assert_eq!(
        session.renew().await.expect("renew"),
        Renewal::of(as_core(old_session))
    );

    revoke(old_session).await;
    let second = unique("session-second");
    let (_, new) = grant(&backend, &second).await;
    let new_session = session_of_key(&backend, &second).await;
    assert_ne!(new_session, old_session, "a new session for the new grant");
    assert_eq!(session.session_of(&new), Some(as_core(new_session)));
    assert_eq!(
        session.session_of(&old),
        Some(as_core(old_session)),
        "a grant keeps the session it was made on"
    );

    assert_eq!(
        session.renew().await.expect("renew"),
        Renewal::of(as_core(new_session)).with_ended(as_core(old_session)),
        "the renewal keeps the new session and reports the old one's end"
    );
    assert_eq!(
        session.renew().await.expect("renew"),
        Renewal::of(as_core(new_session)),
        "an end is reported once"
    );

    // An extension asks about the grant's own session.
    assert!(!backend.extend(&old).await.expect("extend"));
    assert!(backend.extend(&new).await.expect("extend"));

    assert!(!backend.release(&old).await.expect("release"));
    assert!(
        old_request.loss.is_ended(),
        "a release that finds its key gone reports the loss"
    );
    assert!(backend.release(&new).await.expect("release"));
}

/// Finding 11 through a client: once the session a lock hangs on is
/// gone, its holder hears of the loss, a lock taken on the next session
/// is kept and extended, and the release of the lost one says it was not
/// ours only once `lost()` has fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_session_ends_its_locks_and_keeps_the_next_sessions() {
    let lease = Duration::from_secs(3);
    let backend = backend().await;
    let client = LockClient::new(backend.clone(), options(lease));

    let first = unique("session-lost");
    let old = client.acquire(&first).await.expect("acquire");
    let old_session = session_of_key(&backend, &first).await;
    let old_signal = old.lost_signal();
    revoke(old_session).await;
    // Released at once, before the watch or the keeper had a chance to
    // report the loss: the release itself must.
    assert!(!old.release().await.expect("release"), "it was lost");
    assert!(old_signal.is_lost());
    assert_ne!(
        old_signal.lost().await,
        LossReason::Released,
        "lost() fired for the loss, not for the release"
    );

    let second = unique("session-kept");
    let new = client.acquire(&second).await.expect("acquire");
    let new_session = session_of_key(&backend, &second).await;
    assert_ne!(new_session, old_session);
    // Several leases go by: only renewals keep the lock that long.
    tokio::time::sleep(lease * 3).await;
    assert!(!new.is_lost(), "the new session's lock is kept");
    new.extend().await.expect("extend");
    assert_eq!(session_of_key(&backend, &second).await, new_session);
    assert!(new.release().await.expect("release"));
}

/// A lock held on a session that ends while the client holds it is lost
/// (by its watch, or at the next renewal), while the client takes new
/// locks on a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_hears_of_its_sessions_end_while_the_next_session_serves() {
    let lease = Duration::from_secs(3);
    let backend = backend().await;
    let client = LockClient::new(backend.clone(), options(lease));
    let first = unique("session-held");
    let old = client.acquire(&first).await.expect("acquire");
    revoke(session_of_key(&backend, &first).await).await;
    let new = client
        .acquire(unique("session-next"))
        .await
        .expect("acquire");
    let reason = tokio::time::timeout(PATIENCE, old.lost())
        .await
        .expect("the loss is reported");
    assert_ne!(reason, LossReason::Released);
    assert!(!new.is_lost());
    assert!(!old.release().await.expect("release"));
    assert!(new.release().await.expect("release"));
}

/// Finding 13: closing a client revokes its session, so that nothing of
/// a process that exits outlives it; locks still held are lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn closing_a_client_revokes_its_session() {
    let lease = Duration::from_secs(3);
    let backend = backend().await;
    let client = LockClient::new(backend.clone(), options(lease));
    let released = unique("session-close");
    let guard = client.acquire(&released).await.expect("acquire");
    let session = session_of_key(&backend, &released).await;
    guard.release().await.expect("release");
    let held = unique("session-close-held");
    let guard = client.acquire(&held).await.expect("acquire");
    assert!(lives(session).await, "the session outlives the release");

    client.close().await.expect("close");
    assert!(!lives(session).await, "closed, the session is revoked");
    assert!(
        leases_of(&backend, &held).await.is_empty(),
        "a key of the session went with it"
    );
    let reason = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("the holder hears of it");
    assert_ne!(reason, LossReason::Released);
    // Closing again, with nothing left, is fine.
    client.close().await.expect("close again");
}

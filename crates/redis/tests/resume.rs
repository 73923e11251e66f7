//! Resuming a grant by its handle, where the conformance cases cannot
//! reach: a grant handed over without a command (its token not yet on the
//! server, the tokens reserved for it), and quorum mode with a server
//! down, a server that lacks the copy, a copy on a minority, and two
//! resumes of one handle at once while a server is down.

mod support;

use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Backend, GrantState, HandOver, Lease, Resuming};
use distlock_core::{Claim, Holder, LockName};
use distlock_redis::{RedisBackend, redis};

use support::{OwnServer, backend, eventually, grant, hand_over, raw, unique, url};

const LEASE: Duration = Duration::from_secs(30);

/// The lease of quorum mode's tests: a server that is down is given a
/// quarter of it per call, which its every call then waits out.
const QUORUM_LEASE: Duration = Duration::from_secs(8);

fn name(prefix: &str) -> LockName {
    LockName::new(unique(prefix)).expect("a valid name")
}

/// What a handle of `lease` names, as `LockGuard::handle` takes it: the
/// identity the store keeps the grant under, and its token.
fn handle_of(backend: &RedisBackend, lease: &Lease) -> Lease {
    let Resuming::By(resumes) = backend.abilities().resumes else {
        panic!("redis resumes in every mode");
    };
    Lease {
        id: resumes.stored_identity(lease),
        state: GrantState::none(),
        ..lease.clone()
    }
}

/// Takes `handle`'s grant up under a fresh identity through `backend`, as
/// `LockClient::resume` asks: the grant under its new identity, or `None`.
async fn resume(backend: &RedisBackend, handle: &Lease) -> Option<Lease> {
    let Resuming::By(resumes) = backend.abilities().resumes else {
        panic!("redis resumes in every mode");
    };
    let request = AcquireRequest::new(
        handle.name.clone(),
        handle.claim,
        handle.lease,
        Holder::this_process(Some("resumed")).into(),
    );
    resumes
        .resume(handle, &request)
        .await
        .expect("resume")
        .map(|state| request.granted(handle.fencing_token, state))
}

/// The value of `key` on the server at `url`, if it is there.
async fn get(url: &str, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut raw(url).await)
        .await
        .expect("GET")
}

/// Deletes `key` on the server at `url`, as a restart without
/// persistence would have.
async fn delete(url: &str, key: &str) {
    redis::cmd("DEL")
        .arg(key)
        .query_async::<()>(&mut raw(url).await)
        .await
        .expect("DEL");
}

/// What the server at `url` stores of `lease`'s grant under its identity:
/// an exclusive grant's `<id>:<token>:<record>`, a reader's
/// `<token>:<record>`, if it holds it live.
async fn copy_of(backend: &RedisBackend, url: &str, lease: &Lease) -> Option<String> {
    let keys = backend.keys_of(&lease.name);
    let id = lease.id.to_string();
    match lease.claim {
        Claim::Exclusive => get(url, &keys[0])
            .await
            .filter(|value| value.starts_with(&id)),
        _ => {
            let mut connection = raw(url).await;
            let score: Option<f64> = redis::cmd("ZSCORE")
                .arg(&keys[1])
                .arg(&id)
                .query_async(&mut connection)
                .await
                .expect("ZSCORE");
            score?;
            redis::cmd("HGET")
                .arg(&keys[2])
                .arg(&id)
                .query_async(&mut connection)
                .await
                .expect("HGET")
        }
    }
}

/// Whether the server at `url` holds anything of `name`: an exclusive
/// grant or a reader.
async fn holds_any(backend: &RedisBackend, url: &str, name: &LockName) -> bool {
    let keys = backend.keys_of(name);
    let found: i64 = redis::cmd("EXISTS")
        .arg(&keys[0])
        .arg(&keys[1])
        .query_async(&mut raw(url).await)
        .await
        .expect("EXISTS");
    found > 0
}

#[tokio::test]
async fn a_grant_handed_over_without_a_command_resumes_by_its_own_token_and_no_token_repeats() {
    let backend = backend(&url()).await;
    let name = name("resume-handed");
    let key = backend.keys_of(&name).remove(0);
    let first = grant(&backend, &name, Claim::Exclusive, LEASE)
        .await
        .expect("free");
    // Through the server, which reserves the next tokens; then without a
    // command, which takes the first of them.
    let second = hand_over(&backend, &first).await;
    let spent = handle_of(&backend, &second);
    let third = hand_over(&backend, &second).await;
    assert_eq!(third.fencing_token, second.fencing_token + 1);
    let handle = handle_of(&backend, &third);
    assert_eq!(
        handle.id, second.id,
        "the key still names the script's grant"
    );

    assert!(
        resume(&backend, &handle).await.is_none(),
        "the server still has the second grant's token, not the third's"
    );
    assert!(backend.extend(&third).await.expect("extend"), "writes it");
    assert!(
        resume(&backend, &spent).await.is_none(),
        "a handle of the grant handed over is spent"
    );
    let resumed = resume(&backend, &handle).await.expect("the third resumes");
    assert_eq!(resumed.fencing_token, third.fencing_token);
    let stored = get(&url(), &key).await.expect("held");
    assert!(
        stored.starts_with(&format!("{}:{}:", resumed.id, third.fencing_token)),
        "under the new identity, with its own token: {stored}"
    );

    // The old holder learns it lost, and its hold hands nothing on.
    assert!(!backend.extend(&third).await.expect("extend"));
    let next = AcquireRequest::new(
        name.clone(),
        Claim::Exclusive,
        LEASE,
        Holder::this_process(Some("redis-tests")).into(),
    );
    let hand_overs = backend.hand_overs().expect("one server hands over");
    assert!(matches!(
        hand_overs
            .hand_over(&third, &next)
            .await
            .expect("hand over"),
        HandOver::NotOurs
    ));

    assert!(backend.extend(&resumed).await.expect("extend"));
    assert!(backend.release(&resumed).await.expect("release"));
    let after = grant(&backend, &name, Claim::Exclusive, LEASE)
        .await
        .expect("free after the release");
    assert!(
        after.fencing_token > second.fencing_token + 63,
        "{} repeats a token reserved by the hand-over from {}",
        after.fencing_token,
        second.fencing_token
    );
    assert!(backend.release(&after).await.expect("release"));
}

/// Three servers of the test's own, each in service for longer than any
/// lease (its epoch long past, so that its vote counts at once).
async fn three_servers() -> Vec<OwnServer> {
    let mut servers = Vec::new();
    for _ in 0..3 {
        let server = OwnServer::start(&[]).await;
        redis::cmd("SET")
            .arg("distlock:epoch")
            .arg(0)
            .query_async::<()>(&mut raw(&server.url()).await)
            .await
            .expect("SET");
        servers.push(server);
    }
    servers
}

fn quorum_url(servers: &[OwnServer]) -> String {
    let hosts: Vec<String> = servers
        .iter()
        .map(|server| format!("127.0.0.1:{}", server.port()))
        .collect();
    format!("redis://{}?mode=quorum", hosts.join(","))
}

/// A grant of `claim` on a name of its own, with its copy on every server.
async fn held_everywhere(backend: &RedisBackend, urls: &[String], claim: Claim) -> Lease {
    let lease = grant(backend, &name("resume-quorum"), claim, QUORUM_LEASE)
        .await
        .expect("free");
    for url in urls {
        eventually("a copy on every server", || async {
            copy_of(backend, url, &lease).await.is_some()
        })
        .await;
    }
    lease
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_in_quorum_mode_holds_with_a_server_down_which_gets_its_copy_when_back() {
    let mut servers = three_servers().await;
    let urls: Vec<String> = servers.iter().map(OwnServer::url).collect();
    let backend = backend(&quorum_url(&servers)).await;
    let writer = held_everywhere(&backend, &urls, Claim::Exclusive).await;
    let reader = held_everywhere(&backend, &urls, Claim::Shared).await;

    servers[0].kill();
    let mut resumed = Vec::new();
    for old in [&writer, &reader] {
        let new = resume(&backend, &handle_of(&backend, old))
            .await
            .unwrap_or_else(|| panic!("{}: two of three servers resume it", old.claim));
        assert_eq!(new.fencing_token, old.fencing_token);
        assert!(
            !backend.extend(old).await.expect("extend"),
            "{}: the old identity is gone from a majority",
            old.claim
        );
        assert!(backend.extend(&new).await.expect("extend"), "{}", old.claim);
        for url in &urls[1..] {
            let copy = copy_of(&backend, url, &new).await.expect("swapped");
            assert!(copy.contains(&format!("{}:", new.fencing_token)), "{copy}");
            assert!(copy_of(&backend, url, old).await.is_none());
        }
        resumed.push(new);
    }

    // Back, empty: the next extension gives it the copies, under the new
    // identities.
    servers[0].restart().await;
    for new in &resumed {
        eventually("the restarted server gets the resumed copy", || async {
            let _ = backend.extend(new).await;
            copy_of(&backend, &urls[0], new).await.is_some()
        })
        .await;
        assert!(backend.release(new).await.expect("release"));
        for url in &urls {
            assert!(!holds_any(&backend, url, &new.name).await, "released");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_in_quorum_mode_needs_the_copy_on_a_majority() {
    let servers = three_servers().await;
    let urls: Vec<String> = servers.iter().map(OwnServer::url).collect();
    let backend = backend(&quorum_url(&servers)).await;

    // One server lost its copy: the other two resume it, and the
    // extension mends the third under the new identity.
    let old = held_everywhere(&backend, &urls, Claim::Exclusive).await;
    let key = backend.keys_of(&old.name).remove(0);
    delete(&urls[0], &key).await;
    let new = resume(&backend, &handle_of(&backend, &old))
        .await
        .expect("two copies of three are a majority");
    assert!(backend.extend(&new).await.expect("extend"));
    assert!(
        copy_of(&backend, &urls[0], &new).await.is_some(),
        "mended by the extension"
    );
    assert!(!backend.extend(&old).await.expect("extend"));
    assert!(backend.release(&new).await.expect("release"));

    // Two servers lost theirs: one copy is no majority, and the one
    // swapped is released again.
    for claim in [Claim::Exclusive, Claim::Shared] {
        let old = held_everywhere(&backend, &urls, claim).await;
        let keys = backend.keys_of(&old.name);
        for url in &urls[..2] {
            delete(url, &keys[0]).await;
            delete(url, &keys[1]).await;
            delete(url, &keys[2]).await;
        }
        assert!(
            resume(&backend, &handle_of(&backend, &old)).await.is_none(),
            "{claim}: one copy of three is lost"
        );
        for url in &urls {
            assert!(
                !holds_any(&backend, url, &old.name).await,
                "{claim}: nothing is left on {url}"
            );
        }
        assert!(!backend.extend(&old).await.expect("extend"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_resumes_in_quorum_mode_with_a_server_down_never_both_hold() {
    let mut servers = three_servers().await;
    let urls: Vec<String> = servers.iter().map(OwnServer::url).collect();
    let (one, two) = (
        backend(&quorum_url(&servers)).await,
        backend(&quorum_url(&servers)).await,
    );
    servers[0].kill();
    let (mut won, mut both_lost) = (0, 0);
    for round in 0..10 {
        let old = grant(&one, &name("resume-race"), Claim::Exclusive, QUORUM_LEASE)
            .await
            .expect("free");
        let handle = handle_of(&one, &old);
        let (a, b) = tokio::join!(resume(&one, &handle), resume(&two, &handle));
        assert!(!one.extend(&old).await.expect("extend"), "round {round}");
        match (a, b) {
            (Some(_), Some(_)) => panic!("round {round}: both resumes hold"),
            (Some(winner), None) | (None, Some(winner)) => {
                won += 1;
                assert!(one.extend(&winner).await.expect("extend"), "round {round}");
                for url in &urls[1..] {
                    assert!(
                        copy_of(&one, url, &winner).await.is_some(),
                        "round {round}: the winner holds {url}"
                    );
                }
                assert!(one.release(&winner).await.expect("release"));
            }
            // Each took one server of the two: each released its own.
            (None, None) => {
                both_lost += 1;
                for url in &urls[1..] {
                    assert!(
                        !holds_any(&one, url, &old.name).await,
                        "round {round}: a loser's copy is left on {url}"
                    );
                }
            }
        }
    }
    println!("{won} rounds with a winner, {both_lost} where both lost");
}

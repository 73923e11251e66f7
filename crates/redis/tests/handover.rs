//! Hand-overs without a server command: after one hand-over through the
//! server, the next ones of the same process take reserved tokens and
//! send nothing, while tokens keep increasing for every client, and a
//! lease lost on the server is still the holder's loss.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Backend, HandOver, Lease};
use distlock_core::{Claim, Holder, LockClient, LockName, LossReason};
use distlock_redis::{RedisBackend, redis};

use distlock_core::testing::ADMIN_LIMIT;
use support::{backend, grant, hand_over, raw, unique, url};

const LEASE: Duration = Duration::from_secs(30);

/// How many times the server ran each command, `INFO` itself left out.
async fn command_calls(
    connection: &mut redis::aio::MultiplexedConnection,
) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(connection)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (command, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|stat| stat.strip_prefix("calls="))?;
            Some((command.to_owned(), calls.parse().ok()?))
        })
        .filter(|(command, _)| command != "info")
        .collect()
}

/// What the server ran between two readings of [`command_calls`]: every
/// command, those a script calls included, and the scripts sent by SHA.
fn sent_between(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> (u64, u64) {
    let ran = |command: &str| {
        after.get(command).copied().unwrap_or(0) - before.get(command).copied().unwrap_or(0)
    };
    (
        after.keys().map(|command| ran(command)).sum(),
        ran("evalsha"),
    )
}

#[tokio::test]
async fn hand_overs_after_one_through_the_server_send_no_command_until_the_reserve_is_spent() {
    // A server of this test's own: its command counts are this test's.
    let server = support::OwnServer::start(&[]).await;
    let backend = backend(&server.url()).await;
    let mut connection = raw(&server.url()).await;
    let name = unique("quiet");
    let first = grant(&backend, &name, Claim::Exclusive, LEASE)
        .await
        .expect("free");

    // Every hand-over, and the commands it cost, until three of them have
    // gone to the server.
    let mut current = first;
    let mut tokens = vec![current.fencing_token];
    let mut costs = Vec::new();
    while costs.iter().filter(|&&(ran, _)| ran > 0).count() < 3 {
        assert!(
            costs.len() < 10_000,
            "hand-overs never went to the server again"
        );
        let before = command_calls(&mut connection).await;
        current = hand_over(&backend, &current).await;
        let after = command_calls(&mut connection).await;
        costs.push(sent_between(&before, &after));
        tokens.push(current.fencing_token);
    }
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens increase at every hand-over: {tokens:?}"
    );
    let through_server: Vec<usize> = (0..costs.len()).filter(|&at| costs[at].0 > 0).collect();
    assert_eq!(
        through_server[0], 0,
        "the first goes to the server: {costs:?}"
    );
    for &at in &through_server[1..] {
        assert_eq!(
            costs[at].1, 1,
            "a hand-over through the server is one script: {costs:?}"
        );
    }
    let run = through_server[1] - through_server[0] - 1;
    assert!(
        run > 0,
        "hand-overs without a command follow one through the server: {costs:?}"
    );
    assert_eq!(
        through_server[2] - through_server[1] - 1,
        run,
        "each hand-over through the server reserves as many: {costs:?}"
    );

    let other = backend_of_another_client(&server.url()).await;
    assert!(
        grant(&other, &name, Claim::Exclusive, LEASE)
            .await
            .is_none(),
        "the lock is held all along"
    );
    assert!(backend.release(&current).await.expect("release"));
    let next = grant(&other, &name, Claim::Exclusive, LEASE)
        .await
        .expect("free once released");
    let highest = tokens.iter().max().copied().unwrap_or_default();
    assert!(
        next.fencing_token > highest,
        "another client's grant ({}) outranks every local one (up to {highest})",
        next.fencing_token
    );
    assert!(other.release(&next).await.expect("release"));
}

/// Another client: a backend of its own, as another process has.
async fn backend_of_another_client(url: &str) -> RedisBackend {
    backend(url).await
}

/// Deletes `key`, which must be there, as an eviction or an operator
/// would.
async fn delete_behind_the_backends_back(
    connection: &mut redis::aio::MultiplexedConnection,
    key: &str,
) {
    let deleted: u64 = redis::cmd("DEL")
        .arg(key)
        .query_async(connection)
        .await
        .expect("DEL");
    assert_eq!(deleted, 1, "the key was there");
}

/// A grant of `name`, handed over through the server and then again
/// without a command: the three leases in turn.
async fn handed_over_twice(backend: &RedisBackend, name: &LockName) -> [Lease; 3] {
    let first = grant(backend, name, Claim::Exclusive, LEASE)
        .await
        .expect("free");
    let through_server = hand_over(backend, &first).await;
    let local = hand_over(backend, &through_server).await;
    [first, through_server, local]
}

#[tokio::test]
async fn a_grant_handed_over_without_a_command_acts_for_the_stored_one_and_list_catches_up() {
    let url = url();
    let backend = backend(&url).await;
    let name = unique("stored");
    let [first, through_server, local] = handed_over_twice(&backend, &name).await;
    let later = hand_over(&backend, &local).await;
    assert!(first.fencing_token < through_server.fencing_token);
    assert!(through_server.fencing_token < local.fencing_token);
    assert!(local.fencing_token < later.fencing_token);

    let listed_token = |backend: RedisBackend, name: LockName| async move {
        let listed = backend.list(ADMIN_LIMIT).await.expect("list");
        let tokens: Vec<Option<u64>> = listed
            .iter()
            .filter(|info| info.name == name)
            .map(|info| info.fencing_token)
            .collect();
        assert_eq!(tokens.len(), 1, "one grant listed: {listed:?}");
        tokens[0]
    };
    assert_eq!(
        listed_token(backend_of_another_client(&url).await, name.clone()).await,
        Some(through_server.fencing_token),
        "before an extension, list shows the token the server stored"
    );

    for earlier in [&through_server, &local] {
        assert!(
            !backend.extend(earlier).await.expect("extend"),
            "a grant handed on may not extend"
        );
        assert!(
            !backend.release(earlier).await.expect("release"),
            "a grant handed on may not release"
        );
    }
    assert!(
        backend.extend(&later).await.expect("extend"),
        "the current grant extends"
    );
    assert_eq!(
        listed_token(backend_of_another_client(&url).await, name.clone()).await,
        Some(later.fencing_token),
        "its extension wrote its token"
    );
    assert!(backend.release(&later).await.expect("release"));
    assert!(
        grant(&backend, &name, Claim::Exclusive, LEASE)
            .await
            .is_some_and(|next| next.fencing_token > later.fencing_token),
        "released: the lock is free, with a higher token"
    );
}

#[tokio::test]
async fn a_lease_deleted_on_the_server_is_the_local_holders_loss() {
    let url = url();
    let backend = backend(&url).await;
    let mut connection = raw(&url).await;
    let name = unique("deleted");
    let [_, _, local] = handed_over_twice(&backend, &name).await;
    let exclusive = backend.keys_of(&name).remove(0);
    delete_behind_the_backends_back(&mut connection, &exclusive).await;

    assert!(
        !backend.extend(&local).await.expect("extend"),
        "the extension finds the lease gone"
    );
    assert!(
        !backend.release(&local).await.expect("release"),
        "and the release is refused"
    );
    let next = AcquireRequest::new(
        name.clone(),
        Claim::Exclusive,
        LEASE,
        Holder::this_process(Some("redis-tests")).into(),
    );
    assert!(
        matches!(
            backend
                .hand_overs()
                .expect("hand-overs")
                .hand_over(&local, &next)
                .await
                .expect("hand over"),
            HandOver::NotOurs
        ),
        "nor is a lost grant handed over"
    );
    let other = grant(
        &backend_of_another_client(&url).await,
        &name,
        Claim::Exclusive,
        LEASE,
    )
    .await
    .expect("free");
    assert!(other.fencing_token > local.fencing_token);
}

#[tokio::test]
async fn a_guard_handed_over_without_a_command_reports_a_deleted_key_at_its_next_extension() {
    let url = url();
    let client: LockClient = support::client(&url).await;
    let name = unique("guard");
    let first = client.acquire(&name).await.expect("acquire");
    let (tokens_tx, mut tokens_rx) = tokio::sync::mpsc::unbounded_channel();
    // Two tasks wait behind the first holder; each takes the lock in turn
    // by a hand-over: the second through the server, the third without a
    // command.
    let mut waiters = Vec::new();
    for keeps in [false, true] {
        let client = client.clone();
        let name = name.clone();
        let tokens_tx = tokens_tx.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client.acquire(&name).await.expect("acquire");
            tokens_tx.send(guard.fencing_token()).expect("send");
            if keeps {
                return Some(guard);
            }
            guard.release().await.expect("release");
            None
        }));
    }
    // On this test's one thread, the two run until they wait in the
    // client's queue for the name, which the first holder keeps.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    first.release().await.expect("release");
    let mut held = None;
    for waiter in waiters {
        if let Some(guard) = waiter.await.expect("waiter") {
            held = Some(guard);
        }
    }
    let guard = held.expect("the last waiter keeps the lock");
    let second = tokens_rx.recv().await.expect("second token");
    let third = tokens_rx.recv().await.expect("third token");
    assert_eq!(guard.fencing_token(), third);
    assert_eq!(
        third,
        second + 1,
        "the third took the token after the second's, reserved by the hand-over \
         through the server: it was handed over without a command"
    );

    let exclusive = RedisBackend::open(&url)
        .await
        .expect("open")
        .keys_of(&name)
        .remove(0);
    let mut connection = raw(&url).await;
    delete_behind_the_backends_back(&mut connection, &exclusive).await;
    let reason = tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("the loss is reported at the next extension");
    assert_eq!(
        reason,
        LossReason::Refused,
        "the extension found the key gone"
    );
    assert!(
        !guard.release().await.unwrap_or(false),
        "the lost lease is not released"
    );
}

#[tokio::test]
async fn a_hand_over_run_twice_answers_its_grant_again() {
    // What the cluster driver does when a connection breaks before the
    // answer: the same script, with the same grants, runs a second time.
    for url in [url(), support::cluster_url()] {
        let backend = backend(&url).await;
        let name = unique("twice");
        let first = grant(&backend, &name, Claim::Exclusive, LEASE)
            .await
            .expect("free");
        let next = AcquireRequest::new(
            name.clone(),
            Claim::Exclusive,
            LEASE,
            Holder::this_process(Some("redis-tests")).into(),
        );
        let hand_overs = backend.hand_overs().expect("hand-overs");
        let mut tokens = Vec::new();
        for run in ["first", "second"] {
            match hand_overs.hand_over(&first, &next).await.expect(run) {
                HandOver::Granted { fencing_token, .. } => tokens.push(fencing_token),
                HandOver::NotOurs => panic!("{url}: the {run} run found its own grant another's"),
            }
        }
        assert_eq!(tokens[0], tokens[1], "{url}: one grant, one token");
        let handed = next.granted(tokens[0], distlock_core::backend::GrantState::none());
        assert!(backend.release(&handed).await.expect("release"), "{url}");
    }
}

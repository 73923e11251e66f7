//! What the backend promises about other holders' keys and other names:
//! a stale holder never ends the next holder's grant, and names never
//! collide or reach outside the prefix, whatever they hold.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Backend, GrantState};
use distlock_core::{Claim, Holder, LockKind, LockName, TryOptions};
use distlock_redis::redis;

use distlock_core::testing::ADMIN_LIMIT;
use support::{
    all_keys, assert_listed, backend, client, grant, grant_each, lock_names, raw,
    tokens_of_a_twice_run_attempt, unique, url,
};

#[tokio::test]
async fn a_stale_holders_release_leaves_the_new_holders_key() {
    let url = url();
    let backend = backend(&url).await;
    let name = unique("stale");
    for claim in [Claim::Exclusive, Claim::Shared, Claim::Permit { limit: 1 }] {
        let name = LockName::new(format!("{name}-{}", claim.kind())).unwrap();
        let stale = grant(&backend, &name, claim, Duration::from_millis(100))
            .await
            .expect("granted");
        // Its lease runs out on the server's clock: it leaves the list.
        support::eventually("the stale grant's expiry", || async {
            !backend
                .list(ADMIN_LIMIT)
                .await
                .expect("list")
                .iter()
                .any(|info| info.fencing_token == Some(stale.fencing_token))
        })
        .await;
        let next = grant(&backend, &name, claim, Duration::from_secs(30))
            .await
            .expect("granted after the stale grant expired");
        assert!(next.fencing_token > stale.fencing_token);
        assert!(
            !backend.release(&stale).await.expect("release"),
            "{claim}: the stale holder's release is refused"
        );
        assert!(
            !backend.extend(&stale).await.expect("extend"),
            "{claim}: and so is its extension"
        );
        let intact = format!("{claim}: the new holder's grant is intact");
        assert_listed(&backend, &name, next.fencing_token, &intact).await;
        assert!(backend.release(&next).await.expect("release"));
    }
}

/// The database the name fuzz has to itself; no other test uses it.
const FUZZ_DB: u32 = 15;

#[tokio::test]
async fn odd_names_never_collide_nor_leave_the_prefix() {
    // A logical database of this test's own, so that the keys of the tests
    // running beside it on the same server are not seen as this one's.
    let url = format!("{}/{FUZZ_DB}", url().trim_end_matches('/'));
    let prefix = format!("fuzz-{:08x}:", rand::random::<u32>());
    let backend = backend(&format!("{url}?prefix={prefix}")).await;
    let mut connection = raw(&url).await;
    let before: BTreeSet<String> = all_keys(&mut connection).await.into_iter().collect();

    let mut names = vec![
        "a".to_owned(),
        "A".to_owned(),
        "a ".to_owned(),
        " a".to_owned(),
        "a b".to_owned(),
        "line\r\nbreak".to_owned(),
        "line\nbreak".to_owned(),
        "*".to_owned(),
        "a*".to_owned(),
        "?".to_owned(),
        "[ab]".to_owned(),
        "{}".to_owned(),
        "{a}".to_owned(),
        "{a}b".to_owned(),
        "b{a}".to_owned(),
        "}{".to_owned(),
        "nul\0".to_owned(),
        "nul\0x".to_owned(),
        "\0".to_owned(),
        "ü ☃ $.%".to_owned(),
        "x".repeat(1024),
        format!("{}y", "x".repeat(1023)),
    ];
    // The names of one run of this test are unique to it.
    let run = format!("{:08x}", rand::random::<u32>());
    for name in &mut names {
        if name.len() < 1000 {
            name.push_str(&run);
        }
    }
    let names = lock_names(&names);
    let leases = grant_each(&backend, &names).await;
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    let listed_names: BTreeSet<&LockName> = listed.iter().map(|info| &info.name).collect();
    assert_eq!(
        listed_names,
        names.iter().collect::<BTreeSet<_>>(),
        "every name round-trips exactly through list"
    );
    for (lease, info) in leases.iter().zip(&names) {
        let entry = listed
            .iter()
            .find(|entry| &entry.name == info)
            .expect("listed");
        let kind = match lease.claim {
            Claim::Exclusive => LockKind::Exclusive,
            Claim::Shared => LockKind::Shared,
            Claim::Permit { .. } => LockKind::Semaphore,
        };
        assert_eq!(entry.kind, kind);
        assert_eq!(entry.fencing_token, Some(lease.fencing_token));
    }

    // Every key this made is under the prefix.
    let after: BTreeSet<String> = all_keys(&mut connection).await.into_iter().collect();
    let made: Vec<&String> = after.difference(&before).collect();
    assert!(!made.is_empty());
    for key in &made {
        assert!(key.starts_with(&prefix), "{key:?} is outside the prefix");
    }
    // Each name's keys carry one hash tag, and no two names share one.
    let tags: BTreeSet<&str> = made
        .iter()
        .filter_map(|key| key.strip_prefix(&prefix))
        .filter_map(|rest| rest.split_once('}').map(|(tag, _)| tag))
        .collect();
    assert_eq!(tags.len(), names.len(), "{tags:?}");

    for lease in &leases {
        assert!(backend.release(lease).await.expect("release"));
        assert!(
            !backend
                .force_release(&lease.name, ADMIN_LIMIT)
                .await
                .expect("force")
        );
    }
    let left: BTreeSet<String> = all_keys(&mut connection).await.into_iter().collect();
    for key in left.difference(&before) {
        assert!(
            key.ends_with(":t"),
            "only token counters outlive their grants: {key:?}"
        );
    }
    let _: () = redis::cmd("DEL")
        .arg(left.difference(&before).collect::<Vec<_>>())
        .query_async(&mut connection)
        .await
        .expect("DEL");
}

#[tokio::test]
async fn locks_under_other_prefixes_are_apart() {
    let url = url();
    let a = client(&format!("{url}?prefix=apart-a:")).await;
    let b = client(&format!("{url}?prefix=apart-b:")).await;
    let name = unique("apart");
    let held = a.acquire_with(&name, Duration::from_secs(5)).await.unwrap();
    let also = b
        .try_acquire_with(&name, TryOptions::new())
        .await
        .expect("try")
        .expect("another prefix is another key space");
    assert!(
        !b.list()
            .await
            .unwrap()
            .iter()
            .any(|info| info.fencing_token == Some(held.fencing_token()))
    );
    held.release().await.unwrap();
    also.release().await.unwrap();
}

/// The server's clock now, in µs since the epoch.
async fn server_clock_us(connection: &mut redis::aio::MultiplexedConnection) -> u128 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(connection)
        .await
        .expect("TIME");
    u128::from(seconds) * 1_000_000 + u128::from(micros)
}

/// The keeper watches the server's clock through extensions (to see it
/// step): an extension reports the server's clock, read in its pipeline.
#[tokio::test]
async fn an_extension_reads_the_server_clock() {
    let url = url();
    let backend = backend(&url).await;
    let mut connection = raw(&url).await;
    let lease = grant(
        &backend,
        &unique("clock"),
        Claim::Exclusive,
        Duration::from_secs(30),
    )
    .await
    .expect("granted");
    let before = server_clock_us(&mut connection).await;
    let extended = backend.extend_many(std::slice::from_ref(&lease)).await;
    let after = server_clock_us(&mut connection).await;
    assert!(*extended.outcomes[0].as_ref().expect("extend"));
    let read = extended
        .server_time
        .expect("the server's clock")
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros();
    assert!(
        (before..=after).contains(&read),
        "the clock read {read} µs, outside [{before}, {after}] read around it"
    );
    assert!(backend.release(&lease).await.expect("release"));
}

/// A cluster client sends a script again when its connection broke before
/// the answer: the attempt that runs twice is granted twice, with the
/// token of the one grant it made, never told that its own grant holds
/// the name against it. Each kind, on one server and on the cluster.
#[tokio::test]
async fn an_attempt_run_again_is_answered_with_its_own_grant() {
    for url in [url(), support::cluster_url()] {
        let backend = backend(&url).await;
        for claim in [Claim::Exclusive, Claim::Shared, Claim::Permit { limit: 2 }] {
            let name = unique(&format!("again-{}", claim.kind()));
            let request = AcquireRequest::new(
                name.clone(),
                claim,
                Duration::from_secs(30),
                Holder::this_process(Some("redis-tests")).into(),
            );
            let on = format!("{claim:?} on {url}");
            let tokens = tokens_of_a_twice_run_attempt(&backend, &request, &on).await;
            assert_eq!(
                tokens[0], tokens[1],
                "{claim:?} on {url}: one grant, one token"
            );
            let listed = backend.list(ADMIN_LIMIT).await.expect("list");
            assert_eq!(
                listed.iter().filter(|info| info.name == name).count(),
                1,
                "{claim:?} on {url}: one grant listed"
            );
            let lease = request.granted(tokens[0], GrantState::none());
            assert!(backend.release(&lease).await.expect("release"));
        }
    }
}

/// Tokens are `max(previous + 1, the server's clock in µs)`: a counter
/// ahead of the clock (as after the clock stepped back) is counted on from
/// by the grant on a free name, which the acquire script makes first of
/// all, and the counter keeps its expiry.
#[tokio::test]
async fn a_counter_ahead_of_the_clock_is_counted_on_from() {
    let url = url();
    let backend = backend(&url).await;
    let mut connection = raw(&url).await;
    let name = unique("ahead");
    let counter = backend.keys_of(&name).remove(4);
    // About eleven days ahead of the server's clock.
    let now = u64::try_from(server_clock_us(&mut connection).await).expect("µs fit in u64");
    let ahead = now + 1_000_000_000_000;
    let () = redis::cmd("SET")
        .arg(&counter)
        .arg(ahead)
        .query_async(&mut connection)
        .await
        .expect("SET");
    for n in 1..=2 {
        let lease = grant(&backend, &name, Claim::Exclusive, Duration::from_secs(30))
            .await
            .expect("granted");
        assert_eq!(lease.fencing_token, ahead + n, "grant {n}");
        let stored: u64 = redis::cmd("GET")
            .arg(&counter)
            .query_async(&mut connection)
            .await
            .expect("GET");
        assert_eq!(stored, ahead + n, "the counter after grant {n}");
        let left: i64 = redis::cmd("PTTL")
            .arg(&counter)
            .query_async(&mut connection)
            .await
            .expect("PTTL");
        assert!(left > 0, "the counter expires after grant {n}: {left}");
        let told = format!("grant {n} is stored with its token");
        assert_listed(&backend, &name, ahead + n, &told).await;
        assert!(backend.release(&lease).await.expect("release"));
    }
}

//! Cluster mode on the 3-master cluster `scripts/test` starts
//! (`DISTLOCK_TEST_REDIS_CLUSTER_URL`): odd names stay in one slot each and
//! under the prefix, leases on every master are extended in one call, and
//! hand-overs without a command work as on one server. On a cluster of
//! its own, a slot that moves while its lock is held loses nothing and
//! grants nothing twice.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use distlock_core::backend::Backend;
use distlock_core::{Claim, LockClient, LockName, LockOptions, TryOptions};
use distlock_redis::{Mode, RedisBackend, redis};

use distlock_core::testing::ADMIN_LIMIT;
use support::{
    assert_listed, backend, cluster_url, grant, grant_each, hand_over, lock_names, unique,
};

/// The URL with `?prefix=` added.
fn with_prefix(url: &str, prefix: &str) -> String {
    format!("{url}&prefix={prefix}")
}

/// One master: its address, its node id, and a plain connection to it.
struct Master {
    host: String,
    port: u16,
    id: String,
    connection: redis::aio::MultiplexedConnection,
}

/// Every master of the cluster, each with the slot ranges it serves.
async fn masters(url: &str) -> Vec<Master> {
    let seed = url
        .trim_start_matches("redis://")
        .split(['?', ','])
        .next()
        .expect("a seed");
    let mut connection = connect(&format!("redis://{seed}")).await;
    let mut seen = BTreeSet::new();
    let mut masters = Vec::new();
    for range in slot_ranges(&mut connection).await {
        let (host, port, id) = (range.host, range.port, range.id);
        if seen.insert(id.clone()) {
            masters.push(Master {
                connection: connect(&format!("redis://{host}:{port}")).await,
                host,
                port,
                id,
            });
        }
    }
    masters
}

/// One range of `CLUSTER SLOTS`, with its master.
struct SlotRange {
    first: u16,
    last: u16,
    host: String,
    port: u16,
    id: String,
}

/// `CLUSTER SLOTS`: each range's first and last slot, then its master as
/// host, port, id (and, from Redis 7, a map of more).
async fn slot_ranges(connection: &mut redis::aio::MultiplexedConnection) -> Vec<SlotRange> {
    let ranges: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(connection)
        .await
        .expect("CLUSTER SLOTS");
    ranges
        .into_iter()
        .map(|range| {
            let number =
                |value: &redis::Value| -> i64 { redis::from_redis_value(value).expect("a number") };
            let master: Vec<redis::Value> = redis::from_redis_value(&range[2]).expect("a master");
            SlotRange {
                first: u16::try_from(number(&range[0])).expect("a slot"),
                last: u16::try_from(number(&range[1])).expect("a slot"),
                host: redis::from_redis_value(&master[0]).expect("a host"),
                port: u16::try_from(number(&master[1])).expect("a port"),
                id: redis::from_redis_value(&master[2]).expect("an id"),
            }
        })
        .collect()
}

async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("a redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// Every key on every master.
async fn all_keys(masters: &mut [Master]) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for master in masters {
        keys.extend(support::all_keys(&mut master.connection).await);
    }
    keys
}

/// The slot of `key`, as the server computes it.
async fn key_slot(connection: &mut redis::aio::MultiplexedConnection, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(connection)
        .await
        .expect("CLUSTER KEYSLOT")
}

#[tokio::test]
async fn the_url_opens_cluster_mode_from_one_seed_or_several() {
    let url = cluster_url();
    let seeds = backend(&url).await;
    assert_eq!(seeds.config().mode, Mode::Cluster);
    let first = url.split(',').next().expect("a seed");
    let one = backend(&format!("{first}?mode=cluster")).await;
    let name = unique("seeds");
    let lease = grant(&seeds, &name, Claim::Exclusive, Duration::from_secs(30))
        .await
        .expect("granted");
    assert!(
        grant(&one, &name, Claim::Exclusive, Duration::from_secs(30))
            .await
            .is_none(),
        "one seed reaches the same cluster, where the lock is held"
    );
    let info = one.server_info(ADMIN_LIMIT).await.expect("server info");
    let version = info.version.expect("a version");
    assert!(version.contains("masters in cluster mode"), "{version}");
    assert!(seeds.release(&lease).await.expect("release"));
}

#[tokio::test]
async fn odd_names_keep_one_slot_each_and_stay_under_the_prefix() {
    let url = cluster_url();
    let prefix = format!("cluster-fuzz-{:08x}:", rand::random::<u32>());
    let backend = backend(&with_prefix(&url, &prefix)).await;
    let mut masters = masters(&url).await;
    let before = all_keys(&mut masters).await;

    let run = format!("{:08x}", rand::random::<u32>());
    let mut names: Vec<String> = [
        "a",
        "A",
        "a ",
        " a",
        "a b",
        "line\r\nbreak",
        "line\nbreak",
        "*",
        "a*",
        "?",
        "[ab]",
        "{}",
        "{",
        "}",
        "}{",
        "{a}",
        "{a}b",
        "b{a}",
        "{{a}}",
        "{a}{b}",
        "x{}y",
        "nul\0",
        "nul\0x",
        "\0",
        "ü ☃ $.%",
    ]
    .iter()
    .map(|name| format!("{name}{run}"))
    .collect();
    // Names that start with a brace steer the slot if the tag is theirs.
    names.extend([
        format!("{{{run}}}"),
        format!("{{{run}}}:x"),
        "x".repeat(1024),
    ]);
    names.push(format!("{}y", "x".repeat(1023)));
    let names = lock_names(&names);

    let leases = grant_each(&backend, &names).await;
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    let listed: BTreeMap<&LockName, Option<u64>> = listed
        .iter()
        .map(|info| (&info.name, info.fencing_token))
        .collect();
    let granted: BTreeMap<&LockName, Option<u64>> = leases
        .iter()
        .map(|lease| (&lease.name, Some(lease.fencing_token)))
        .collect();
    assert_eq!(
        listed, granted,
        "every name round-trips through list, with its token"
    );

    // Every key made is under the prefix, whatever other tests make
    // beside this one under theirs.
    let after = all_keys(&mut masters).await;
    let made: BTreeSet<&String> = after
        .difference(&before)
        .filter(|key| !key.starts_with("distlock:") && !key.starts_with("cluster-test-"))
        .collect();
    for key in &made {
        assert!(key.starts_with(&prefix), "{key:?} is outside the prefix");
    }
    // Every key of a name is in one slot, which its tag alone decides;
    // no two names share a tag.
    let mut tags = BTreeSet::new();
    for name in &names {
        let keys = backend.keys_of(name);
        let tag = keys[0]
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_prefix('{'))
            .and_then(|rest| rest.split_once('}'))
            .map(|(tag, _)| tag.to_owned())
            .expect("a key of a tag");
        assert!(
            tag.len() == 64 && tag.bytes().all(|byte| byte.is_ascii_hexdigit()),
            "{name:?}: the tag is a SHA-256 in hex, not the name: {tag}"
        );
        let connection = &mut masters[0].connection;
        let slot = key_slot(connection, &tag).await;
        for key in &keys {
            assert_eq!(key_slot(connection, key).await, slot, "{name:?}: {key}");
        }
        assert!(
            keys.iter().any(|key| made.contains(key)),
            "{name:?}'s keys are there"
        );
        assert!(
            tags.insert(tag),
            "{name:?} shares its tag with another name"
        );
    }
    let mine = made.iter().filter(|key| !key.ends_with(":t")).count();
    assert!(
        mine >= names.len(),
        "{mine} grant keys for {} names",
        names.len()
    );

    for lease in &leases {
        assert!(backend.release(lease).await.expect("release"));
        assert!(
            !backend
                .force_release(&lease.name, ADMIN_LIMIT)
                .await
                .expect("force")
        );
    }
    let left = all_keys(&mut masters).await;
    let left: Vec<&String> = left
        .difference(&before)
        .filter(|key| key.starts_with(&prefix))
        .collect();
    for key in &left {
        // A release is remembered for its call's timeout, should the
        // driver send it again (see the cluster_resent tests).
        assert!(
            key.ends_with(":t") || key.ends_with(":done"),
            "only token counters, and releases for a call's timeout, outlive their grants: \
             {key:?}"
        );
    }
    // They go, each from its own master.
    for key in left {
        for master in &mut masters {
            let _: redis::RedisResult<i64> = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut master.connection)
                .await;
        }
    }
}

#[tokio::test]
async fn leases_on_every_master_are_extended_together() {
    let url = cluster_url();
    let backend = backend(&with_prefix(&url, "cluster-test-extend:")).await;
    let mut masters = masters(&url).await;
    assert!(masters.len() >= 3, "a cluster of three masters");
    // Names until every master holds some.
    let mut leases = Vec::new();
    let mut on: BTreeMap<String, usize> = BTreeMap::new();
    while on.len() < masters.len() || on.values().any(|count| *count < 2) {
        let name = unique("extend");
        let key = backend.keys_of(&name).remove(0);
        let slot = key_slot(&mut masters[0].connection, &key).await;
        let owner = owner_of(&mut masters, slot).await;
        *on.entry(owner).or_default() += 1;
        let claim = if leases.len() % 2 == 0 {
            Claim::Exclusive
        } else {
            Claim::Shared
        };
        leases.push(
            grant(&backend, &name, claim, Duration::from_secs(30))
                .await
                .expect("granted"),
        );
    }
    let extended = backend.extend_many(&leases).await;
    for outcome in &extended.outcomes {
        assert!(outcome.as_ref().expect("extend"), "every lease is ours");
    }
    assert_eq!(extended.outcomes.len(), leases.len());
    assert!(
        extended.server_time.is_none(),
        "each master has its own clock: none is reported"
    );
    // A lease that is no longer ours is refused, beside the others.
    let gone = leases.pop().expect("a lease");
    assert!(backend.release(&gone).await.expect("release"));
    leases.push(gone);
    let extended = backend.extend_many(&leases).await.outcomes;
    let (last, rest) = extended.split_last().expect("outcomes");
    assert!(
        !last.as_ref().expect("extend"),
        "the released lease is refused"
    );
    assert!(
        rest.iter()
            .all(|outcome| *outcome.as_ref().expect("extend"))
    );
    for lease in &leases[..leases.len() - 1] {
        assert!(backend.release(lease).await.expect("release"));
    }
}

/// The id of the master serving `slot`, by `CLUSTER SLOTS`.
async fn owner_of(masters: &mut [Master], slot: u16) -> String {
    slot_ranges(&mut masters[0].connection)
        .await
        .into_iter()
        .find(|range| (range.first..=range.last).contains(&slot))
        .map(|range| range.id)
        .expect("every slot is served")
}

/// Options for the slot move: the keeper extends every 500 ms, and each
/// call may take 2 s. While the slot moves, Redis answers TRYAGAIN to each
/// of the name's scripts, which the driver retries until the call's
/// timeout; the move below lasts two calls' timeouts, and some
/// milliseconds, well within the lease less its safety margin.
fn options() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(12))
        .extend_every(Duration::from_millis(500))
        .operation_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// One attempt of `other` and one extension of `guard`, together, while
/// the slot is in the middle of its move: the attempt is no grant (it is
/// refused, or answered that the lock is held), and the extension is not
/// refused (it succeeds, or fails for now).
async fn try_both_mid_move(
    other: &LockClient,
    name: &LockName,
    guard: &distlock_core::LockGuard,
    phase: &str,
) {
    let (attempt, extension) = tokio::join!(
        other.try_acquire_with(name, TryOptions::new()),
        guard.extend()
    );
    assert!(
        !matches!(attempt, Ok(Some(_))),
        "{phase}: the other client was granted a held lock"
    );
    if let Err(error) = extension {
        assert!(error.is_transient(), "{phase}: {error}");
    }
    assert!(!guard.is_lost(), "{phase}: the holder lost its lock");
}

#[tokio::test]
async fn a_slot_moves_while_its_lock_is_held() {
    // A cluster of its own: while a slot moves, Redis answers TRYAGAIN to
    // every script on it, which would reach other tests' names in that
    // slot on the shared cluster.
    let cluster = support::cluster::OwnCluster::start(3, false, None, &[]).await;
    let url = with_prefix(&cluster.url(), "cluster-test-move:");
    let holder = LockClient::new(Arc::new(backend(&url).await), options());
    let other = LockClient::new(Arc::new(backend(&url).await), options());
    let name = unique("move");
    let guard = Arc::new(holder.acquire(&name).await.expect("acquire"));
    let token = guard.fencing_token();

    // Another client tries all along; it must never be granted.
    let stop = Arc::new(AtomicBool::new(false));
    let (tries, granted) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let contender = {
        let (other, name, stop) = (other.clone(), name.clone(), stop.clone());
        let (tries, granted) = (tries.clone(), granted.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                // An error (the slot is moving) is no grant.
                if let Ok(Some(guard)) = other.try_acquire_with(&name, TryOptions::new()).await {
                    granted.fetch_add(1, Ordering::AcqRel);
                    let _ = guard.release().await;
                }
                tries.fetch_add(1, Ordering::AcqRel);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    // The holder extends all along too, beside its keeper; while the slot
    // moves, an extension may be refused for now (TRYAGAIN), never as
    // lost.
    let extensions = Arc::new(AtomicUsize::new(0));
    let extender = {
        let (guard, stop, extensions) = (guard.clone(), stop.clone(), extensions.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                if guard.extend().await.is_ok() {
                    extensions.fetch_add(1, Ordering::AcqRel);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let mut masters = masters(&url).await;
    let key = RedisBackend::open(&url)
        .await
        .expect("open")
        .keys_of(&name)
        .remove(0);
    let slot = key_slot(&mut masters[0].connection, &key).await;
    let source_id = owner_of(&mut masters, slot).await;
    let source = masters
        .iter()
        .position(|master| master.id == source_id)
        .expect("the source");
    let target = (source + 1) % masters.len();
    let (target_id, target_host, target_port) = (
        masters[target].id.clone(),
        masters[target].host.clone(),
        masters[target].port,
    );

    // The move, as redis-cli --cluster reshard makes it: the target
    // imports, the source migrates, the slot's keys go over, and every
    // master learns the slot's new owner.
    let setslot = |state: &str, id: &str| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
        cmd
    };
    let _: () = setslot("IMPORTING", &source_id)
        .query_async(&mut masters[target].connection)
        .await
        .expect("IMPORTING");
    let _: () = setslot("MIGRATING", &target_id)
        .query_async(&mut masters[source].connection)
        .await
        .expect("MIGRATING");
    try_both_mid_move(&other, &name, &guard, "migrating, keys at the source").await;
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query_async(&mut masters[source].connection)
            .await
            .expect("GETKEYSINSLOT");
        if keys.is_empty() {
            break;
        }
        let _: () = redis::cmd("MIGRATE")
            .arg(&target_host)
            .arg(target_port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query_async(&mut masters[source].connection)
            .await
            .expect("MIGRATE");
    }
    try_both_mid_move(&other, &name, &guard, "migrating, keys at the target").await;
    for master in &mut masters {
        let _: () = setslot("NODE", &target_id)
            .query_async(&mut master.connection)
            .await
            .expect("SETSLOT NODE");
    }
    assert_eq!(
        owner_of(&mut masters, slot).await,
        target_id,
        "the slot moved"
    );

    // Extensions go on at the new master, and the contender still finds
    // the lock held there.
    let (tried, extended) = (
        tries.load(Ordering::Acquire),
        extensions.load(Ordering::Acquire),
    );
    support::eventually("tries and extensions at the new master", || async {
        tries.load(Ordering::Acquire) > tried + 5
            && extensions.load(Ordering::Acquire) > extended + 5
    })
    .await;
    guard
        .extend()
        .await
        .expect("an extension at the new master");
    assert!(!guard.is_lost(), "the holder lost nothing");
    stop.store(true, Ordering::Release);
    contender.await.expect("the contender");
    extender.await.expect("the extender");
    assert_eq!(granted.load(Ordering::Acquire), 0, "no double grant");

    let guard = Arc::into_inner(guard).expect("the only holder of the guard");
    assert!(guard.release().await.expect("release"), "released cleanly");
    let next = other
        .try_acquire_with(&name, TryOptions::new())
        .await
        .expect("try")
        .expect("free once released");
    assert!(next.fencing_token() > token, "tokens go on increasing");
    next.release().await.expect("release");
}

#[tokio::test]
async fn hand_overs_without_a_command_act_for_the_stored_grant_on_its_master() {
    let url = cluster_url();
    let holder = backend(&url).await;
    let name = unique("cluster-quiet");
    let lease = Duration::from_secs(30);
    let first = grant(&holder, &name, Claim::Exclusive, lease)
        .await
        .expect("free");
    let through_server = hand_over(&holder, &first).await;
    let local = hand_over(&holder, &through_server).await;
    let later = hand_over(&holder, &local).await;
    assert!(first.fencing_token < through_server.fencing_token);
    assert!(through_server.fencing_token < local.fencing_token);
    assert!(local.fencing_token < later.fencing_token);
    let other = backend(&url).await;
    assert!(
        grant(&other, &name, Claim::Exclusive, lease)
            .await
            .is_none(),
        "the lock is held all along"
    );

    let extended = holder
        .extend_many(&[through_server.clone(), local.clone(), later.clone()])
        .await
        .outcomes;
    let extended: Vec<bool> = extended
        .into_iter()
        .map(|outcome| outcome.expect("extend"))
        .collect();
    assert_eq!(
        extended,
        [false, false, true],
        "only the current grant extends, under the stored identity"
    );
    assert_listed(
        &other,
        &name,
        later.fencing_token,
        "its extension wrote its token",
    )
    .await;
    assert!(!holder.release(&local).await.expect("release"));
    assert!(holder.release(&later).await.expect("release"));
    let next = grant(&other, &name, Claim::Exclusive, lease)
        .await
        .expect("free once released");
    assert!(next.fencing_token > later.fencing_token);
    assert!(other.release(&next).await.expect("release"));
}

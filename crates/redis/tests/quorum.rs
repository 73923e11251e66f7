//! Quorum mode on three redis-server processes of the test's own, which
//! the tests kill and restart without persistence; and `list`, forced
//! release and the kinds on the shared quorum servers.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{Backend, FeatureState};
use distlock_core::testing::assert_still_held;
use distlock_core::{
    AcquireOptions, Claim, Error, LockClient, LockKind, LockName, LossReason, TryOptions,
};
use distlock_redis::{RedisBackend, redis};

use distlock_core::testing::ADMIN_LIMIT;
use support::{OwnServer, backend, eventually, grant, options, raw, unique};

/// Three servers of the test's own.
struct Cluster {
    servers: Vec<OwnServer>,
}

impl Cluster {
    /// Three servers, each as if in service for longer than any lease:
    /// their epochs (when each came back empty) are long past, so that
    /// each one's vote counts at once (see [`Cluster::start_new`]).
    async fn start() -> Self {
        Self::start_of(3).await
    }

    /// `count` servers in service, as [`Cluster::start`] starts three.
    async fn start_of(count: usize) -> Self {
        let cluster = Self::start_new_of(count).await;
        for server in &cluster.servers {
            let mut connection = raw(&server.url()).await;
            redis::cmd("SET")
                .arg("distlock:epoch")
                .arg(0)
                .query_async::<()>(&mut connection)
                .await
                .expect("SET");
        }
        cluster
    }

    /// Three servers just started, as a new deployment's: each abstains
    /// for a lease after it is first asked, and a grant counts its vote
    /// meanwhile only when every server granted.
    async fn start_new() -> Self {
        Self::start_new_of(3).await
    }

    /// `count` servers just started, as [`Cluster::start_new`] starts
    /// three.
    async fn start_new_of(count: usize) -> Self {
        let mut servers = Vec::new();
        for _ in 0..count {
            servers.push(OwnServer::start(&[]).await);
        }
        Self { servers }
    }

    fn url(&self) -> String {
        let hosts: Vec<String> = self
            .servers
            .iter()
            .map(|server| server.url().trim_start_matches("redis://").to_owned())
            .collect();
        format!("redis://{}?mode=quorum", hosts.join(","))
    }

    async fn backend(&self) -> RedisBackend {
        backend(&self.url()).await
    }

    async fn client(&self) -> LockClient {
        LockClient::new(Arc::new(self.backend().await), options())
    }
}

/// The shared quorum servers' URL, or a panic that says how to get one.
fn shared_url() -> String {
    std::env::var("DISTLOCK_TEST_REDIS_QUORUM_URL").unwrap_or_else(|_| {
        panic!(
            "DISTLOCK_TEST_REDIS_QUORUM_URL is not set: run the tests with scripts/test, which \
             starts redis"
        )
    })
}

/// The URL of each server of a quorum URL, in its order.
fn server_urls(quorum_url: &str) -> Vec<String> {
    let hosts = quorum_url
        .trim_start_matches("redis://")
        .split('?')
        .next()
        .unwrap_or_default();
    hosts
        .split(',')
        .map(|host| format!("redis://{host}"))
        .collect()
}

/// Whether `key` exists on the server at `url`.
async fn exists(url: &str, key: &str) -> bool {
    let mut connection = raw(url).await;
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(&mut connection)
        .await
        .expect("EXISTS")
        == 1
}

/// Waits two full leases (the test options' lease is 2 s), so that every
/// grant that was not extended has expired on its server.
async fn two_leases() {
    tokio::time::sleep(Duration::from_secs(4)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_of_three_keeps_the_lock_and_its_extensions() {
    let mut cluster = Cluster::start().await;
    let holder = cluster.client().await;
    let other = cluster.client().await;
    let name = unique("minority");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("acquire");
    let key = cluster.backend().await.keys_of(&name).remove(0);

    cluster.servers[0].kill();
    two_leases().await;
    assert_still_held(&guard, &other).await;
    // Without extensions the copies would be gone after two leases.
    for server in &cluster.servers[1..] {
        assert!(
            exists(&server.url(), &key).await,
            "extended on {}",
            server.url()
        );
    }
    assert!(
        guard.release().await.expect("release"),
        "released on 2 of 3"
    );
    for server in &cluster.servers[1..] {
        assert!(!exists(&server.url(), &key).await, "released everywhere");
    }

    // A new grant needs 2 of 3, and 2 of 3 are there.
    let again = other
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("2 of 3 grant");
    assert!(again.release().await.expect("release"));
}

/// The value of `key` on the server at `url`, if it is there.
async fn get(url: &str, key: &str) -> Option<String> {
    let mut connection = raw(url).await;
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut connection)
        .await
        .expect("GET")
}

/// Sets `key` to `value` on the server at `url` for a minute, as another
/// client's grant (or a stray key) would be.
async fn set(url: &str, key: &str, value: &str) {
    let mut connection = raw(url).await;
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(60_000)
        .query_async::<()>(&mut connection)
        .await
        .expect("SET");
}

/// What a reader's copy on the server at `url` stores for grant `id`:
/// `<token>:<record>`, if the server holds it as a live reader of the
/// name whose keys are `keys` (`keys_of`'s order).
async fn reader_copy(url: &str, keys: &[String], id: &str) -> Option<String> {
    let mut connection = raw(url).await;
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(&keys[1])
        .arg(id)
        .query_async(&mut connection)
        .await
        .expect("ZSCORE");
    score?;
    redis::cmd("HGET")
        .arg(&keys[2])
        .arg(id)
        .query_async(&mut connection)
        .await
        .expect("HGET")
}

/// Issue 42: a writer and a reader held all along while each of `count`
/// servers restarts without persistence in turn (each forgets its
/// copies). Between restarts the holder's extensions re-create the copies
/// the restarted server lost, so that no restart leaves the lock on fewer
/// servers than the one before: after each, nobody else is granted, the
/// holder never reports a loss, and the copies come back, with the
/// holder's identity and token; at the end every server holds both, as
/// the holder's, though every server restarted. Without the mending, the
/// second restart would leave one copy of three, and the holder would
/// lose the lock at its next extension.
async fn restarts_of_each_server_in_turn_keep_the_lock(count: usize) {
    let mut cluster = Cluster::start_of(count).await;
    let holder = cluster.client().await;
    let other = cluster.client().await;
    let name = unique("restart-each");
    let readers = unique("restart-each-readers");
    let writer = holder
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("acquire");
    let reader = holder
        .acquire_with(
            &readers,
            AcquireOptions::new()
                .shared()
                .timeout(Duration::from_secs(10)),
        )
        .await
        .expect("a reader");
    let backend = cluster.backend().await;
    let key = backend.keys_of(&name).remove(0);
    let reader_keys = backend.keys_of(&readers);
    // A grant is decided once a majority granted; the other copies follow.
    let urls: Vec<String> = cluster.servers.iter().map(OwnServer::url).collect();
    for url in &urls {
        eventually("a writer's copy on every server", || exists(url, &key)).await;
        eventually("a reader's copy on every server", || {
            exists(url, &reader_keys[1])
        })
        .await;
    }
    // Each copy is `<id>:<token>:<record>`; a copy decided after the
    // grant carries the grant's token, a late one its server's own.
    let copy = get(&urls[0], &key).await.expect("a copy");
    let (id, rest) = copy.split_once(':').expect("an id");
    let (_, record) = rest.split_once(':').expect("a token");
    let writers_copy = format!("{id}:{}:{record}", writer.fencing_token());
    let mut connection = raw(&urls[0]).await;
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&reader_keys[1])
        .arg(0)
        .arg(-1)
        .query_async(&mut connection)
        .await
        .expect("ZRANGE");
    let [reader_id] = &members[..] else {
        panic!("one reader: {members:?}")
    };
    let stored = reader_copy(&urls[0], &reader_keys, reader_id)
        .await
        .expect("the reader's copy");
    let (_, reader_record) = stored.split_once(':').expect("a token");
    let readers_copy = format!("{}:{reader_record}", reader.fencing_token());

    let no_second_grant = |after: String| {
        let (other, name, readers) = (&other, &name, &readers);
        async move {
            assert!(
                other.try_acquire(name).await.expect("try").is_none(),
                "the writer's lock granted twice, {after}"
            );
            assert!(
                other.try_acquire(readers).await.expect("try").is_none(),
                "a writer granted beside the reader, {after}"
            );
        }
    };
    for (at, url) in urls.iter().enumerate() {
        // A key of no lock, which no extension re-creates: its absence
        // shows that the restart forgot the server's data.
        set(url, "forgotten", "by the restart").await;
        cluster.servers[at].restart().await;
        assert!(
            !exists(url, "forgotten").await,
            "server {at} came back empty"
        );
        assert!(!writer.is_lost() && !reader.is_lost(), "restart {at}");
        no_second_grant(format!("right after server {at} restarted")).await;
        eventually("the writer's copy re-created", || async {
            get(url, &key).await.as_deref() == Some(writers_copy.as_str())
        })
        .await;
        eventually("the reader's copy re-created", || async {
            reader_copy(url, &reader_keys, reader_id).await.as_deref()
                == Some(readers_copy.as_str())
        })
        .await;
        assert!(!writer.is_lost() && !reader.is_lost(), "restart {at}");
        no_second_grant(format!("once server {at} had its copies back")).await;
    }
    for url in &urls {
        assert_eq!(
            get(url, &key).await.as_deref(),
            Some(writers_copy.as_str()),
            "the holder's writer on {url}"
        );
        assert_eq!(
            reader_copy(url, &reader_keys, reader_id).await.as_deref(),
            Some(readers_copy.as_str()),
            "the holder's reader on {url}"
        );
    }
    assert!(!writer.is_lost() && !reader.is_lost());
    assert!(writer.release().await.expect("release"));
    assert!(reader.release().await.expect("release"));
    for url in &urls {
        assert!(!exists(url, &key).await, "released on {url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_of_each_of_three_servers_in_turn_keep_the_lock() {
    restarts_of_each_server_in_turn_keep_the_lock(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_of_each_of_five_servers_in_turn_keep_the_lock() {
    restarts_of_each_server_in_turn_keep_the_lock(5).await;
}

/// A copy is re-created only where nothing holds the name: another
/// client's copy on a restarted server is left as it is, though the
/// holder's extension (two of three) succeeds; once it is gone, the next
/// extension re-creates the holder's copy there, with its token, and
/// raises the name's counter there, which the restart lost, to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_another_client_took_on_a_restarted_server_is_left_alone() {
    let mut cluster = Cluster::start().await;
    let backend = cluster.backend().await;
    let name = unique("mend-foreign");
    let lease = grant(&backend, &name, Claim::Exclusive, Duration::from_secs(30))
        .await
        .expect("granted");
    let key = backend.keys_of(&name).remove(0);
    let urls: Vec<String> = cluster.servers.iter().map(OwnServer::url).collect();
    for url in &urls {
        eventually("a copy on every server", || exists(url, &key)).await;
    }
    let foreign = "another client's copy";

    cluster.servers[0].restart().await;
    set(&urls[0], &key, foreign).await;
    assert!(
        backend.extend(&lease).await.expect("extend"),
        "extended on two of three"
    );
    assert_eq!(
        get(&urls[0], &key).await.as_deref(),
        Some(foreign),
        "another client's copy is not overwritten"
    );

    let mut connection = raw(&urls[0]).await;
    redis::cmd("DEL")
        .arg(&key)
        .query_async::<()>(&mut connection)
        .await
        .expect("DEL");
    assert!(backend.extend(&lease).await.expect("extend"));
    // As the holder's copies are, `<id>:<token>:<record>`, decided: with
    // the grant's token (a copy that came in after the grant was decided
    // keeps its server's own, marked `~`).
    let ours = get(&urls[1], &key).await.expect("the holder's copy");
    let (id, rest) = ours.split_once(':').expect("an id");
    let (_, record) = rest.split_once(':').expect("a token");
    assert_eq!(
        get(&urls[0], &key).await,
        Some(format!("{id}:{}:{record}", lease.fencing_token)),
        "re-created where nothing held the name, with the grant's token"
    );
    // The restart lost the name's counter too, and nothing but the mend
    // wrote it since: it is back at the grant's token, so that a later
    // grant there issues more.
    let counter = backend.keys_of(&name).remove(4);
    let restored = get(&urls[0], &counter)
        .await
        .and_then(|counter| counter.parse::<u64>().ok());
    assert!(
        restored.is_some_and(|restored| restored >= lease.fencing_token),
        "the counter raised to {}: {restored:?}",
        lease.fencing_token
    );
    assert!(backend.release(&lease).await.expect("release"));
}

/// A lease that no majority extends is not mended: with two servers of
/// three restarted at once, the holder's extension is refused, and the
/// copies are not re-created on the two, which are free for others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_no_majority_extends_is_not_mended() {
    let mut cluster = Cluster::start().await;
    let backend = cluster.backend().await;
    let name = unique("mend-refused");
    let lease = grant(&backend, &name, Claim::Exclusive, Duration::from_secs(30))
        .await
        .expect("granted");
    let key = backend.keys_of(&name).remove(0);
    let urls: Vec<String> = cluster.servers.iter().map(OwnServer::url).collect();
    for url in &urls {
        eventually("a copy on every server", || exists(url, &key)).await;
    }

    cluster.servers[0].restart().await;
    cluster.servers[1].restart().await;
    assert!(
        !backend.extend(&lease).await.expect("extend"),
        "one copy of three is no majority"
    );
    for url in &urls[..2] {
        assert!(!exists(url, &key).await, "not re-created on {url}");
    }
}

/// Issue 38, finding 10: a grant that reached two servers of three (the
/// third still held a copy of an earlier grant, whose release was on its
/// way) must not be given to another client when one of the two restarts
/// empty: the restarted server's vote and the third's would make a
/// majority that shares no server with the holder's last copy. The
/// restarted server abstains for a lease after it comes back; grants
/// that need its vote wait for that, and names the other two can grant
/// alone still are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_came_back_empty_does_not_vote_for_a_lease_so_no_lock_is_granted_twice() {
    const LEASE: Duration = Duration::from_secs(3);
    let mut cluster = Cluster::start_new().await;
    let holder = cluster.backend().await;
    // A deployment that has served for a lease: a first grant marks when
    // each server came into service (all three granted it, so it counted).
    let first = unique("in-service");
    let lease = grant(&holder, &first, Claim::Exclusive, LEASE)
        .await
        .expect("every server grants a new deployment's first attempt");
    assert!(holder.release(&lease).await.expect("release"));
    tokio::time::sleep(LEASE).await;

    let name = unique("restarted-empty");
    let key = holder.keys_of(&name).remove(0);
    let third = cluster.servers[2].url();
    let mut stale = raw(&third).await;
    redis::cmd("SET")
        .arg(&key)
        .arg("an earlier grant's copy, its release on the way")
        .arg("PX")
        .arg(60_000)
        .query_async::<()>(&mut stale)
        .await
        .expect("SET");
    let granted_at = std::time::Instant::now();
    let held = grant(&holder, &name, Claim::Exclusive, LEASE)
        .await
        .expect("the first two servers grant");
    redis::cmd("DEL")
        .arg(&key)
        .query_async::<()>(&mut stale)
        .await
        .expect("DEL");
    let second = cluster.servers[1].url();
    assert!(
        exists(&second, &key).await,
        "the holder's copy on the second"
    );

    cluster.servers[0].restart().await;
    let other = cluster.backend().await;
    let asked_at = std::time::Instant::now();
    let twice = grant(&other, &name, Claim::Exclusive, LEASE).await;
    assert!(
        granted_at.elapsed() < LEASE - LEASE / 10,
        "the attempt was made while the holder's lease was valid (took {:?})",
        granted_at.elapsed()
    );
    assert!(
        exists(&second, &key).await,
        "the holder's copy on the second server is still there"
    );
    assert!(
        twice.is_none(),
        "granted twice: to the holder (token {}, on the second server) and again (token {}) by \
         the server that came back empty and the third",
        held.fencing_token,
        twice.as_ref().map_or(0, |lease| lease.fencing_token)
    );
    // The copies that attempt made were rolled back.
    let back = cluster.servers[0].url();
    eventually("the partial grant rolled back", || async {
        !exists(&back, &key).await && !exists(&third, &key).await
    })
    .await;

    // While it abstains, a name the other two grant is granted.
    let elsewhere = unique("elsewhere");
    let lease = grant(&other, &elsewhere, Claim::Exclusive, LEASE)
        .await
        .expect("the two servers that kept their data grant");
    assert!(other.release(&lease).await.expect("release"));

    // Without the second server, the name waits for the abstention to end
    // (a lease after the restarted server was first asked), and is then
    // granted by the other two, with a larger token.
    cluster.servers[1].kill();
    let mut again = None;
    while again.is_none() {
        assert!(
            asked_at.elapsed() < LEASE * 3,
            "granted once the lease passed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        again = grant(&other, &name, Claim::Exclusive, LEASE).await;
    }
    assert!(
        asked_at.elapsed() >= LEASE - Duration::from_millis(100),
        "not before the restarted server abstained for a lease: {:?}",
        asked_at.elapsed()
    );
    let again = again.expect("granted");
    assert!(again.fencing_token > held.fencing_token);
    assert!(other.release(&again).await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_two_of_three_loses_the_lock_and_the_holder_reports_it() {
    let mut cluster = Cluster::start().await;
    let holder_backend = Arc::new(cluster.backend().await);
    let holder = LockClient::new(holder_backend.clone(), options());
    let name = unique("majority");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("acquire");
    let other = cluster.backend().await;
    eventually("wake-ups on", || async { holder_backend.wake_ups() }).await;

    cluster.servers[0].kill();
    cluster.servers[1].kill();
    let reason = tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("the holder reports the loss");
    // No extension reaches a majority, and none is refused by one either.
    assert_eq!(reason, LossReason::Expired);
    // The holder gives up a safety margin before its copies end: until the
    // last server's copy has, that server answers that the lock is held.
    let key = holder_backend.keys_of(&name).remove(0);
    let survivor = cluster.servers[2].url();
    eventually("the holder's copy ends on the last server", || async {
        !exists(&survivor, &key).await
    })
    .await;
    let attempt = other
        .try_acquire(
            &distlock_core::backend::AcquireRequest::new(
                name.clone(),
                Claim::Exclusive,
                Duration::from_secs(2),
                distlock_core::Holder::this_process(None).into(),
            ),
            &mut distlock_core::backend::WaitState::new(),
        )
        .await;
    let error = attempt.expect_err("one server of three cannot grant");
    assert!(
        error.is_transient() && error.to_string().contains("majority"),
        "{error}"
    );
    // One subscriber of three is not a majority: a release could go
    // unheard, so waits poll.
    eventually("wake-ups off", || async { !holder_backend.wake_ups() }).await;

    // Opening needs a majority too.
    let error = RedisBackend::open(&cluster.url())
        .await
        .expect_err("one of three answers");
    assert!(
        error.to_string().contains("1 of 3 redis servers answered"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_at_open_is_connected_to_when_it_is_back() {
    let mut cluster = Cluster::start().await;
    cluster.servers[2].kill();
    let backend = Arc::new(cluster.backend().await);
    let client = LockClient::new(backend.clone(), options());
    let name = unique("late");
    let guard = client
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("2 of 3 grant");
    assert!(guard.release().await.expect("release"));

    cluster.servers[2].restart().await;
    let key = backend.keys_of(&name).remove(0);
    let back = cluster.servers[2].url();
    // The backend connects in the background, and a grant is decided
    // once two servers granted: the third's copy comes when it is heard.
    eventually("a copy on the server that came back", || async {
        let guard = client
            .acquire_with(&name, Duration::from_secs(10))
            .await
            .expect("acquire");
        let mut there = false;
        for _ in 0..20 {
            there = exists(&back, &key).await;
            if there {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(guard.release().await.expect("release"));
        there
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_decides_and_partial_grants_are_rolled_back() {
    let cluster = Cluster::start().await;
    let backend = cluster.backend().await;
    let name = unique("partial");
    let key = backend.keys_of(&name).remove(0);
    let mut raws = Vec::new();
    for server in &cluster.servers {
        raws.push(raw(&server.url()).await);
    }
    let foreign = "someone else's";
    let set = |connection: &mut redis::aio::MultiplexedConnection| {
        let mut connection = connection.clone();
        let key = key.clone();
        async move {
            redis::cmd("SET")
                .arg(&key)
                .arg(foreign)
                .arg("PX")
                .arg(60_000)
                .query_async::<()>(&mut connection)
                .await
                .expect("SET");
        }
    };

    // Someone else's grant on two servers: they hold a majority.
    set(&mut raws[0]).await;
    set(&mut raws[1]).await;
    assert!(
        grant(&backend, &name, Claim::Exclusive, Duration::from_secs(30))
            .await
            .is_none(),
        "one server of three is not a majority"
    );
    // The attempt may be decided by the first two answers; the third
    // server's call then goes on, and its copy is rolled back in the
    // background.
    let third = cluster.servers[2].url();
    eventually("the grant on the third server rolled back", || async {
        !exists(&third, &key).await
    })
    .await;

    // On one server only: two of three grant.
    assert!(
        backend
            .force_release(&name, ADMIN_LIMIT)
            .await
            .expect("force")
    );
    set(&mut raws[0]).await;
    let lease = grant(&backend, &name, Claim::Exclusive, Duration::from_secs(30))
        .await
        .expect("two of three grant");
    let get = |index: usize| {
        let mut connection = raws[index].clone();
        let key = key.clone();
        async move {
            redis::cmd("GET")
                .arg(&key)
                .query_async::<Option<String>>(&mut connection)
                .await
                .expect("GET")
        }
    };
    assert_eq!(get(0).await.as_deref(), Some(foreign), "left untouched");
    assert!(backend.release(&lease).await.expect("release"));
    assert_eq!(get(0).await.as_deref(), Some(foreign), "left untouched");
    assert_eq!((get(1).await, get(2).await), (None, None), "released");
}

/// How many times the server at `url` ran `command`, alone or in a
/// script, since it started.
async fn calls(url: &str, command: &str) -> u64 {
    let mut connection = raw(url).await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await
        .expect("INFO commandstats");
    let field = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&field))
        .map_or(0, |rest| {
            rest.split(',')
                .next()
                .unwrap_or("0")
                .parse()
                .expect("a count")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_splits_the_vote_asks_again_by_itself_and_wins_once_it_can() {
    let cluster = Cluster::start().await;
    let backend = cluster.backend().await;
    let name = unique("split");
    let key = backend.keys_of(&name).remove(0);
    // Two other holders, one server each: nobody can win a majority, and
    // each attempt of ours takes the third server alone, a split vote.
    let mut raws = Vec::new();
    for (server, holder) in cluster.servers.iter().zip(["holder a", "holder b"]) {
        let mut connection = raw(&server.url()).await;
        redis::cmd("SET")
            .arg(&key)
            .arg(holder)
            .arg("PX")
            .arg(60_000)
            .query_async::<()>(&mut connection)
            .await
            .expect("SET");
        raws.push(connection);
    }
    let third = cluster.servers[2].url();
    let scripts_before = calls(&third, "evalsha").await;
    let client = LockClient::new(Arc::new(backend), options());
    let waiting = tokio::spawn({
        let (client, name) = (client.clone(), name.clone());
        async move {
            client
                .acquire_with(
                    &name,
                    AcquireOptions::new().timeout(Duration::from_secs(30)),
                )
                .await
        }
    });
    eventually("several attempts split the vote", || async {
        calls(&third, "evalsha").await - scripts_before >= 6
    })
    .await;
    assert!(!waiting.is_finished(), "a split vote is no grant");

    // One holder goes without a word (no release is announced): the wait
    // must find out by asking again on its own.
    redis::cmd("DEL")
        .arg(&key)
        .query_async::<()>(&mut raws[1])
        .await
        .expect("DEL");
    let guard = waiting
        .await
        .expect("the wait")
        .expect("granted by two of three");
    assert!(exists(&third, &key).await, "held on the third server");
    let mut first = raws.swap_remove(0);
    let untouched: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut first)
        .await
        .expect("GET");
    assert_eq!(
        untouched, "holder a",
        "the other holder's copy is left alone"
    );
    assert!(guard.release().await.expect("release"));
}

/// The lease of [`next`]'s grants.
const NEXT_LEASE: Duration = Duration::from_secs(2);

/// A grant and its release, whose token must exceed `last`.
async fn next(backend: &RedisBackend, name: &LockName, last: &mut u64, why: &str) {
    let lease = grant(backend, name, Claim::Exclusive, NEXT_LEASE)
        .await
        .expect("granted");
    assert!(
        lease.fencing_token > *last,
        "{why}: {} after {last}",
        lease.fencing_token
    );
    *last = lease.fencing_token;
    assert!(backend.release(&lease).await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_while_a_server_of_each_majority_keeps_its_counter() {
    let mut cluster = Cluster::start().await;
    let backend = cluster.backend().await;
    let name = unique("tokens");
    let counter = backend.keys_of(&name).remove(4);
    let mut last = 0;
    next(&backend, &name, &mut last, "the first grant").await;
    next(&backend, &name, &mut last, "the next grant").await;

    // The first server's counter is far ahead of the others' (as if its
    // clock were), and the second holds the name for someone else: the
    // grant is the first's and the third's, takes the first's token, and
    // raises the third's counter.
    let mut first = raw(&cluster.servers[0].url()).await;
    let ahead = last + 1_000_000_000_000;
    redis::cmd("SET")
        .arg(&counter)
        .arg(ahead)
        .query_async::<()>(&mut first)
        .await
        .expect("SET");
    let exclusive = backend.keys_of(&name).remove(0);
    let mut second = raw(&cluster.servers[1].url()).await;
    redis::cmd("SET")
        .arg(&exclusive)
        .arg("someone else's")
        .query_async::<()>(&mut second)
        .await
        .expect("SET");
    next(&backend, &name, &mut last, "a grant with a counter ahead").await;
    assert!(last > ahead);
    redis::cmd("DEL")
        .arg(&exclusive)
        .query_async::<()>(&mut second)
        .await
        .expect("DEL");

    // Without the first, the other two still issue a larger token: the
    // third, which the two majorities share, had its counter raised.
    cluster.servers[0].kill();
    next(
        &backend,
        &name,
        &mut last,
        "a grant without the server that was ahead",
    )
    .await;

    // The second restarts without persistence and forgets its counter;
    // the third, shared with every majority left, keeps it.
    // (A backend opened afresh: the first call on a connection to a
    // restarted server fails, and only a client's wait would retry it.)
    // It abstains for a lease after it is first asked (another name's
    // attempt asks it), as a server that came back empty does.
    cluster.servers[1].restart().await;
    let backend = cluster.backend().await;
    assert!(
        grant(&backend, &unique("wake"), Claim::Exclusive, NEXT_LEASE)
            .await
            .is_none(),
        "the restarted server's vote does not count yet, and the first is down"
    );
    tokio::time::sleep(NEXT_LEASE).await;
    next(
        &backend,
        &name,
        &mut last,
        "a grant after a restart without persistence",
    )
    .await;

    // Back with all three: the first's counter is gone too (and it
    // abstains: the other two grant).
    cluster.servers[0].restart().await;
    let backend = cluster.backend().await;
    next(
        &backend,
        &name,
        &mut last,
        "a grant with two counters restarted",
    )
    .await;
    let client = cluster.client().await;
    for _ in 0..3 {
        let guard = client
            .acquire_with(&name, Duration::from_secs(10))
            .await
            .expect("acquire");
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        assert!(guard.release().await.expect("release"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_majority_grants_once_and_force_release_ends_them_everywhere() {
    let url = shared_url();
    let backend = Arc::new(backend(&url).await);
    let holder = LockClient::new(backend.clone(), options());
    let name = unique("listed");
    let readers = unique("listed-readers");
    let guard = holder
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .expect("acquire");
    let mut shared = Vec::new();
    for _ in 0..2 {
        shared.push(
            holder
                .acquire_with(
                    &readers,
                    AcquireOptions::new()
                        .shared()
                        .timeout(Duration::from_secs(10)),
                )
                .await
                .expect("a reader"),
        );
    }
    // A copy on one server alone is no grant.
    let stray = unique("stray");
    let stray_key = backend.keys_of(&stray).remove(0);
    let servers = server_urls(&url);
    let mut first = raw(&servers[0]).await;
    let value = format!(
        "{:032x}:7:{{\"name\":\"{stray}\",\"holder\":{}}}",
        1u128,
        serde_json::to_string(&distlock_core::Holder::this_process(None)).unwrap()
    );
    redis::cmd("SET")
        .arg(&stray_key)
        .arg(value)
        .arg("PX")
        .arg(60_000)
        .query_async::<()>(&mut first)
        .await
        .expect("SET");

    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    let of = |wanted: &distlock_core::LockName| -> Vec<&distlock_core::LockInfo> {
        listed.iter().filter(|info| &info.name == wanted).collect()
    };
    let exclusive = of(&name);
    assert_eq!(exclusive.len(), 1, "once, not once per server: {listed:?}");
    assert_eq!(exclusive[0].kind, LockKind::Exclusive);
    assert_eq!(exclusive[0].fencing_token, Some(guard.fencing_token()));
    let mut reader_tokens: Vec<Option<u64>> = of(&readers)
        .iter()
        .map(|info| {
            assert_eq!(info.kind, LockKind::Shared);
            info.fencing_token
        })
        .collect();
    reader_tokens.sort();
    let mut held_tokens: Vec<Option<u64>> = shared
        .iter()
        .map(|guard| Some(guard.fencing_token()))
        .collect();
    held_tokens.sort();
    assert_eq!(
        reader_tokens, held_tokens,
        "each reader once, with its token"
    );
    assert!(of(&stray).is_empty(), "a copy on one server is not listed");

    assert!(
        backend
            .force_release(&name, ADMIN_LIMIT)
            .await
            .expect("force")
    );
    let key = backend.keys_of(&name).remove(0);
    for server in &servers {
        assert!(!exists(server, &key).await, "gone from {server}");
    }
    tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("the holder learns of it");
    assert!(
        !backend
            .force_release(&name, ADMIN_LIMIT)
            .await
            .expect("force again"),
        "nothing left to end"
    );
    assert!(
        backend
            .force_release(&stray, ADMIN_LIMIT)
            .await
            .expect("the stray copy")
    );
    for reader in shared {
        assert!(reader.release().await.expect("release"));
    }
}

/// Rewrites the token in the copy of `key` on the server at `url`
/// (`<id>:<token>:<record>`) to `token`, keeping its expiry.
async fn rewrite_token(url: &str, key: &str, token: &str) {
    let mut connection = raw(url).await;
    let value: String = redis::cmd("GET")
        .arg(key)
        .query_async(&mut connection)
        .await
        .expect("GET");
    let (id, rest) = value.split_once(':').expect("an id");
    let (_, record) = rest.split_once(':').expect("a token");
    redis::cmd("SET")
        .arg(key)
        .arg(format!("{id}:{token}:{record}"))
        .arg("KEEPTTL")
        .query_async::<()>(&mut connection)
        .await
        .expect("SET");
}

/// While a grant is being decided, each server's copy carries that
/// server's own token, which need not be the grant's (the largest of its
/// majority's): `list`, and so `Election::leader` and its observers, shows
/// the grant only once a copy carries the grant's token.
#[tokio::test]
async fn list_shows_a_grant_only_once_it_is_decided() {
    let url = shared_url();
    let backend = backend(&url).await;
    let name = unique("undecided");
    let lease = grant(&backend, &name, Claim::Exclusive, Duration::from_secs(30))
        .await
        .expect("granted");
    let key = backend.keys_of(&name).remove(0);
    let servers = server_urls(&url);
    // The grant returned once a majority had it; the last server's copy
    // lands a moment later.
    for server in &servers {
        eventually("every server has its copy", || exists(server, &key)).await;
    }
    // As the copies read before the grant is decided: each server's own
    // token, marked as such, none of them the grant's.
    for (at, server) in servers.iter().enumerate() {
        rewrite_token(
            server,
            &key,
            &format!("~{}", lease.fencing_token - 1 - at as u64),
        )
        .await;
    }
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    assert!(
        listed.iter().all(|info| info.name != name),
        "an undecided grant is not listed: {listed:?}"
    );
    // Decided on one server, as the grant writes it before it returns.
    rewrite_token(&servers[1], &key, &lease.fencing_token.to_string()).await;
    let listed = backend.list(ADMIN_LIMIT).await.expect("list");
    let shown: Vec<Option<u64>> = listed
        .iter()
        .filter(|info| info.name == name)
        .map(|info| info.fencing_token)
        .collect();
    assert_eq!(shown, [Some(lease.fencing_token)], "{listed:?}");
    assert!(backend.release(&lease).await.expect("release"));
}

#[tokio::test]
async fn quorum_mode_answers_unsupported_for_semaphores_and_hand_overs() {
    let backend = backend(&shared_url()).await;
    let capabilities = backend.capabilities();
    assert!(capabilities.shared && !capabilities.semaphores);
    assert!(backend.hand_overs().is_none());
    let error = LockClient::new(Arc::new(backend), options())
        .try_acquire_with(&unique("permits"), TryOptions::new().permit(3))
        .await
        .expect_err("no semaphores");
    assert!(
        matches!(&error, Error::Unsupported(why) if why.contains("mode=quorum")),
        "{error}"
    );
}

/// What `distlock check` reads of a quorum: every server's eviction and
/// persistence settings, not the first answering server's alone. Only the
/// second server may evict locks; it is named, and so are the other two,
/// read too. A server that does not answer is a finding, not skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_info_reads_every_server_and_names_the_one_that_may_evict_locks() {
    let mut cluster = Cluster {
        servers: vec![
            OwnServer::start(&[]).await,
            OwnServer::start(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]).await,
            OwnServer::start(&[]).await,
        ],
    };
    let addresses: Vec<String> = cluster
        .servers
        .iter()
        .map(|server| format!("127.0.0.1:{}", server.port()))
        .collect();
    let address = |at: usize| addresses[at].clone();
    let backend = cluster.backend().await;
    let info = backend.server_info(ADMIN_LIMIT).await.expect("server info");
    let feature = |info: &distlock_core::backend::ServerInfo, name: &str| {
        info.features
            .iter()
            .find(|feature| feature.name == name)
            .unwrap_or_else(|| panic!("a {name} finding in {:?}", info.features))
            .clone()
    };
    let eviction = feature(&info, "eviction");
    assert_eq!(eviction.state, FeatureState::Missing, "{}", eviction.detail);
    let (faulty, rest) = eviction.detail.split_once(" | ").expect("two findings");
    assert!(
        faulty.starts_with(&format!("{}: maxmemory-policy allkeys-lru", address(1))),
        "the faulty server first, by its address: {}",
        eviction.detail
    );
    for safe in [address(0), address(2)] {
        assert!(
            !faulty.contains(&safe),
            "{safe} is not faulty: {}",
            eviction.detail
        );
        assert!(
            rest.contains(&safe),
            "{safe} was read too: {}",
            eviction.detail
        );
    }
    assert!(rest.contains("noeviction"), "{}", eviction.detail);
    let persistence = feature(&info, "persistence");
    assert!(
        persistence.detail.starts_with(&format!(
            "every server ({}, {}, {}): no AOF",
            address(0),
            address(1),
            address(2)
        )),
        "{}",
        persistence.detail
    );

    cluster.servers[2].kill();
    let info = backend
        .server_info(ADMIN_LIMIT)
        .await
        .expect("two of three answer");
    let persistence = feature(&info, "persistence");
    assert!(
        persistence
            .detail
            .contains(&format!("{}: not read, as it did not answer", address(2))),
        "{}",
        persistence.detail
    );
    assert_eq!(feature(&info, "eviction").state, FeatureState::Missing);
}

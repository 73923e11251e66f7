//! Remembered CAS values: a lease is extended and released with the CAS of
//! our last store, in one command, and never on a server that restarted
//! since, where the same CAS can belong to someone else's lock.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use distlock_core::LockName;
use distlock_core::backend::BackendExt;
use distlock_core::backend::{Backend, Lease};
use distlock_memcached::MemcachedBackend;

use distlock_core::testing::ADMIN_LIMIT;
use support::{Item, OwnServer, Peek, grant, quorum_url, unique, url};

const LEASE: Duration = Duration::from_secs(60);

async fn open(url: &str) -> MemcachedBackend {
    MemcachedBackend::open(url).await.expect("open")
}

fn url_of(servers: &[OwnServer]) -> String {
    let addrs: Vec<String> = servers.iter().map(OwnServer::addr).collect();
    let mode = if servers.len() > 1 {
        "quorum"
    } else {
        "sharded"
    };
    format!("memcache://{}?mode={mode}&timeout=500ms", addrs.join(","))
}

/// Each counter's growth between two `stats`.
fn grown(before: &HashMap<String, String>, after: &HashMap<String, String>, stat: &str) -> u64 {
    let read = |stats: &HashMap<String, String>| -> u64 {
        stats
            .get(stat)
            .unwrap_or_else(|| panic!("no stat {stat}"))
            .parse()
            .unwrap()
    };
    read(after) - read(before)
}

/// Acquire, extend and release once on `servers` of the test's own, and
/// check on each server that no command read the lock: the add returned
/// the CAS that the extension and the release use.
async fn a_cycle_reads_nothing(servers: &[OwnServer]) {
    let backend = open(&url_of(servers)).await;
    let name = unique("cycle");
    // The first grant creates the token counter, which memcached does not
    // count; count the second.
    let first = grant(&backend, &name, LEASE).await.expect("free");
    assert!(backend.release(&first).await.unwrap());
    let mut peeks = Vec::new();
    let mut before = Vec::new();
    for server in servers {
        let mut peek = Peek::connect(&server.addr()).await;
        before.push(peek.stats().await);
        peeks.push(peek);
    }

    let lease = grant(&backend, &name, LEASE).await.expect("free");
    assert!(backend.extend(&lease).await.unwrap());
    assert!(backend.release(&lease).await.unwrap());

    for (peek, before) in peeks.iter_mut().zip(&before) {
        let after = peek.stats().await;
        let counts: Vec<(&str, u64)> =
            ["cmd_get", "cmd_set", "cas_hits", "incr_hits", "delete_hits"]
                .into_iter()
                .map(|stat| (stat, grown(before, &after, stat)))
                .collect();
        assert_eq!(
            counts,
            [
                ("cmd_get", 0),
                ("cmd_set", 2),
                ("cas_hits", 1),
                ("incr_hits", 1),
                ("delete_hits", 1),
            ],
            "the add, the increment, one CAS store to extend, one CAS delete to release"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_extends_and_releases_without_reading_sharded() {
    a_cycle_reads_nothing(&[OwnServer::start(&[]).await]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_extends_and_releases_without_reading_quorum() {
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(OwnServer::start(&[]).await);
    }
    a_cycle_reads_nothing(&servers).await;
}

/// The lock `name` as the server at `addr` holds it.
async fn item(addr: &str, backend: &MemcachedBackend, name: &LockName) -> Item {
    Peek::connect(addr)
        .await
        .get(&backend.lock_key(name))
        .await
        .expect("the lock is stored")
}

/// A restarted memcached numbers CAS values from 1 again. Another client
/// takes the locks there with the very CAS values the old holder
/// remembers; the old holder's release and extension must leave them be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_same_cas_is_someone_elses() {
    let mut server = OwnServer::start(&[]).await;
    let addr = server.addr();
    let stale = open(&url_of(std::slice::from_ref(&server))).await;
    let (released, extended) = (unique("restart-release"), unique("restart-extend"));
    let old_released = grant(&stale, &released, LEASE).await.expect("free");
    let old_extended = grant(&stale, &extended, LEASE).await.expect("free");
    let old_cas = (
        item(&addr, &stale, &released).await.cas,
        item(&addr, &stale, &extended).await.cas,
    );

    server.restart().await;
    // The same stores in the same order give the same CAS values.
    let fresh = open(&url_of(std::slice::from_ref(&server))).await;
    let new_released = grant(&fresh, &released, LEASE).await.expect("free");
    let new_extended = grant(&fresh, &extended, LEASE).await.expect("free");
    let taken = (
        item(&addr, &fresh, &released).await,
        item(&addr, &fresh, &extended).await,
    );
    assert_eq!(
        (taken.0.cas, taken.1.cas),
        old_cas,
        "the new holder's CAS values equal those the old holder remembers"
    );

    assert!(
        !stale.release(&old_released).await.expect("stale release"),
        "not ours"
    );
    assert!(
        !stale.extend(&old_extended).await.expect("stale extend"),
        "not ours"
    );
    for (name, taken) in [(&released, &taken.0), (&extended, &taken.1)] {
        let now = item(&addr, &fresh, name).await;
        assert_eq!(
            (&now.value, now.cas),
            (&taken.value, taken.cas),
            "{name}: the new holder's lock is untouched"
        );
    }
    assert!(fresh.release(&new_released).await.unwrap());
    assert!(fresh.extend(&new_extended).await.unwrap());
    assert!(fresh.release(&new_extended).await.unwrap());
}

/// The holder's lock is forced away and taken by another client: the
/// holder's remembered CAS matches nothing, and its extension and release
/// report the loss and leave the new lock be.
async fn a_lock_taken_over_is_not_extended(url: &str) {
    let holder = open(url).await;
    let other = open(url).await;
    let name = unique("taken-over");
    let old = grant(&holder, &name, LEASE).await.expect("free");
    assert!(other.force_release(&name, ADMIN_LIMIT).await.unwrap());
    let new = grant(&other, &name, LEASE).await.expect("forced free");

    assert!(!holder.extend(&old).await.expect("extend"), "lost");
    assert!(!holder.release(&old).await.expect("release"), "lost");
    assert!(
        grant(&holder, &name, LEASE).await.is_none(),
        "the new lock is intact"
    );
    assert!(other.extend(&new).await.unwrap(), "and still the other's");
    assert!(other.release(&new).await.unwrap());
}

#[tokio::test]
async fn a_lock_taken_over_is_not_extended_sharded() {
    a_lock_taken_over_is_not_extended(&url()).await;
}

#[tokio::test]
async fn a_lock_taken_over_is_not_extended_quorum() {
    a_lock_taken_over_is_not_extended(&quorum_url()).await;
}

/// Our own item stored again behind the backend's back (as by an extension
/// whose answer was lost) has a CAS the backend does not know: the
/// extension reads it, sees the lock is still ours, and goes on.
#[tokio::test]
async fn a_changed_cas_on_our_own_lock_is_read_and_kept() {
    let backend = open(&url()).await;
    let name = unique("changed-cas");
    let lease: Lease = grant(&backend, &name, LEASE).await.expect("free");
    let addr = backend.servers_of(&name)[0].to_owned();
    let ours = item(&addr, &backend, &name).await;
    Peek::connect(&addr)
        .await
        .set(&backend.lock_key(&name), &ours.value, 60)
        .await;
    let changed = item(&addr, &backend, &name).await;
    assert_ne!(changed.cas, ours.cas);

    assert!(backend.extend(&lease).await.unwrap(), "still ours");
    assert!(backend.release(&lease).await.unwrap(), "still ours");
    assert!(
        Peek::connect(&addr)
            .await
            .get(&backend.lock_key(&name))
            .await
            .is_none()
    );
}

/// memcached run without CAS values (`-C`) gives every item CAS 0, and a
/// command conditional on 0 matches any item: the backend refuses to
/// grant there, with an error that says why.
#[tokio::test]
async fn a_server_without_cas_is_refused() {
    let server = OwnServer::start(&["-C"]).await;
    let backend = open(&url_of(std::slice::from_ref(&server))).await;
    let request = distlock_core::backend::AcquireRequest::new(
        unique("no-cas"),
        distlock_core::Claim::Exclusive,
        LEASE,
        distlock_core::Holder::this_process(None).into(),
    );
    let error = backend
        .try_acquire(&request, &mut distlock_core::backend::WaitState::new())
        .await
        .expect_err("no grant without CAS values");
    assert!(error.to_string().contains("-C"), "{error}");
}

//! Hand-over in sharded mode: the next grant is stored over ours by
//! compare-and-swap, with the token counter's increment in the same write,
//! so the lock is never free in between, and nobody else's lock is ever
//! written. Quorum mode does not hand over.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Backend, HandOver, HandOvers, Lease};
use distlock_core::{Error, Holder, LockName};
use distlock_memcached::MemcachedBackend;
use tokio::time::Instant;

use distlock_core::testing::ADMIN_LIMIT;
use support::{Item, OwnServer, Peek, grant, quorum_url, unique, url};

const LEASE: Duration = Duration::from_secs(60);

async fn open(url: &str) -> MemcachedBackend {
    MemcachedBackend::open(url).await.expect("open")
}

fn own_url(server: &OwnServer) -> String {
    format!("memcache://{}?timeout=500ms", server.addr())
}

fn request(name: &LockName, lease: Duration) -> AcquireRequest {
    AcquireRequest::new(
        name.clone(),
        distlock_core::Claim::Exclusive,
        lease,
        Holder::this_process(Some("hand-over-tests")).into(),
    )
}

/// Hands `old` over to a new grant of `lease`: the new lease, or `None`
/// when `old` was not ours. A token must exceed the old one.
async fn hand_over(backend: &MemcachedBackend, old: &Lease, lease: Duration) -> Option<Lease> {
    Some(handed_over(backend, old, lease).await?.0)
}

/// As [`hand_over`], with the earlier confirmation the grant runs under,
/// when it was made without asking the server.
async fn handed_over(
    backend: &MemcachedBackend,
    old: &Lease,
    lease: Duration,
) -> Option<(Lease, Option<Instant>)> {
    let next = request(&old.name, lease);
    match backend.hand_over(old, &next).await.expect("hand over") {
        HandOver::Granted {
            fencing_token,
            confirmed_at,
            state,
        } => {
            assert!(
                fencing_token > old.fencing_token,
                "{fencing_token} after {}",
                old.fencing_token
            );
            let new = Lease {
                name: old.name.clone(),
                id: next.lease_id,
                fencing_token,
                lease,
                operation_timeout: next.operation_timeout,
                claim: distlock_core::Claim::Exclusive,
                state,
            };
            Some((new, confirmed_at))
        }
        HandOver::NotOurs => None,
    }
}

/// The lock `name` as its server holds it, if it does.
async fn item(backend: &MemcachedBackend, name: &LockName) -> Option<Item> {
    let addr = backend.servers_of(name)[0].to_owned();
    Peek::connect(&addr)
        .await
        .get(&backend.lock_key(name))
        .await
}

fn holds(item: &Item, lease: &Lease) -> bool {
    item.value.starts_with(format!("{}\n", lease.id).as_bytes())
}

/// A chain of hand-overs: another client never gets the lock in between,
/// each old lease can neither extend, release nor hand over again, each
/// new one extends, tokens rise, and the last one releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_keeps_the_lock_held() {
    let backend = open(&url()).await;
    assert!(backend.hand_overs().is_some());
    let other = Arc::new(open(&url()).await);
    let name = unique("hand-over");
    let first = grant(&backend, &name, LEASE).await.expect("free");

    // Another client tries all along; it must never get the lock.
    let done = Arc::new(AtomicBool::new(false));
    let trier = tokio::spawn({
        let (other, name, done) = (other.clone(), name.clone(), done.clone());
        async move {
            let mut tries = 0_u32;
            while !done.load(Ordering::SeqCst) {
                if let Some(stolen) = grant(&*other, &name, LEASE).await {
                    let _ = other.release(&stolen).await;
                    return Err(tries);
                }
                tries += 1;
            }
            Ok(tries)
        }
    });

    let mut tokens = vec![first.fencing_token];
    let mut grants = vec![first.id];
    let mut old = first;
    // More than a block of reserved tokens, so the chain mixes hand-overs
    // through the server and hand-overs without a command.
    for _ in 0..40 {
        let new = hand_over(&backend, &old, LEASE).await.expect("ours");
        assert!(
            grant(&*other, &name, LEASE).await.is_none(),
            "held right after the hand-over"
        );
        assert!(!backend.extend(&old).await.unwrap(), "the old grant ended");
        assert!(!backend.release(&old).await.unwrap(), "the old grant ended");
        assert!(
            hand_over(&backend, &old, LEASE).await.is_none(),
            "a stale grant hands nothing over"
        );
        assert!(backend.extend(&new).await.unwrap(), "the new grant is live");
        tokens.push(new.fencing_token);
        grants.push(new.id);
        old = new;
    }
    done.store(true, Ordering::SeqCst);
    let tries = trier
        .await
        .unwrap()
        .unwrap_or_else(|tries| panic!("another client took the lock after {tries} failed tries"));
    assert!(tries > 0, "the other client tried");

    let stored = item(&backend, &name).await.expect("held");
    assert!(
        grants
            .iter()
            .any(|&id| stored.value.starts_with(format!("{id}\n").as_bytes())),
        "the key holds a grant of this chain"
    );
    let listed = backend.list(ADMIN_LIMIT).await.unwrap();
    assert_eq!(listed.len(), 1, "no state kept for old grants: {listed:?}");
    assert_eq!(listed[0].fencing_token, Some(old.fencing_token));

    assert!(backend.release(&old).await.unwrap());
    assert!(backend.list(ADMIN_LIMIT).await.unwrap().is_empty());
    let after = grant(&*other, &name, LEASE)
        .await
        .expect("free after the release");
    tokens.push(after.fencing_token);
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens rise: {tokens:?}"
    );
    assert!(other.release(&after).await.unwrap());
}

/// The new grant gets the new lease's expiry, rounded as acquire rounds it.
#[tokio::test]
async fn the_next_grant_gets_its_own_lease() {
    let backend = open(&url()).await;
    let name = unique("hand-over-ttl");
    let old = grant(&backend, &name, LEASE).await.expect("free");
    let new = hand_over(&backend, &old, Duration::from_millis(9_500))
        .await
        .expect("ours");
    let stored = item(&backend, &name).await.expect("held");
    assert!(holds(&stored, &new));
    assert!((9..=11).contains(&stored.ttl), "ttl {}", stored.ttl);
    assert!(backend.release(&new).await.unwrap());
}

/// A lock forced away, and one forced away and taken by another client:
/// neither is handed over, and the other client's lock is untouched.
#[tokio::test]
async fn a_lock_taken_away_is_not_handed_over() {
    let holder = open(&url()).await;
    let other = open(&url()).await;
    let (freed, taken) = (unique("hand-over-freed"), unique("hand-over-taken"));
    let old_freed = grant(&holder, &freed, LEASE).await.expect("free");
    let old_taken = grant(&holder, &taken, LEASE).await.expect("free");
    assert!(other.force_release(&freed, ADMIN_LIMIT).await.unwrap());
    assert!(other.force_release(&taken, ADMIN_LIMIT).await.unwrap());
    let theirs = grant(&other, &taken, LEASE).await.expect("forced free");
    let before = item(&other, &taken).await.expect("theirs");

    assert!(hand_over(&holder, &old_freed, LEASE).await.is_none());
    assert!(hand_over(&holder, &old_taken, LEASE).await.is_none());
    assert_eq!(item(&other, &freed).await, None, "nothing was stored");
    let after = item(&other, &taken).await.expect("theirs");
    assert_eq!(
        (&after.value, after.cas),
        (&before.value, before.cas),
        "their lock is untouched"
    );
    assert!(
        holder.list(ADMIN_LIMIT).await.unwrap().is_empty(),
        "the lost grants are forgotten"
    );
    assert!(other.extend(&theirs).await.unwrap(), "still theirs");
    assert!(other.release(&theirs).await.unwrap());
}

/// Our own item stored again behind the backend's back (as by an extension
/// whose answer was lost) has a CAS the backend does not know: the
/// hand-over reads it, finds it ours, and hands it over.
#[tokio::test]
async fn a_changed_cas_on_our_own_lock_is_read_and_handed_over() {
    let backend = open(&url()).await;
    let name = unique("hand-over-changed");
    let old = grant(&backend, &name, LEASE).await.expect("free");
    let ours = item(&backend, &name).await.expect("held");
    let addr = backend.servers_of(&name)[0].to_owned();
    Peek::connect(&addr)
        .await
        .set(&backend.lock_key(&name), &ours.value, 60)
        .await;

    let new = hand_over(&backend, &old, LEASE).await.expect("still ours");
    assert!(holds(&item(&backend, &name).await.expect("held"), &new));
    assert!(backend.extend(&new).await.unwrap());
    assert!(backend.release(&new).await.unwrap());
}

/// The token counter lost or set back while the lock is held: the token
/// still exceeds the old one, and later grants exceed it in turn.
#[tokio::test]
async fn tokens_rise_when_the_counter_was_lost() {
    let backend = open(&url()).await;
    let name = unique("hand-over-counter");
    let addr = backend.servers_of(&name)[0].to_owned();
    let token_key = backend.token_key(&name);
    let mut peek = Peek::connect(&addr).await;
    // A counter far ahead of this machine's clock, as one created by a
    // client whose clock runs fast.
    let ahead =
        distlock_core::backend::token_floor(std::time::SystemTime::now()) + 1_000_000_000_000;
    peek.set(&token_key, ahead.to_string().as_bytes(), 600)
        .await;
    let first = grant(&backend, &name, LEASE).await.expect("free");
    assert_eq!(first.fencing_token, ahead + 1);

    // Lost: re-created from the clock, but above the old token.
    assert!(peek.delete(&token_key).await);
    let second = hand_over(&backend, &first, LEASE).await.expect("ours");
    assert_eq!(second.fencing_token, first.fencing_token + 1);

    // Set back, as by a client whose clock is slow: raised above the old token.
    peek.set(&token_key, b"5", 600).await;
    let third = hand_over(&backend, &second, LEASE).await.expect("ours");
    assert_eq!(third.fencing_token, second.fencing_token + 1);

    assert!(backend.release(&third).await.unwrap());
    let fourth = grant(&backend, &name, LEASE).await.expect("free");
    assert!(
        fourth.fencing_token > third.fencing_token,
        "{} after {}",
        fourth.fencing_token,
        third.fencing_token
    );
    assert!(backend.release(&fourth).await.unwrap());
}

/// Each counter's growth between two `stats`.
fn grown(
    before: &HashMap<String, String>,
    after: &HashMap<String, String>,
) -> Vec<(&'static str, u64)> {
    let read = |stats: &HashMap<String, String>, stat: &str| -> u64 {
        stats
            .get(stat)
            .unwrap_or_else(|| panic!("no stat {stat}"))
            .parse()
            .unwrap()
    };
    ["cmd_get", "cmd_set", "cas_hits", "incr_hits", "delete_hits"]
        .into_iter()
        .map(|stat| (stat, read(after, stat) - read(before, stat)))
        .collect()
}

/// The common case is one CAS store and the counter's increment, sent in
/// one write, with no read; the new lease then extends and releases
/// without reading either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_reads_nothing() {
    let server = OwnServer::start(&[]).await;
    let backend = open(&own_url(&server)).await;
    let name = unique("hand-over-count");
    // The first grant creates the token counter, which memcached does not
    // count; count the second.
    let first = grant(&backend, &name, LEASE).await.expect("free");
    assert!(backend.release(&first).await.unwrap());
    let old = grant(&backend, &name, LEASE).await.expect("free");
    let mut peek = Peek::connect(&server.addr()).await;

    let before = peek.stats().await;
    let new = hand_over(&backend, &old, LEASE).await.expect("ours");
    let handed = peek.stats().await;
    assert_eq!(
        grown(&before, &handed),
        [
            ("cmd_get", 0),
            ("cmd_set", 1),
            ("cas_hits", 1),
            ("incr_hits", 1),
            ("delete_hits", 0),
        ],
        "one CAS store and one increment, no read"
    );

    assert!(backend.extend(&new).await.unwrap());
    assert!(backend.release(&new).await.unwrap());
    let after = peek.stats().await;
    assert_eq!(
        grown(&handed, &after),
        [
            ("cmd_get", 0),
            ("cmd_set", 1),
            ("cas_hits", 1),
            ("incr_hits", 0),
            ("delete_hits", 1),
        ],
        "the new lease's CAS is remembered"
    );
}

/// A restarted memcached numbers CAS values from 1 again. Another client
/// takes the lock there with the very CAS value the old holder remembers;
/// the old holder's hand-over must leave it be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_same_cas_is_not_handed_over() {
    let mut server = OwnServer::start(&[]).await;
    let stale = open(&own_url(&server)).await;
    let name = unique("hand-over-restart");
    let old = grant(&stale, &name, LEASE).await.expect("free");
    let old_cas = item(&stale, &name).await.expect("held").cas;

    server.restart().await;
    // The same stores in the same order give the same CAS values.
    let fresh = open(&own_url(&server)).await;
    let theirs = grant(&fresh, &name, LEASE).await.expect("free");
    let taken = item(&fresh, &name).await.expect("held");
    assert_eq!(
        taken.cas, old_cas,
        "the new holder's CAS equals the one the old holder remembers"
    );

    assert!(
        hand_over(&stale, &old, LEASE).await.is_none(),
        "not ours to hand over"
    );
    let now = item(&fresh, &name).await.expect("held");
    assert_eq!(
        (&now.value, now.cas),
        (&taken.value, taken.cas),
        "the new holder's lock is untouched"
    );
    assert!(fresh.extend(&theirs).await.unwrap());
    assert!(fresh.release(&theirs).await.unwrap());
}

/// Quorum mode does not hand over: it offers no hand-overs, answers one
/// asked all the same with `Unsupported`, and changes nothing.
#[tokio::test]
async fn quorum_mode_does_not_hand_over() {
    let backend = open(&quorum_url()).await;
    assert!(backend.hand_overs().is_none());
    let name = unique("hand-over-quorum");
    let old = grant(&backend, &name, LEASE).await.expect("free");
    let outcome = backend.hand_over(&old, &request(&name, LEASE)).await;
    assert!(matches!(outcome, Err(Error::Unsupported(_))), "{outcome:?}");
    assert!(backend.extend(&old).await.unwrap(), "still the old grant");
    assert!(backend.release(&old).await.unwrap());
}

/// A hand-over through the server reserves a block of tokens; the next
/// hand-overs take them without a server command, under the lease the
/// server confirmed last, and the one after the block asks the server
/// again. Handed-on grants can neither extend, release nor hand over, and
/// the last grant releases the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_overs_within_a_block_send_nothing() {
    let server = OwnServer::start(&[]).await;
    let backend = open(&own_url(&server)).await;
    let name = unique("hand-over-block");
    let first = grant(&backend, &name, LEASE).await.expect("free");
    let mut peek = Peek::connect(&server.addr()).await;

    let (mut old, confirmed_at) = handed_over(&backend, &first, LEASE).await.expect("ours");
    assert_eq!(confirmed_at, None, "the server confirmed this one");
    let mut stale = vec![first];
    let before = peek.stats().await;
    // The block is 16 tokens: the server's hand-over took the first.
    for _ in 0..15 {
        let (new, confirmed_at) = handed_over(&backend, &old, LEASE).await.expect("ours");
        assert_eq!(
            new.fencing_token,
            old.fencing_token + 1,
            "the next reserved token"
        );
        assert!(
            confirmed_at.is_some(),
            "granted under the lease confirmed before"
        );
        stale.push(std::mem::replace(&mut old, new));
    }
    let passed = peek.stats().await;
    assert_eq!(
        grown(&before, &passed),
        [
            ("cmd_get", 0),
            ("cmd_set", 0),
            ("cas_hits", 0),
            ("incr_hits", 0),
            ("delete_hits", 0),
        ],
        "15 hand-overs without a command"
    );
    for lease in &stale {
        assert!(
            !backend.extend(lease).await.unwrap(),
            "a handed-on grant is not ours"
        );
        assert!(
            !backend.release(lease).await.unwrap(),
            "a handed-on grant is not ours"
        );
        assert!(hand_over(&backend, lease, LEASE).await.is_none());
    }
    assert_eq!(
        grown(&passed, &peek.stats().await)[1..],
        [
            ("cmd_set", 0),
            ("cas_hits", 0),
            ("incr_hits", 0),
            ("delete_hits", 0)
        ],
        "handed-on grants change nothing"
    );
    let listed = backend.list(ADMIN_LIMIT).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].fencing_token, Some(old.fencing_token));
    assert!(backend.extend(&old).await.unwrap());

    // The block is used up: the next hand-over asks the server.
    let before = peek.stats().await;
    let last = hand_over(&backend, &old, LEASE).await.expect("ours");
    let stored = item(&backend, &name).await.expect("held");
    assert!(
        holds(&stored, &last),
        "the server's hand-over stores the new grant"
    );
    assert_eq!(
        grown(&before, &peek.stats().await)[1..4],
        [("cmd_set", 1), ("cas_hits", 1), ("incr_hits", 1)]
    );
    assert!(backend.release(&last).await.unwrap());
    assert!(item(&backend, &name).await.is_none(), "released");
    let other = open(&own_url(&server)).await;
    let after = grant(&other, &name, LEASE).await.expect("free");
    assert!(after.fencing_token > last.fencing_token);
    assert!(other.release(&after).await.unwrap());
}

/// A grant passed on without a command releases the key even when its CAS
/// changed meanwhile: it reads the key and knows the identity stored there.
#[tokio::test]
async fn a_grant_passed_on_releases_after_its_cas_changed() {
    let server = OwnServer::start(&[]).await;
    let backend = open(&own_url(&server)).await;
    let name = unique("hand-over-reread");
    let first = grant(&backend, &name, LEASE).await.expect("free");
    let second = hand_over(&backend, &first, LEASE).await.expect("ours");
    let third = hand_over(&backend, &second, LEASE).await.expect("ours");
    let mut peek = Peek::connect(&server.addr()).await;
    let stored = item(&backend, &name).await.expect("held");
    assert!(holds(&stored, &second), "the third grant was passed on");
    // Store the same value again: same owner, new CAS.
    peek.set(&backend.lock_key(&name), &stored.value, 60).await;
    assert!(
        backend.extend(&third).await.unwrap(),
        "read again and extended"
    );
    let stored = item(&backend, &name).await.expect("held");
    peek.set(&backend.lock_key(&name), &stored.value, 60).await;
    assert!(
        backend.release(&third).await.unwrap(),
        "read again and released"
    );
    assert!(item(&backend, &name).await.is_none());
}

/// A lease whose last confirmation is more than half a lease old is handed
/// over through the server, which confirms it afresh.
#[tokio::test]
async fn a_stale_confirmation_is_handed_over_through_the_server() {
    let server = OwnServer::start(&[]).await;
    let backend = open(&own_url(&server)).await;
    let name = unique("hand-over-stale");
    let lease = Duration::from_secs(2);
    let first = grant(&backend, &name, lease).await.expect("free");
    let second = hand_over(&backend, &first, lease).await.expect("ours");
    tokio::time::sleep(lease / 2 + Duration::from_millis(100)).await;
    let mut peek = Peek::connect(&server.addr()).await;
    let before = peek.stats().await;
    let (third, confirmed_at) = handed_over(&backend, &second, lease).await.expect("ours");
    assert_eq!(confirmed_at, None);
    assert_eq!(
        grown(&before, &peek.stats().await)[1..4],
        [("cmd_set", 1), ("cas_hits", 1), ("incr_hits", 1)]
    );
    assert!(backend.release(&third).await.unwrap());
}

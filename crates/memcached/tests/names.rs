//! 10,000 hostile lock names against a memcached of the test's own: none
//! may touch another key, flush the cache, or contend with another name.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{Backend, Lease};
use distlock_core::{Error, LockName, MAX_NAME_LEN};
use distlock_memcached::MemcachedBackend;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use support::{OwnServer, Peek, grant};

const NAMES: usize = 10_000;
const SENTINELS: usize = 100;
const CONCURRENCY: usize = 200;

/// Pieces that would mean something to memcached, to a shell, or to the
/// key encoding itself.
const PIECES: &[&str] = &[
    "\r\n",
    "\r",
    "\n",
    " ",
    "\t",
    "\0",
    "flush_all",
    "flush_all\r\n",
    "\r\nflush_all\r\n",
    "ms sentinel:0 1 T0\r\nX\r\n",
    "md sentinel:1\r\n",
    "mg ",
    "noreply",
    "%",
    "%20",
    "%0D%0A",
    "=",
    "#",
    "L",
    "T",
    "lock:",
    "é",
    "🦀",
    "\u{7f}",
    "\u{1b}[2J",
    "a",
    "Z",
    "0",
    "/",
    ":",
];

fn hostile_name(rng: &mut StdRng) -> String {
    match rng.random_range(0..20) {
        // A name well past the limit, 10 KiB.
        0 => PIECES[rng.random_range(0..PIECES.len())].repeat(10 * 1024),
        // Near the limit, on either side.
        1 => {
            let piece = PIECES[rng.random_range(0..PIECES.len())];
            let target = MAX_NAME_LEN - 4 + rng.random_range(0..8);
            let mut name = String::new();
            while name.len() + piece.len() <= target {
                name.push_str(piece);
            }
            name
        }
        _ => {
            let mut name = String::new();
            for _ in 0..rng.random_range(1..40) {
                name.push_str(PIECES[rng.random_range(0..PIECES.len())]);
            }
            name
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_touch_nothing_else_and_never_contend() {
    let server = OwnServer::start(&["-m", "256"]).await;
    let mut peek = Peek::connect(&server.addr()).await;
    let mut sentinels = Vec::new();
    for i in 0..SENTINELS {
        let key = format!("sentinel:{i}");
        peek.set(&key, format!("value-{i}").as_bytes(), 0).await;
        sentinels.push((key.clone(), peek.get(&key).await.expect("stored")));
    }

    let mut rng = StdRng::seed_from_u64(0x5eed_d157_10c4);
    let mut names = Vec::new();
    let mut seen = HashSet::new();
    let mut rejected = 0;
    // Some hand-picked ones first, then random ones.
    let mut raw: Vec<String> = PIECES.iter().map(|piece| (*piece).to_owned()).collect();
    while raw.len() < NAMES {
        raw.push(hostile_name(&mut rng));
    }
    for text in raw {
        match LockName::new(&text) {
            Ok(name) => {
                assert!(text.len() <= MAX_NAME_LEN);
                if seen.insert(text) {
                    names.push(name);
                }
            }
            Err(Error::InvalidName { reason }) => {
                assert!(text.len() > MAX_NAME_LEN, "{reason}");
                rejected += 1;
            }
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert!(rejected > 100, "the fuzz covers names over the limit");
    assert!(names.len() > 8_000, "{} distinct names", names.len());

    let backend = MemcachedBackend::open(&format!("memcache://{}", server.addr()))
        .await
        .expect("open");
    let lease = Duration::from_secs(600);
    let mut leases: Vec<Lease> = Vec::with_capacity(names.len());
    for chunk in names.chunks(CONCURRENCY) {
        let grants = chunk.iter().map(|name| grant(&backend, name, lease));
        for (name, granted) in chunk.iter().zip(futures::future::join_all(grants).await) {
            leases.push(granted.unwrap_or_else(|| panic!("{name:?} contended with another name")));
        }
    }
    // Each lock key holds its own grant.
    for chunk in leases.chunks(CONCURRENCY) {
        let extended = futures::future::join_all(chunk.iter().map(|lease| backend.extend(lease)));
        for (lease, ok) in chunk.iter().zip(extended.await) {
            assert!(ok.expect("extend"), "{:?} lost its own key", lease.name);
        }
    }

    assert_eq!(peek.stat("cmd_flush").await, 0, "nothing flushed the cache");
    assert_eq!(
        peek.stat("curr_items").await,
        (SENTINELS + 2 * names.len()) as u64,
        "one lock key and one counter per name, and the sentinels"
    );
    for (key, before) in &sentinels {
        assert_eq!(peek.get(key).await.as_ref(), Some(before), "{key} changed");
    }

    for chunk in leases.chunks(CONCURRENCY) {
        let released = futures::future::join_all(chunk.iter().map(|lease| backend.release(lease)));
        for (lease, ok) in chunk.iter().zip(released.await) {
            assert!(
                ok.expect("release"),
                "{:?} was not ours to release",
                lease.name
            );
        }
    }
    assert_eq!(
        peek.stat("curr_items").await,
        (SENTINELS + names.len()) as u64,
        "releases removed exactly the lock keys"
    );
    assert_eq!(peek.stat("cmd_flush").await, 0);
    for (key, before) in &sentinels {
        assert_eq!(peek.get(key).await.as_ref(), Some(before), "{key} changed");
    }
}

//! Release announcements: a release is published on the name's channel
//! only when an attempt found the grant held since it was made, so that a
//! release nobody waits for runs no `PUBLISH`; and a waiter is woken by
//! it, long before the holder's lease would have ended. A delayed release
//! (`min_hold`), which cuts the lease short, is announced the same way.

mod support;

use std::time::Duration;

use distlock_core::backend::Backend;
use distlock_core::backend::ReleaseLater;
use distlock_core::{Claim, LockClient, LockOptions};
use distlock_redis::redis;
use futures::StreamExt;

use support::{backend, grant, raw, unique, url};

/// Whether `key` is there.
async fn exists(connection: &redis::aio::MultiplexedConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut connection.clone())
        .await
        .unwrap();
    n == 1
}

/// A waiting writer keeps its mark by trying again within half its own
/// lease: with five minutes, that is after its one-minute timeout, so
/// without an announcement only its last try, at that timeout, could
/// serve it.
fn patient_waiter() -> LockOptions {
    LockOptions::builder()
        .lease(Duration::from_secs(300))
        .build()
        .unwrap()
}

/// The channel `name`'s releases are announced on: its exclusive key's,
/// with `released` for the role.
fn channel_of(exclusive_key: &str) -> String {
    let base = exclusive_key
        .strip_suffix('x')
        .expect("the exclusive key ends in its role");
    format!("{base}released")
}

/// A subscriber to one channel, opened before the steps it is to hear.
struct Listener {
    pubsub: redis::aio::PubSub,
    channel: String,
}

impl Listener {
    async fn on(url: &str, channel: &str) -> Self {
        let mut pubsub = redis::Client::open(url)
            .unwrap()
            .get_async_pubsub()
            .await
            .unwrap();
        pubsub.subscribe(channel).await.unwrap();
        Self {
            pubsub,
            channel: channel.to_owned(),
        }
    }

    /// Everything the server published on the channel so far, in order:
    /// a message of the test's own is published last, and all before it
    /// is what was heard.
    async fn heard(mut self, connection: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&self.channel)
            .arg("end")
            .query_async(connection)
            .await
            .unwrap();
        let mut messages = self.pubsub.on_message();
        let mut heard = Vec::new();
        loop {
            let payload: String = messages.next().await.unwrap().get_payload().unwrap();
            if payload == "end" {
                return heard;
            }
            heard.push(payload);
        }
    }
}

#[tokio::test]
async fn a_release_is_announced_only_when_someone_waited() {
    let url = url();
    let backend = backend(&url).await;
    let name = unique("announced");
    let keys = backend.keys_of(&name);
    let (exclusive, awaited) = (&keys[0], &keys[5]);
    let channel = channel_of(exclusive);
    let listener = Listener::on(&url, &channel).await;
    let mut connection = raw(&url).await;
    let lease = Duration::from_secs(30);

    // Nobody asked while it was held: no announcement.
    let held = grant(&backend, &name, Claim::Exclusive, lease)
        .await
        .unwrap();
    assert!(backend.release(&held).await.unwrap());
    assert!(!exists(&connection, awaited).await);

    // A writer, then a reader, found it held: each release is announced,
    // and takes the mark with it.
    for claim in [Claim::Exclusive, Claim::Shared] {
        let held = grant(&backend, &name, Claim::Exclusive, lease)
            .await
            .unwrap();
        assert!(grant(&backend, &name, claim, lease).await.is_none(), "held");
        assert!(
            exists(&connection, awaited).await,
            "the attempt left its mark"
        );
        assert!(backend.release(&held).await.unwrap());
        assert!(!exists(&connection, awaited).await, "the release took it");
    }

    // One more release nobody waited for.
    let held = grant(&backend, &name, Claim::Exclusive, lease)
        .await
        .unwrap();
    assert!(backend.release(&held).await.unwrap());
    let heard = listener.heard(&mut connection).await;
    assert_eq!(
        heard,
        ["", ""],
        "one announcement for each release that someone waited for"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_not_the_lease() {
    let url = url();
    let holder = backend(&url).await;
    let waiter = std::sync::Arc::new(backend(&url).await);
    support::eventually("wake-ups on", || async { waiter.wake_ups() }).await;
    let name = unique("woken");
    // Held for ten minutes: a waiter left to its timed retries would try
    // again only at its own timeout of one minute.
    let held = grant(&holder, &name, Claim::Exclusive, Duration::from_secs(600))
        .await
        .unwrap();
    let waiting = {
        let client = LockClient::new(waiter.clone(), patient_waiter());
        let name = name.clone();
        tokio::spawn(async move { client.acquire_with(&name, Duration::from_secs(60)).await })
    };
    let awaited = holder.keys_of(&name).remove(5);
    let connection = raw(&url).await;
    support::eventually("the waiter asked", || exists(&connection, &awaited)).await;
    assert!(holder.release(&held).await.unwrap());
    let guard = waiting
        .await
        .unwrap()
        .expect("the waiter is served once the holder releases");
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn a_delayed_release_is_announced_when_someone_waited() {
    let url = url();
    let backend = backend(&url).await;
    let name = unique("delayed");
    let keys = backend.keys_of(&name);
    let (exclusive, awaited) = (&keys[0], &keys[5]);
    let channel = channel_of(exclusive);
    let listener = Listener::on(&url, &channel).await;
    let mut connection = raw(&url).await;
    let (lease, min_hold) = (Duration::from_secs(600), Duration::from_millis(50));
    let ReleaseLater::By(delayed) = backend.abilities().delayed_release else {
        panic!("Redis announces its later releases, so it makes them itself");
    };

    // Nobody asked: the lease is cut, and nothing is announced.
    let held = grant(&backend, &name, Claim::Exclusive, lease)
        .await
        .unwrap();
    assert!(delayed.release_after(&held, min_hold).await.unwrap());
    support::eventually("the cut lease ran out", || async {
        !exists(&connection, exclusive).await
    })
    .await;

    // A writer found it held, and was told ten minutes: the cut is
    // announced, so that it asks again and learns the new end.
    let held = grant(&backend, &name, Claim::Exclusive, lease)
        .await
        .unwrap();
    assert!(
        grant(&backend, &name, Claim::Exclusive, lease)
            .await
            .is_none()
    );
    assert!(
        exists(&connection, awaited).await,
        "the attempt left its mark"
    );
    assert!(delayed.release_after(&held, min_hold).await.unwrap());

    let heard = listener.heard(&mut connection).await;
    assert_eq!(
        heard,
        [""],
        "one announcement, for the cut someone waited on"
    );
}

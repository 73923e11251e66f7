//! Release wake-ups: one subscriber connection per server `SUBSCRIBE`s to
//! the channels of the names this backend's waiters wait for, and wakes
//! them when a release is published there, on any server (a wake-up is a
//! hint: the waiter tries again).
//!
//! Releases are heard while enough connections are open: the one server
//! in single mode, a majority in quorum mode (a release deletes a grant
//! from a majority, and announces it on each, so a majority of listeners
//! hears it on at least one). While too few are open, [`Subscriber::watch`]
//! answers `None` and waits poll; every waiter is woken once when a
//! connection goes down and once when it is back, since releases in
//! between may have gone unheard.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock_core::LockName;
use distlock_core::backend::{ReleaseHub, ReleaseWatch};
use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::MissedTickBehavior;

use crate::keys::KeySpace;

/// How long opening the subscriber connection, or one `SUBSCRIBE`,
/// `UNSUBSCRIBE` or `PING` on it, may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the connection gives up channels nobody waits on any more,
/// and checks with a `PING` that it still answers.
const TICK: Duration = Duration::from_secs(5);

/// The first pause before opening a lost connection again, and the
/// longest, between which it doubles.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// The subscriber tasks, which stop when this is dropped.
#[derive(Debug)]
pub(crate) struct Subscriber {
    hub: ReleaseHub,
    /// How many connections are open and subscribed.
    live: Arc<AtomicUsize>,
    /// How many must be for releases to be heard.
    need: usize,
    tasks: Vec<AbortHandle>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Subscriber {
    /// Starts subscribing through each of `clients`, and hears releases
    /// while `need` of them are open; returns at once.
    pub(crate) fn start(clients: Vec<redis::Client>, keys: KeySpace, need: usize) -> Self {
        let hub = ReleaseHub::new();
        let live = Arc::new(AtomicUsize::new(0));
        // The hub wakes one task when a name is first watched; each
        // connection must hear of it.
        let (changed, _) = watch::channel(0u64);
        let mut tasks = vec![tokio::spawn(relay(hub.clone(), changed.clone())).abort_handle()];
        for client in clients {
            let task = supervise(
                client,
                keys.clone(),
                hub.clone(),
                changed.clone(),
                live.clone(),
            );
            tasks.push(tokio::spawn(task).abort_handle());
        }
        Self {
            hub,
            live,
            need,
            tasks,
        }
    }

    /// Whether releases are heard now.
    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire) >= self.need
    }

    /// A watch on `name`'s releases while they are heard; `None` otherwise.
    pub(crate) fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.is_live().then(|| self.hub.watch(name))
    }
}

/// Passes each change of the watched names on to every connection.
async fn relay(hub: ReleaseHub, changed: watch::Sender<u64>) {
    loop {
        hub.changed().await;
        changed.send_modify(|count| *count += 1);
    }
}

/// Keeps a subscriber connection open, opening it again with backoff when
/// it fails, until the backend is dropped.
async fn supervise(
    client: redis::Client,
    keys: KeySpace,
    hub: ReleaseHub,
    changed: watch::Sender<u64>,
    live: Arc<AtomicUsize>,
) {
    let mut retry = FIRST_RETRY;
    let mut reported = false;
    loop {
        let (why, was_live) = serve(&client, &keys, &hub, changed.subscribe(), &live).await;
        if was_live {
            live.fetch_sub(1, Ordering::AcqRel);
            // Releases from now until the connection is back go unheard:
            // every waiter tries once more, and then polls.
            hub.notify_all();
            retry = FIRST_RETRY;
            reported = false;
        }
        if reported {
            tracing::debug!(%why, "the redis subscriber connection is still down");
        } else {
            reported = true;
            tracing::warn!(
                %why,
                "a redis subscriber connection failed: releases on its server go unheard until \
                 it is open again, and waits poll while too few connections are open"
            );
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(MAX_RETRY);
    }
}

/// One subscriber connection, from opening to failure: why it ended, and
/// whether it had been serving.
async fn serve(
    client: &redis::Client,
    keys: &KeySpace,
    hub: &ReleaseHub,
    mut changed: watch::Receiver<u64>,
    live: &AtomicUsize,
) -> (String, bool) {
    let pubsub = match tokio::time::timeout(CALL_TIMEOUT, client.get_async_pubsub()).await {
        Ok(Ok(pubsub)) => pubsub,
        Ok(Err(error)) => return (format!("connecting: {error}"), false),
        Err(_) => {
            return (
                format!("connecting: no answer within {CALL_TIMEOUT:?}"),
                false,
            );
        }
    };
    let (mut sink, mut stream) = pubsub.split();
    let mut subscribed = Subscribed::default();
    if let Err(why) = subscribed.follow(&mut sink, keys, hub).await {
        return (why, false);
    }
    live.fetch_add(1, Ordering::AcqRel);
    tracing::debug!("a redis subscriber connection is open");
    // Whatever was released before the channels were subscribed to went
    // unheard: every waiter tries once more.
    hub.notify_all();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + TICK, TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(message) = message else {
                    return ("the connection closed".to_owned(), true);
                };
                if let Some(name) = subscribed.channels.get(message.get_channel_name()) {
                    hub.notify(name);
                }
            }
            _ = changed.changed() => {
                if let Err(why) = subscribed.follow(&mut sink, keys, hub).await {
                    return (why, true);
                }
            }
            _ = tick.tick() => {
                if let Err(why) = subscribed.follow(&mut sink, keys, hub).await {
                    return (why, true);
                }
                match tokio::time::timeout(CALL_TIMEOUT, sink.ping::<redis::Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => return (format!("PING: {error}"), true),
                    Err(_) => return (format!("PING: no answer within {CALL_TIMEOUT:?}"), true),
                }
            }
        }
    }
}

/// The channels subscribed to, each with its name.
#[derive(Default)]
struct Subscribed {
    channels: HashMap<String, LockName>,
}

impl Subscribed {
    /// Subscribes to the channels of the names watched now and not yet
    /// subscribed to, and unsubscribes from those of names nobody watches
    /// any more. Each newly subscribed name's waiters are woken once: a
    /// release made after their last attempt and before the subscription
    /// took effect went unheard.
    async fn follow(
        &mut self,
        sink: &mut redis::aio::PubSubSink,
        keys: &KeySpace,
        hub: &ReleaseHub,
    ) -> Result<(), String> {
        let watched: HashMap<String, LockName> = hub
            .watched()
            .into_iter()
            .map(|name| (keys.channel(&name), name))
            .collect();
        let new: Vec<&String> = watched
            .keys()
            .filter(|channel| !self.channels.contains_key(*channel))
            .collect();
        let gone: Vec<String> = self
            .channels
            .keys()
            .filter(|channel| !watched.contains_key(*channel))
            .cloned()
            .collect();
        if !new.is_empty() {
            call("SUBSCRIBE", sink.subscribe(&new)).await?;
            for channel in &new {
                hub.notify(&watched[*channel]);
            }
        }
        if !gone.is_empty() {
            call("UNSUBSCRIBE", sink.unsubscribe(&gone)).await?;
        }
        self.channels = watched;
        Ok(())
    }
}

async fn call(
    what: &str,
    future: impl Future<Output = redis::RedisResult<()>>,
) -> Result<(), String> {
    match tokio::time::timeout(CALL_TIMEOUT, future).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(format!("{what}: {error}")),
        Err(_) => Err(format!("{what}: no answer within {CALL_TIMEOUT:?}")),
    }
}

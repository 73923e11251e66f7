//! Release wake-ups: one subscriber connection per backend `SUBSCRIBE`s to
//! the channels of the names its waiters wait for, and wakes them when a
//! release is published there.
//!
//! While that connection is down (not yet open, or lost and being opened
//! again), [`Subscriber::watch`] answers `None` and waits poll; every waiter
//! is woken once when it goes down and once when it is back, since
//! releases in between went unheard.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock_core::{LockName, ReleaseHub, ReleaseWatch};
use futures::StreamExt;
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

/// The subscriber task, which stops when this is dropped.
#[derive(Debug)]
pub(crate) struct Subscriber {
    hub: ReleaseHub,
    live: Arc<AtomicBool>,
    task: AbortHandle,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Subscriber {
    /// Starts subscribing through `client`; returns at once.
    pub(crate) fn start(client: redis::Client, keys: KeySpace) -> Self {
        let hub = ReleaseHub::new();
        let live = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(supervise(client, keys, hub.clone(), live.clone())).abort_handle();
        Self { hub, live, task }
    }

    /// Whether releases are heard now.
    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// A watch on `name`'s releases while they are heard; `None` otherwise.
    pub(crate) fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        self.is_live().then(|| self.hub.watch(name))
    }
}

/// Keeps a subscriber connection open, opening it again with backoff when
/// it fails, until the backend is dropped.
async fn supervise(client: redis::Client, keys: KeySpace, hub: ReleaseHub, live: Arc<AtomicBool>) {
    let mut retry = FIRST_RETRY;
    let mut reported = false;
    loop {
        let (why, was_live) = serve(&client, &keys, &hub, &live).await;
        if was_live {
            live.store(false, Ordering::Release);
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
                "release wake-ups are off: the redis subscriber connection failed; waits poll \
                 until it is open again"
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
    live: &AtomicBool,
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
    live.store(true, Ordering::Release);
    tracing::debug!("release wake-ups are on");
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
            () = hub.changed() => {
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

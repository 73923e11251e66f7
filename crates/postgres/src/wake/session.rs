//! One listening connection, from opening to failure: it listens on the
//! buckets of the names waited for, proves that notifications arrive, and
//! then wakes the waiters of each release it hears.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::LeaseId;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client};

use super::channel::{Bucket, Channel, Channels, NameHash};
use super::inbox::{Heard, Inbox};
use super::state::{Shared, WakeUps};
use crate::error::{describe, notification_queue_full};
use crate::pool::Connections;
use crate::tls::{Connection, Endpoint};

/// How long opening the listening connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a probe may take to come back over the listening connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a `LISTEN` or `UNLISTEN` may take.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the connection gives up channels nobody waits on any more,
/// and, while someone waits, probes that it still delivers: a connection
/// cut without a word would otherwise go unnoticed. A tick that heard a
/// release since the last one needs no probe: the connection delivered.
const TICK: Duration = Duration::from_secs(5);

/// Where the listening connection goes, and how probes are sent.
#[derive(Clone)]
pub(super) struct Target {
    /// Where the listening connection goes, and with what TLS.
    pub(super) endpoint: Endpoint,
    /// The pool releases are sent through, which probes go through too.
    pub(super) connections: Connections,
    pub(super) channels: Channels,
}

impl Target {
    /// `why` with the listening connection's user and password hidden: a
    /// server's refusal names the user, and logs must not.
    pub(super) fn hide_credentials(&self, why: &str) -> String {
        let password = self
            .endpoint
            .config
            .get_password()
            .and_then(|password| std::str::from_utf8(password).ok());
        let mut secrets: Vec<&str> = [self.endpoint.config.get_user(), password]
            .into_iter()
            .flatten()
            .filter(|secret| !secret.is_empty())
            .collect();
        // Longest first, so that a part of one never leaves the rest.
        secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        secrets
            .iter()
            .fold(why.to_owned(), |text, secret| text.replace(secret, "***"))
    }
}

/// Why a session ended.
#[derive(Debug)]
pub(super) enum Ended {
    /// The connection could not be opened or used, or failed; `heard`
    /// says whether a probe had come back over it first.
    Failed { why: String, heard: bool },
    /// The connection worked, but the probe never came back over it.
    Unheard,
}

/// Opens a listening connection and serves it until it fails.
pub(super) async fn run(shared: &Arc<Shared>, target: &Target) -> Ended {
    let connected = tokio::time::timeout(CONNECT_TIMEOUT, target.endpoint.connect()).await;
    let (client, connection) = match connected {
        Ok(Ok(opened)) => opened,
        Ok(Err(error)) => return failed(format!("connecting: {}", describe(&error)), false),
        Err(_) => {
            return failed(
                format!("connecting: no answer within {CONNECT_TIMEOUT:?}"),
                false,
            );
        }
    };
    let inbox = Arc::new(Inbox::new(shared.gauges.clone()));
    let probe = Channel::probe();
    let driver = tokio::spawn(drive(
        connection,
        inbox.clone(),
        probe.clone(),
        shared.clone(),
    ));
    let _stop_driver = AbortOnDrop(driver.abort_handle());
    let mut session = Session {
        shared,
        target,
        client,
        inbox,
        probe,
        listened: HashSet::new(),
    };
    if let Err(why) = session.listen_to_probe_and_waiters().await {
        return failed(why, false);
    }
    match session.probe_comes_back().await {
        Ok(true) => {}
        Ok(false) => return Ended::Unheard,
        Err(why) => return failed(why, false),
    }
    if shared.state() == WakeUps::Reconnecting {
        tracing::info!("release wake-ups are back: the listening connection is open again");
    } else {
        tracing::debug!("release wake-ups are on");
    }
    shared.set(WakeUps::Listening);
    // Whatever was released before the channels were listened to went
    // unheard: every waiter tries once more.
    shared.watched.wake_all();
    failed(session.serve().await, true)
}

fn failed(why: String, heard: bool) -> Ended {
    Ended::Failed { why, heard }
}

/// Ends a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Drives the connection, recording what it hears in `inbox`, until it
/// ends. It never waits for the session (see [`Inbox`]). A release that
/// granted a waiter's place in fair mode wakes that place's waiters here
/// at once, and only when the place is this backend's.
async fn drive(mut connection: Connection, inbox: Arc<Inbox>, probe: Channel, shared: Arc<Shared>) {
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(notification))) => {
                if notification.channel() == probe.as_str() {
                    inbox.probe(notification.payload());
                    continue;
                }
                inbox.heard();
                if let Some(hash) = NameHash::from_payload(notification.payload()) {
                    inbox.release(hash);
                } else if let Some((hash, place)) = NameHash::granting(notification.payload()) {
                    shared.watched.wake_place(hash, place);
                }
            }
            // Notices say nothing about releases.
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                inbox.end(format!("the connection failed: {}", describe(&error)));
                return;
            }
            None => {
                inbox.end("the connection closed".to_owned());
                return;
            }
        }
    }
}

struct Session<'a> {
    shared: &'a Shared,
    target: &'a Target,
    /// The listening connection; nothing else is sent over it.
    client: Client,
    /// What its driver heard.
    inbox: Arc<Inbox>,
    /// This connection's own channel, for probes.
    probe: Channel,
    /// The buckets listened to.
    listened: HashSet<Bucket>,
}

impl Session<'_> {
    /// Listens to the probe's channel and the buckets of the names waited
    /// for now.
    async fn listen_to_probe_and_waiters(&mut self) -> Result<(), String> {
        self.execute(&self.probe.listen()).await?;
        self.listen_to_new_buckets().await
    }

    /// Sends a probe the way releases are sent, and waits for it to come
    /// back over this connection. Releases heard meanwhile wake their
    /// waiters.
    async fn probe_comes_back(&mut self) -> Result<bool, String> {
        let nonce = self.send_probe().await.map_err(|error| error.to_string())?;
        let deadline = Instant::now() + PROBE_TIMEOUT;
        loop {
            let Ok(heard) = tokio::time::timeout_at(deadline, self.inbox.next()).await else {
                return Ok(false);
            };
            match heard {
                Heard::Probe(payload) => {
                    if payload == nonce {
                        return Ok(true);
                    }
                }
                Heard::Ended(why) => return Err(why),
                other => self.wake(other),
            }
        }
    }

    /// Wakes the waiters of each release heard, follows the names waited
    /// for, and probes now and then, until the connection fails; returns
    /// why it did.
    async fn serve(&mut self) -> String {
        let mut tick = tokio::time::interval_at(Instant::now() + TICK, TICK);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The nonce of the probe on its way, and when it was sent.
        let mut probing: Option<(String, Instant)> = None;
        loop {
            tokio::select! {
                biased;
                heard = self.inbox.next() => match heard {
                    Heard::Probe(payload) => {
                        if probing.as_ref().is_some_and(|(nonce, _)| *nonce == payload) {
                            probing = None;
                        }
                    }
                    Heard::Ended(why) => return why,
                    other => self.wake(other),
                },
                () = self.shared.watched.hub().changed() => {
                    if let Err(why) = self.listen_to_new_buckets().await {
                        return why;
                    }
                }
                _ = tick.tick() => {
                    if let Some((_, sent)) = &probing
                        && sent.elapsed() > PROBE_TIMEOUT
                    {
                        return format!("a probe did not come back within {PROBE_TIMEOUT:?}");
                    }
                    self.shared.watched.prune();
                    if let Err(why) = self.unlisten_stale_buckets().await {
                        return why;
                    }
                    // A release heard since the last tick shows that the
                    // connection delivers: no probe then, so that waiting
                    // processes add no statements of their own while
                    // releases flow.
                    let heard_a_release = self.inbox.take_heard();
                    if probing.is_none() && !self.listened.is_empty() && !heard_a_release {
                        match self.send_probe().await {
                            Ok(nonce) => probing = Some((nonce, Instant::now())),
                            // Releases are then sent without their
                            // notifications: waits must poll until a probe
                            // goes through again.
                            Err(error) if notification_queue_full(&error) => {
                                return format!(
                                    "the server's notification queue is full \
                                     (a listening session has stopped reading it): {error}"
                                );
                            }
                            // The pool's trouble, not this connection's:
                            // waiters meet it in their own statements.
                            Err(error) => tracing::debug!(%error, "a probe could not be sent"),
                        }
                    }
                }
            }
        }
    }

    /// Wakes the waiters of the releases heard: those of the names of each
    /// hash, or, after an overflow, every waiter.
    fn wake(&self, heard: Heard) {
        match heard {
            Heard::Releases(hashes) => {
                for hash in hashes {
                    self.shared.watched.wake(hash);
                }
            }
            Heard::Overflowed => {
                tracing::debug!(
                    "more releases were announced than the listener keeps; every waiter tries again"
                );
                self.shared.watched.wake_all();
            }
            Heard::Probe(_) | Heard::Ended(_) => {}
        }
    }

    /// The buckets of the names waited for now.
    fn wanted(&self) -> HashSet<Bucket> {
        self.shared.watched.buckets()
    }

    /// Listens to the buckets of newly watched names. Their waiters then
    /// try once more: a release just before the `LISTEN` went unheard.
    async fn listen_to_new_buckets(&mut self) -> Result<(), String> {
        let new: Vec<Bucket> = self.wanted().difference(&self.listened).copied().collect();
        if new.is_empty() {
            return Ok(());
        }
        let channels = self.target.channels;
        let sql: String = new
            .iter()
            .map(|bucket| channels.of(*bucket).listen())
            .collect();
        self.execute(&sql).await?;
        self.listened.extend(&new);
        self.shared.watched.wake_in(&new);
        Ok(())
    }

    /// Stops listening to buckets nobody here waits on any more.
    async fn unlisten_stale_buckets(&mut self) -> Result<(), String> {
        let wanted = self.wanted();
        let stale: Vec<Bucket> = self.listened.difference(&wanted).copied().collect();
        if stale.is_empty() {
            return Ok(());
        }
        let channels = self.target.channels;
        let sql: String = stale
            .iter()
            .map(|bucket| channels.of(*bucket).unlisten())
            .collect();
        self.execute(&sql).await?;
        self.listened.retain(|bucket| wanted.contains(bucket));
        Ok(())
    }

    /// Runs `LISTEN` or `UNLISTEN` statements on this connection.
    async fn execute(&self, sql: &str) -> Result<(), String> {
        match tokio::time::timeout(STATEMENT_TIMEOUT, self.client.batch_execute(sql)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(format!("listening: {}", describe(&error))),
            Err(_) => Err(format!("listening: no answer within {STATEMENT_TIMEOUT:?}")),
        }
    }

    /// Notifies this connection's probe channel through the pool, as a
    /// release would be; returns the probe's random payload.
    async fn send_probe(&self) -> Result<String, distlock_core::Error> {
        let nonce = LeaseId::random().to_string();
        let channel = self.probe.as_str();
        self.target
            .connections
            .query(
                "probing release wake-ups",
                "SELECT pg_notify($1, $2)",
                &[(&channel, Type::TEXT), (&nonce, Type::TEXT)],
                PROBE_TIMEOUT,
            )
            .await?;
        Ok(nonce)
    }
}

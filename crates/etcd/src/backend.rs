//! The [`Backend`] on etcd: [`EtcdBackend`] and every trait it
//! implements. A campaign's attempts and term record, and the move of a
//! delayed release, are functions of the modules below, which the impls
//! call.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use distlock_core::backend::Waiters;
use distlock_core::backend::{
    Abilities, AcquireRequest, Attempt, Backend, Capabilities, DelayedRelease, Extended,
    GrantState, Lease, ReleaseHub, ReleaseWatch, Renewal, Resumes, ServerInfo, Session, Term,
    TermLog, WaitState, WaiterList, Wakeups, async_trait,
};
use distlock_core::{Claim, Error, Holder, LockInfo, LockName, Permits, Result, Waiter};

use crate::config::EtcdConfig;
use crate::deployment;
use crate::error::{from_etcd, is_lease_not_found};
use crate::grant::{Grant, granted};
use crate::keys::{NameRange, Record, locks_start, name_of_key, prefix_end};
use crate::leftovers::Leftovers;
use crate::raw::etcdserverpb::compare::CompareResult;
use crate::raw::etcdserverpb::{DeleteRangeRequest, TxnRequest, TxnResponse};
use crate::raw::{Client, ConnectOptions};
use crate::release;
use crate::requests::{self, create_revision, mod_revision, name_keys, over, put_op, read_op};
use crate::rules::{Entry, Standing, holds, in_order, standing};
use crate::session::{SessionId, Sessions};
use crate::transactions::{self, TRY_ROUNDS, entries_of, header_revision};
use crate::waiting::{Behind, Waiting};
use crate::watch::{Task, Watched, deleted};

mod campaign;
mod delayed;
mod resume;

/// distlock's etcd backend; see the [crate docs](crate).
pub struct EtcdBackend {
    config: EtcdConfig,
    /// Every call but the sessions' goes through it; they keep a clone.
    client: Client,
    sessions: Sessions,
    leftovers: Leftovers,
    hub: ReleaseHub,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EtcdBackend {
    /// Opens the backend at `url`; see the [crate docs](crate) for the URL.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad URL or an unreadable CA file;
    /// with credentials, a backend error when etcd refuses them (a wrong
    /// user or password, or authentication not enabled on the members) or
    /// when no member can be reached to authenticate. Without credentials
    /// nothing is sent yet: the members are first reached by the first call.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped, it leaves nothing behind.
    pub async fn open(url: &str) -> Result<Self> {
        Self::connect(EtcdConfig::parse(url)?).await
    }

    /// Opens the backend from a parsed configuration.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    ///
    /// # Cancel safety
    /// As [`open`](Self::open).
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        let mut options = ConnectOptions::new(config.endpoint_urls())
            .with_connect_timeout(Duration::from_secs(5))
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5));
        if let Some((user, password)) = &config.credentials {
            options = options.with_credentials(user.clone(), password.clone());
        }
        if config.tls {
            let ca_pem = match &config.ca {
                Some(ca) => Some(std::fs::read(ca).map_err(|error| {
                    Error::config("ca", format!("cannot read {}: {error}", ca.display()))
                })?),
                None => None,
            };
            options = options.with_tls(ca_pem);
        }
        let client = Client::connect(&options)
            .await
            .map_err(|e| from_etcd("connecting", e))?;
        Ok(Self {
            sessions: Sessions::new(client.clone()),
            client,
            leftovers: Leftovers::default(),
            hub: ReleaseHub::new(),
            config,
        })
    }

    /// The configuration this backend was opened with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    /// The first key (inclusive) and the end (exclusive) of `name`'s keys.
    pub fn key_range(&self, name: &LockName) -> (Vec<u8>, Vec<u8>) {
        let range = self.range(name);
        let end = range.end();
        (range.start, end)
    }

    /// Every name's keys, holders and waiters, each name's in the order
    /// of their revisions: one read of the whole prefix.
    async fn lines(&self, what: &str) -> Result<BTreeMap<LockName, Vec<Entry>>> {
        // From the first lock key: the records of terms sort before it.
        let start = locks_start(&self.config.prefix);
        let end = prefix_end(self.config.prefix.as_bytes());
        let response = self
            .client
            .range(requests::oldest_first(start, end))
            .await
            .map_err(|e| from_etcd(what, e))?;
        let mut names: BTreeMap<LockName, Vec<Entry>> = BTreeMap::new();
        for kv in &response.kvs {
            if let Some(name) = name_of_key(&self.config.prefix, &kv.key) {
                names.entry(name).or_default().push(Entry::from_kv(kv));
            }
        }
        Ok(names
            .into_iter()
            .map(|(name, entries)| (name, in_order(entries)))
            .collect())
    }

    fn range(&self, name: &LockName) -> NameRange {
        NameRange::new(&self.config.prefix, name)
    }

    async fn txn(&self, txn: TxnRequest, what: &str) -> Result<TxnResponse> {
        transactions::run(&self.client, txn, what).await
    }

    /// Whether `request` waits in fair mode's queue: a wait for the whole
    /// lock, on a backend in fair mode.
    fn in_line(&self, request: &AcquireRequest) -> bool {
        self.config.fair && request.retries && request.claim == Claim::Exclusive
    }

    /// One attempt on `session`: a campaign's that does not queue (which
    /// records its term), a wait's (a fair campaign's too, which records
    /// its term when its turn comes), or a single try.
    async fn attempt(
        &self,
        request: &AcquireRequest,
        wait: &mut WaitState,
        session: SessionId,
    ) -> Result<Attempt> {
        if request.records_term && !self.in_line(request) {
            let prefix = &self.config.prefix;
            campaign::campaign_once(&self.client, prefix, &self.hub, request, wait, session).await
        } else if request.retries {
            self.wait_once(request, wait, session).await
        } else {
            self.try_once(request, session).await
        }
    }

    /// A single try: write a key only if it would hold, in a transaction
    /// that fails if the name changed since it was read, so that a loss
    /// leaves no key behind.
    async fn try_once(&self, request: &AcquireRequest, session: SessionId) -> Result<Attempt> {
        let range = self.range(&request.name);
        let key = range.try_key(request.lease_id);
        let record = Record::new(request.claim, &request.holder, request.lease_id).to_bytes();
        // First guess: the name is free.
        let mut guard = over(
            create_revision(range.start.clone(), CompareResult::Equal, 0),
            range.end(),
        );
        for _ in 0..TRY_ROUNDS {
            let txn = TxnRequest {
                compare: vec![guard],
                success: vec![put_op(key.clone(), record.clone(), session.0)],
                failure: vec![read_op(name_keys(&range))],
            };
            let response = self.txn(txn, "trying a lock").await?;
            let revision = header_revision(&response);
            if response.succeeded {
                let written = (revision, revision);
                return Ok(granted(&self.client, request, key, written, session));
            }
            let entries = entries_of(&response);
            match standing(&request.name, request.claim, &entries, entries.len())? {
                Standing::Waits(_) => return Ok(Attempt::Held { retry_after: None }),
                // It would hold now: write unless the name changed since.
                Standing::Holds => {
                    guard = over(
                        mod_revision(range.start.clone(), CompareResult::Less, revision + 1),
                        range.end(),
                    );
                }
            }
        }
        Ok(Attempt::Held { retry_after: None })
    }

    /// One attempt of a wait: its key is created at the first attempt (and
    /// again if it went, with a forced release or the session), and it
    /// holds once the keys before it allow.
    async fn wait_once(
        &self,
        request: &AcquireRequest,
        wait: &mut WaitState,
        session: SessionId,
    ) -> Result<Attempt> {
        let range = self.range(&request.name);
        let mut waiting = wait.take::<Waiting>().unwrap_or_else(|| Waiting {
            key: range.key(rand::random()),
            behind: None,
            written: false,
        });
        if let Some(left) = self.unchanged_for(request, &waiting, session) {
            // Woken for another waiter of the name in this process: nothing
            // that decides this one's turn changed, so it costs no read.
            wait.set(waiting);
            return Ok(Attempt::Held {
                retry_after: Some(left),
            });
        }
        let key = waiting.key.clone();
        // Kept before the call, so an answer lost after it still lets
        // `end_wait` remove the key.
        wait.set(Waiting {
            key: key.clone(),
            behind: None,
            written: waiting.written,
        });
        // A waiter whose key is in place only reads: a transaction that
        // may write is proposed through raft even when its compare fails,
        // so idle waiters retrying would cost the cluster fsyncs.
        let read_at = Instant::now();
        let read = if waiting.written {
            self.read_with(&range, &key).await?
        } else {
            None
        };
        let (revision, entries) = match read {
            Some(read) => read,
            None => self.write_and_read(request, &range, &key, session).await?,
        };
        let Some(position) = entries.iter().position(|entry| entry.key == key) else {
            // Deleted between the write and the read in one transaction
            // cannot happen; a missing key means a reply we cannot read.
            return Err(Error::Backend {
                backend: "etcd",
                message: "a waiter's key was missing from the reply that wrote it".into(),
                source: None,
            });
        };
        let own = (entries[position].revision, entries[position].modified);
        match standing(&request.name, request.claim, &entries, position) {
            Err(conflict) => {
                // The wait ends with this error: take the key back now.
                self.delete_key(&key, request.operation_timeout).await.ok();
                wait.take::<Waiting>();
                Err(conflict)
            }
            Ok(Standing::Holds) if request.records_term => {
                // A fair campaign's turn: it records its term as it takes
                // the grant over. Its key is known written from here on.
                wait.set(Waiting {
                    key: key.clone(),
                    behind: None,
                    written: true,
                });
                let (client, prefix) = (&self.client, &self.config.prefix);
                campaign::take_over(
                    client,
                    prefix,
                    request,
                    wait,
                    key,
                    &entries[position],
                    session,
                )
                .await
            }
            Ok(Standing::Holds) => {
                wait.take::<Waiting>();
                Ok(granted(&self.client, request, key, own, session))
            }
            Ok(Standing::Waits(index)) => {
                // A permit may be let in by any holder leaving, not only
                // the one just before it.
                let watched = match request.claim {
                    Claim::Permit { .. } => Watched::AnyOf {
                        start: range.start.clone(),
                        end: range.end(),
                    },
                    _ => Watched::Predecessor(entries[index].key.clone()),
                };
                let behind = match waiting.behind.take() {
                    Some(behind)
                        if behind.key == watched.key() && !behind.gone.load(Ordering::Acquire) =>
                    {
                        Behind {
                            read_at,
                            session,
                            ..behind
                        }
                    }
                    _ => {
                        let gone = Arc::new(AtomicBool::new(false));
                        let (client, name, hub, key, seen) = (
                            self.client.clone(),
                            request.name.clone(),
                            self.hub.clone(),
                            watched.key().to_vec(),
                            gone.clone(),
                        );
                        let task = Task::spawn(async move {
                            deleted(client, watched, revision).await;
                            seen.store(true, Ordering::Release);
                            hub.notify(&name);
                        });
                        Behind {
                            key,
                            gone,
                            read_at,
                            session,
                            _watch: task,
                        }
                    }
                };
                wait.set(Waiting {
                    key,
                    behind: Some(behind),
                    written: true,
                });
                // In fair mode the watch is what wakes the waiter: its key
                // keeps its place on the session, which the keeper renews,
                // so it reads again only now and then, in case a watch
                // broke unseen. Otherwise it reads at each backoff.
                let retry_after = self.in_line(request).then_some(request.lease / 2);
                Ok(Attempt::Held { retry_after })
            }
        }
    }

    /// How long a fair waiter may go without reading, when nothing that
    /// decides its turn changed since it last read: its predecessor's watch
    /// saw no deletion, its session is the same, and its read is less than
    /// half a lease old (then it reads anyway, in case a watch broke
    /// unseen). Only the predecessor's deletion can make a whole lock's
    /// waiter first: keys before it going leave the predecessor before it.
    fn unchanged_for(
        &self,
        request: &AcquireRequest,
        waiting: &Waiting,
        session: SessionId,
    ) -> Option<Duration> {
        if !self.in_line(request) || !waiting.written {
            return None;
        }
        let behind = waiting.behind.as_ref()?;
        if behind.gone.load(Ordering::Acquire) || behind.session != session {
            return None;
        }
        let left = (request.lease / 2).checked_sub(behind.read_at.elapsed())?;
        (!left.is_zero()).then_some(left)
    }

    /// The name's keys, read linearizably, with the revision they were
    /// read at; `None` if `key` is not among them (it went with a forced
    /// release or its session, and is to be written again).
    async fn read_with(&self, range: &NameRange, key: &[u8]) -> Result<Option<(i64, Vec<Entry>)>> {
        let response = self
            .client
            .range(name_keys(range))
            .await
            .map_err(|e| from_etcd("waiting for a lock", e))?;
        let revision = response.header.as_ref().map_or(0, |header| header.revision);
        let entries = in_order(response.kvs.iter().map(Entry::from_kv).collect());
        Ok(entries
            .iter()
            .any(|entry| entry.key == key)
            .then_some((revision, entries)))
    }

    /// Writes the waiter's `key` unless it is there, and reads the name's
    /// keys, in one transaction; with the revision it ran at.
    async fn write_and_read(
        &self,
        request: &AcquireRequest,
        range: &NameRange,
        key: &[u8],
        session: SessionId,
    ) -> Result<(i64, Vec<Entry>)> {
        let record = Record::new(request.claim, &request.holder, request.lease_id).to_bytes();
        let txn = TxnRequest {
            compare: vec![create_revision(key.to_vec(), CompareResult::Equal, 0)],
            success: vec![
                put_op(key.to_vec(), record, session.0),
                read_op(name_keys(range)),
            ],
            failure: vec![read_op(name_keys(range))],
        };
        let response = self.txn(txn, "waiting for a lock").await?;
        Ok((header_revision(&response), entries_of(&response)))
    }

    /// How long until etcd ends `session` unless it is renewed, read once
    /// per session into `known`. It is the session's padded TTL (see the
    /// session module): the most a crashed holder's keys could outlive it.
    async fn time_left(
        &self,
        session: i64,
        known: &mut BTreeMap<i64, Option<Duration>>,
    ) -> Result<Option<Duration>> {
        if session == 0 {
            return Ok(None);
        }
        if let Some(left) = known.get(&session) {
            return Ok(*left);
        }
        let response = self
            .client
            .lease_time_to_live(session)
            .await
            .map_err(|e| from_etcd("reading a session's time left", e))?;
        // A negative TTL: the session ended as it was read.
        let left = Some(Duration::from_secs(
            u64::try_from(response.ttl).unwrap_or(0),
        ));
        known.insert(session, left);
        Ok(left)
    }

    /// Deletes our own `key`; unless etcd answers, it is noted as a
    /// leftover, to be deleted again at the next renewal. A failure that
    /// may pass (an election) is tried again for up to `within`.
    async fn delete_key(&self, key: &[u8], within: Duration) -> Result<bool> {
        let pending = self.leftovers.pending(key);
        let deleted = release::delete(&self.client, key, within).await?;
        pending.answered();
        Ok(deleted)
    }

    /// Deletes the key of `lease`'s name whose record names `lease`'s
    /// identity, if it is unchanged since read: the grant of a resume whose
    /// answer was lost. Whether there was one.
    async fn release_by_identity(&self, lease: &Lease) -> Result<bool> {
        let range = self.range(&lease.name);
        let read = self
            .client
            .range(name_keys(&range))
            .await
            .map_err(|e| from_etcd("finding a lock by its identity", e))?;
        let Some(kv) = read
            .kvs
            .iter()
            .find(|kv| Record::parse(&kv.value).is_some_and(|record| record.is_of(lease.id)))
        else {
            return Ok(false);
        };
        let txn = TxnRequest {
            compare: vec![
                create_revision(kv.key.clone(), CompareResult::Equal, kv.create_revision),
                mod_revision(kv.key.clone(), CompareResult::Equal, kv.mod_revision),
            ],
            success: vec![requests::delete_op(&kv.key)],
            failure: Vec::new(),
        };
        // Deleted again at the next renewal if etcd does not answer.
        let pending = self
            .leftovers
            .pending_grant(&kv.key, (kv.create_revision, kv.mod_revision));
        let deleted = self.txn(txn, "releasing a lock").await?.succeeded;
        pending.answered();
        Ok(deleted)
    }

    /// Confirms one grant: its key is still as the grant wrote it (not
    /// deleted, nor taken up by a resume), and its session still lives.
    async fn confirm_grant(&self, lease: &Lease) -> Result<bool> {
        let Some(grant) = lease.state.get::<Grant>().filter(|g| g.id == lease.id) else {
            return Ok(false);
        };
        let current = self
            .client
            .range(requests::key(grant.key.clone()))
            .await
            .map_err(|e| from_etcd("reading a lock", e))?;
        let ours = current.kvs.first().is_some_and(|kv| {
            kv.create_revision == grant.revision && kv.mod_revision == grant.modified
        });
        if !ours {
            return Ok(false);
        }
        self.sessions.confirm(grant.session).await
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    fn store_name(&self) -> &'static str {
        "etcd"
    }

    /// The member's version; etcd has no clock that leases are judged by.
    /// Whether a watch is confirmed is waited for half the time the
    /// version left of `limit` at most, so that the answer comes in time.
    async fn server_info(&self, limit: Duration) -> Result<ServerInfo> {
        let started = tokio::time::Instant::now();
        let status = self
            .client
            .status()
            .await
            .map_err(|e| from_etcd("asking the server for its version", e))?;
        let left = limit.saturating_sub(started.elapsed());
        let mut probe = self.config.prefix.as_bytes().to_vec();
        probe.extend_from_slice(b"distlock-check-watch");
        Ok(
            ServerInfo::new(Some(format!("etcd {}", status.version)), None)
                .with_feature(deployment::watch(&self.client, probe, left / 2).await),
        )
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::lease_based()
            .with_shared(true)
            .with_semaphores(true)
            .with_fair(self.config.fair)
    }

    async fn try_acquire(&self, request: &AcquireRequest, wait: &mut WaitState) -> Result<Attempt> {
        let session = self.sessions.ensure(request.lease).await?;
        match self.attempt(request, wait, session).await {
            Err(error) if is_lease_not_found(&error) => {
                // The session ended while unused: start another, once.
                self.sessions.forget(session).await;
                let session = self.sessions.ensure(request.lease).await?;
                self.attempt(request, wait, session).await
            }
            other => other,
        }
    }

    async fn end_wait(&self, request: &AcquireRequest, mut wait: WaitState) -> Result<()> {
        if let Some(waiting) = wait.take::<Waiting>() {
            // A key recorded for a write whose answer was lost may land
            // after this delete, and would leave a waiter nobody serves.
            if !self
                .delete_key(&waiting.key, request.operation_timeout)
                .await?
            {
                self.leftovers.recheck(&self.client, waiting.key);
            }
        }
        Ok(())
    }

    /// Confirms each grant. Core renews the session instead, which keeps
    /// every grant on it.
    async fn extend_many(&self, leases: &[Lease]) -> Extended {
        Extended::each(leases, |lease| self.confirm_grant(lease)).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let Some(grant) = lease.state.get::<Grant>() else {
            // A grant whose answer was lost: a single try's key is named
            // after its identity. Its write may still land after this
            // delete, which then finds nothing.
            let key = self.range(&lease.name).try_key(lease.id);
            let deleted = self.delete_key(&key, lease.operation_timeout).await?;
            if !deleted {
                self.leftovers.recheck(&self.client, key);
                // A resume's: the key it took up records its identity.
                return self.release_by_identity(lease).await;
            }
            return Ok(deleted);
        };
        if grant.id != lease.id {
            return Ok(false);
        }
        grant.releasing.store(true, Ordering::Release);
        let pending = self
            .leftovers
            .pending_grant(&grant.key, (grant.revision, grant.modified));
        let released =
            release::delete_if_ours(&self.client, grant, lease.operation_timeout).await?;
        pending.answered();
        if !released {
            // Gone before this release: the holder hears of the loss
            // before the release answers that the lock was not ours.
            grant.loss.report();
        }
        Ok(released)
    }

    /// A few requests, which core's timer bounds.
    async fn list(&self, _: Duration) -> Result<Vec<LockInfo>> {
        let mut time_left = BTreeMap::new();
        let mut infos = Vec::new();
        for (name, entries) in self.lines("listing locks").await? {
            let holders: Vec<&Entry> = (0..entries.len())
                .filter(|&i| holds(&entries, i))
                .map(|i| &entries[i])
                .collect();
            let in_use = u32::try_from(holders.len()).unwrap_or(u32::MAX);
            for entry in holders {
                infos.push(LockInfo {
                    name: name.clone(),
                    kind: entry.claim.kind(),
                    permits: entry.claim.limit().map(|limit| Permits { in_use, limit }),
                    holder: entry.record.as_ref().map(|r| r.holder.clone()),
                    fencing_token: u64::try_from(entry.revision).ok(),
                    expires_in: self.time_left(entry.session, &mut time_left).await?,
                    waiters: Waiters::Unknown,
                });
            }
        }
        Ok(infos)
    }

    /// One request, which core's timer bounds.
    async fn force_release(&self, name: &LockName, _: Duration) -> Result<bool> {
        let range = self.range(name);
        let response = self
            .client
            .delete_range(DeleteRangeRequest {
                key: range.start.clone(),
                range_end: range.end(),
            })
            .await
            .map_err(|e| from_etcd("force-releasing a lock", e))?;
        Ok(response.deleted > 0)
    }

    /// Revokes the session, as etcd's own `Session.Close()` does: every
    /// key of this backend goes at once, rather than a TTL after the
    /// process exits.
    async fn close(&self) -> Result<()> {
        self.sessions.close().await
    }

    fn abilities(&self) -> Abilities<'_> {
        Abilities::none()
            .with_session(self)
            .with_wakeups(self)
            .with_delayed_release(self)
            .with_term_log(self)
            .with_waiters(self)
            .with_resumes(self)
    }
}

/// A read of the name's keys, one of the grant's session, and one
/// transaction that rewrites the grant's key: see the `resume` module.
/// Every claim and both modes: a grant of any claim is one key, and its
/// place in line is its create revision, which the rewrite keeps.
#[async_trait]
impl Resumes for EtcdBackend {
    async fn resume(&self, lease: &Lease, request: &AcquireRequest) -> Result<Option<GrantState>> {
        let prefix = &self.config.prefix;
        let session = self.sessions.ensure(request.lease).await?;
        match resume::take_up(&self.client, prefix, lease, request, session).await {
            Err(error) if is_lease_not_found(&error) => {
                // The session ended while unused: start another, once.
                self.sessions.forget(session).await;
                let session = self.sessions.ensure(request.lease).await?;
                resume::take_up(&self.client, prefix, lease, request, session).await
            }
            other => other,
        }
    }
}

/// Every wait keeps a key in its name's line (a single try writes one
/// only when it holds), so the keys that do not hold are the waiters, in
/// the order of their revisions. etcd keeps no time with a key.
#[async_trait]
impl WaiterList for EtcdBackend {
    fn sees_every_wait(&self) -> bool {
        true
    }

    async fn waiters(&self, _: Duration) -> Result<Vec<(LockName, Waiter)>> {
        let mut waiting = Vec::new();
        for (name, entries) in self.lines("listing waiters").await? {
            for (position, entry) in entries.iter().enumerate() {
                if holds(&entries, position) {
                    continue;
                }
                let waiter = Waiter {
                    kind: entry.claim.kind(),
                    holder: entry.record.as_ref().map(|record| record.holder.clone()),
                    waiting_for: None,
                };
                waiting.push((name.clone(), waiter));
            }
        }
        Ok(waiting)
    }
}

#[async_trait]
impl Session for EtcdBackend {
    fn session_of(&self, lease: &Lease) -> Option<distlock_core::backend::SessionId> {
        let grant = lease.state.get::<Grant>().filter(|g| g.id == lease.id)?;
        Some(grant.session.for_core())
    }

    async fn renew(&self) -> Result<Renewal> {
        self.leftovers.retry(&self.client);
        self.sessions.renew().await
    }
}

#[async_trait]
impl TermLog for EtcdBackend {
    /// One request, which core's timer bounds.
    async fn terms_after(&self, name: &LockName, after: u64, _: Duration) -> Result<Vec<Term>> {
        campaign::terms_after(&self.client, &self.config.prefix, name, after).await
    }

    /// Rewrites the record in a transaction guarded by a compare on it
    /// (as read), read again and retried when another write came between.
    /// A grant whose answer never came is found by its key, whose create
    /// revision is its term.
    async fn withdraw(&self, lease: &Lease, holder: &Holder) -> Result<()> {
        campaign::withdraw(&self.client, &self.config.prefix, lease, holder).await
    }
}

// The grant's key moves onto an etcd lease of its own: see the `delayed`
// module.
#[async_trait]
impl DelayedRelease for EtcdBackend {
    async fn release_after(&self, lease: &Lease, remaining: Duration) -> Result<bool> {
        let Some(grant) = lease
            .state
            .get::<Grant>()
            .filter(|grant| grant.id == lease.id)
        else {
            return Ok(false);
        };
        // A move that fails leaves the key to be deleted at the next
        // renewal, early, rather than kept by the session for as long as
        // this client is busy.
        let pending = self
            .leftovers
            .pending_grant(&grant.key, (grant.revision, grant.modified));
        let moved = delayed::move_to_own_lease(&self.client, grant, remaining).await?;
        pending.answered();
        Ok(moved)
    }
}

impl Wakeups for EtcdBackend {
    fn watch(&self, name: &LockName) -> Option<ReleaseWatch> {
        Some(self.hub.watch(name))
    }
}
